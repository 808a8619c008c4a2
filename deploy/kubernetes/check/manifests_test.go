// Package check checks the Kubernetes manifests of deploy/kubernetes
// offline: every document decodes strictly into its k8s.io/api (or
// Prometheus Operator) type, and the ports, probes, volumes and secret
// references agree with the configuration the daemon will load from the
// ConfigMap, the image's variables (Containerfile) and the pod's env.
//
// A module of its own so that k8s.io/api stays out of the daemon's go.mod
// (docs/deployment.md). Run: cd deploy/kubernetes/check && go test ./...
package check

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/surveysync/surveysync/config"
)

const (
	base          = "../base"
	containerfile = "../../../Containerfile"
)

// kustomization is the subset of kustomize's file the base may use; a
// field outside it fails the strict decode, so the test never misses a
// transformation it does not apply.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

type manifests struct {
	configMaps   []corev1.ConfigMap
	statefulSets []appsv1.StatefulSet
	services     []corev1.Service
	podMonitors  []monitoringv1.PodMonitor
}

// decodeAll decodes each YAML document of data strictly into the type its
// kind names.
func decodeAll(t *testing.T, name string, data []byte, m *manifests) {
	t.Helper()
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		strict := func(v any) {
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatalf("%s document %d (%s %s): %v", name, i, head.APIVersion, head.Kind, err)
			}
		}
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			var v corev1.ConfigMap
			strict(&v)
			m.configMaps = append(m.configMaps, v)
		case "apps/v1 StatefulSet":
			var v appsv1.StatefulSet
			strict(&v)
			m.statefulSets = append(m.statefulSets, v)
		case "v1 Service":
			var v corev1.Service
			strict(&v)
			m.services = append(m.services, v)
		case "monitoring.coreos.com/v1 PodMonitor":
			var v monitoringv1.PodMonitor
			strict(&v)
			m.podMonitors = append(m.podMonitors, v)
		case "v1 Secret":
			var v corev1.Secret
			strict(&v)
		default:
			t.Fatalf("%s document %d: unexpected %s %s (add it to the test)", name, i, head.APIVersion, head.Kind)
		}
	}
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

func loadBase(t *testing.T) (kustomization, manifests) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var m manifests
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(base, r))
		if err != nil {
			t.Fatalf("kustomization.yaml names %s: %v", r, err)
		}
		decodeAll(t, r, data, &m)
	}
	// every manifest in the folder is either a resource or an example
	files, _ := filepath.Glob(filepath.Join(base, "*.yaml"))
	for _, f := range files {
		n := filepath.Base(f)
		if n != "kustomization.yaml" && !strings.HasSuffix(n, ".example.yaml") && !slices.Contains(k.Resources, n) {
			t.Errorf("%s is not in kustomization.yaml's resources", n)
		}
	}
	return k, m
}

// imageEnv reads the ENV and USER instructions of the Containerfile.
func imageEnv(t *testing.T) (env []string, user string, exposed []int32) {
	t.Helper()
	raw, err := os.ReadFile(containerfile)
	if err != nil {
		t.Fatal(err)
	}
	// join continuation lines
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "ENV":
			for _, kv := range f[1:] {
				if !strings.Contains(kv, "=") {
					t.Fatalf("Containerfile: ENV %q: use the KEY=value form", kv)
				}
				env = append(env, kv)
			}
		case "USER":
			user = f[1]
		case "EXPOSE":
			for _, p := range f[1:] {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Fatalf("Containerfile: EXPOSE %q", p)
				}
				exposed = append(exposed, int32(n))
			}
		}
	}
	return env, user, exposed
}

func portOf(t *testing.T, listen string) int32 {
	t.Helper()
	i := strings.LastIndex(listen, ":")
	n, err := strconv.Atoi(listen[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("listen address %q has no port", listen)
	}
	return int32(n)
}

func namedPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func TestSingleDaemonManifests(t *testing.T) {
	_, m := loadBase(t)
	sts, _ := checkDaemon(t, m, nil)
	if *sts.Spec.Replicas != 1 {
		t.Errorf("replicas %d: the single-daemon base runs one (HA is an overlay)", *sts.Spec.Replicas)
	}
}

// checkDaemon checks the manifests of one StatefulSet of daemons (base or
// overlay) and returns it with the configuration its pods load (extraEnv:
// values of the pod's valueFrom variables, made up).
func checkDaemon(t *testing.T, m manifests, extraEnv []string) (appsv1.StatefulSet, *config.Config) {
	t.Helper()
	if len(m.statefulSets) != 1 || len(m.configMaps) != 1 || len(m.podMonitors) != 1 {
		t.Fatalf("want one StatefulSet, ConfigMap and PodMonitor; have %d, %d, %d", len(m.statefulSets), len(m.configMaps), len(m.podMonitors))
	}
	sts, cm := m.statefulSets[0], m.configMaps[0]
	pod := sts.Spec.Template
	if !matches(sts.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("StatefulSet selector %v does not select its pods %v", sts.Spec.Selector.MatchLabels, pod.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The configuration file comes from the ConfigMap, mounted where --config points.
	cfgPath := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	if cfgPath == "" {
		t.Fatalf("container args %v have no --config", c.Args)
	}
	mountOf := func(path string) (corev1.VolumeMount, bool) {
		var best corev1.VolumeMount
		for _, vm := range c.VolumeMounts {
			if (path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/")) && len(vm.MountPath) > len(best.MountPath) {
				best = vm
			}
		}
		return best, best.Name != ""
	}
	vm, ok := mountOf(cfgPath)
	if !ok {
		t.Fatalf("--config %s is on no volume", cfgPath)
	}
	var cfgVol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == vm.Name {
			cfgVol = &pod.Spec.Volumes[i]
		}
	}
	if cfgVol == nil || cfgVol.ConfigMap == nil || cfgVol.ConfigMap.Name != cm.Name {
		t.Fatalf("--config %s: volume %s is not the ConfigMap %s", cfgPath, vm.Name, cm.Name)
	}
	key := strings.TrimPrefix(cfgPath, vm.MountPath+"/")
	file, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, key)
	}

	// The token comes from a Secret, never from the ConfigMap.
	secret := ""
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil {
			secret = ef.SecretRef.Name
		}
	}
	if secret == "" {
		t.Error("the container takes no Secret (envFrom secretRef) for SURVEYSYNC_API__TOKEN")
	}
	if strings.Contains(file, "token:") || strings.Contains(file, "password:") {
		t.Error("the ConfigMap holds a secret key; put it in the Secret")
	}

	// The configuration the daemon loads: the file, then the image's
	// variables, then the pod's (a Secret's values made up, valid).
	imgEnv, user, exposed := imageEnv(t)
	env := append([]string(nil), imgEnv...)
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			continue
		}
		env = append(env, e.Name+"="+e.Value)
	}
	env = append(env, "SURVEYSYNC_API__TOKEN=test-token", "SURVEYSYNC_WEBHOOKS__PATH=/hooks/0123456789abcdef0123456789abcdef")
	env = append(env, extraEnv...)
	dir := t.TempDir()
	path := filepath.Join(dir, key)
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := config.LoadWarnings(path, env, nil)
	if err != nil {
		t.Fatalf("the ConfigMap's %s with the image's and the pod's variables is not valid:\n%v", key, err)
	}
	if len(warnings) > 0 {
		t.Errorf("configuration warnings: %v", warnings)
	}

	// Ports: the container's named ports are the configured listeners.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if cfg.Metrics.Listen == "" || ports["metrics"] != portOf(t, cfg.Metrics.Listen) {
		t.Errorf("container port metrics %d, metrics.listen %q", ports["metrics"], cfg.Metrics.Listen)
	}
	if !strings.HasPrefix(cfg.Metrics.Listen, "0.0.0.0:") && !strings.HasPrefix(cfg.Metrics.Listen, ":") {
		t.Errorf("metrics.listen %q is not reachable by the kubelet's probes", cfg.Metrics.Listen)
	}
	if cfg.Webhooks.Enabled {
		if ports["webhooks"] != portOf(t, cfg.Webhooks.Listen) {
			t.Errorf("container port webhooks %d, webhooks.listen %q", ports["webhooks"], cfg.Webhooks.Listen)
		}
		if !strings.HasPrefix(cfg.Webhooks.Listen, "0.0.0.0:") && !strings.HasPrefix(cfg.Webhooks.Listen, ":") {
			t.Errorf("webhooks.listen %q is not reachable through the Service", cfg.Webhooks.Listen)
		}
	}
	for _, p := range exposed {
		if !slices.Contains(c.Ports, corev1.ContainerPort{Name: nameOf(c, p), ContainerPort: p, Protocol: corev1.ProtocolTCP}) {
			t.Errorf("the image exposes %d; the container declares no such port", p)
		}
	}

	// Probes: liveness and startup on /healthz, readiness on /readyz, all on metrics.listen.
	for name, pr := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{
		"livenessProbe": {c.LivenessProbe, "/healthz"}, "startupProbe": {c.StartupProbe, "/healthz"}, "readinessProbe": {c.ReadinessProbe, "/readyz"},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", name)
			continue
		}
		port, ok := namedPort(c, pr.probe.HTTPGet.Port)
		if !ok || port != portOf(t, cfg.Metrics.Listen) || pr.probe.HTTPGet.Path != pr.path {
			t.Errorf("%s: GET %s on port %v (%d); want %s on metrics.listen %s", name, pr.probe.HTTPGet.Path, pr.probe.HTTPGet.Port.String(), port, pr.path, cfg.Metrics.Listen)
		}
	}

	// State: the spool and the Parquet state on the volume claim, not in the container.
	data, ok := mountOf(cfg.Webhooks.SpoolDir)
	if !ok {
		t.Fatalf("webhooks.spool_dir %s is on no volume", cfg.Webhooks.SpoolDir)
	}
	if !slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == data.Name }) {
		t.Errorf("webhooks.spool_dir %s is on volume %s, not a volume claim", cfg.Webhooks.SpoolDir, data.Name)
	}
	if pd, ok := mountOf(cfg.Parquet.Dir); !ok || pd.Name != data.Name {
		t.Errorf("parquet.dir %s (checkpoints, files spool) is not on the data volume", cfg.Parquet.Dir)
	}

	// The image's user owns /data; the pod runs as it, read-only root.
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.FSGroup == nil || user != fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.FSGroup) {
		t.Errorf("pod runs as %v, fsGroup %v; the image's USER is %s", sc.RunAsUser, sc.FSGroup, user)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the container's root filesystem is writable")
	}
	// SIGTERM drains for shutdown.drain_timeout: the grace period must cover it.
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) < cfg.Shutdown.DrainTimeout.Seconds()+10 {
		t.Errorf("terminationGracePeriodSeconds %v < shutdown.drain_timeout %s + 10 s", g, cfg.Shutdown.DrainTimeout)
	}

	// The webhook Service reaches the webhook port; the headless one governs the StatefulSet.
	var webhookSvc, headless bool
	for _, s := range m.services {
		if !matches(s.Spec.Selector, pod.Labels) {
			t.Errorf("Service %s selects %v, not the pods %v", s.Name, s.Spec.Selector, pod.Labels)
		}
		if s.Name == sts.Spec.ServiceName && s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = true
		}
		for _, p := range s.Spec.Ports {
			target, ok := namedPort(c, p.TargetPort)
			if !ok {
				t.Errorf("Service %s port %s: target %s is no container port", s.Name, p.Name, p.TargetPort.String())
			}
			if cfg.Webhooks.Enabled && target == portOf(t, cfg.Webhooks.Listen) {
				webhookSvc = true
			}
		}
	}
	if !webhookSvc {
		t.Error("no Service reaches webhooks.listen")
	}
	if !headless {
		t.Errorf("no headless Service %q for the StatefulSet", sts.Spec.ServiceName)
	}

	// Prometheus scrapes the metrics port of these pods.
	pm := m.podMonitors[0]
	if !matches(pm.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("PodMonitor selects %v, not the pods %v", pm.Spec.Selector.MatchLabels, pod.Labels)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor: want one endpoint")
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || ports[*ep.Port] != portOf(t, cfg.Metrics.Listen) || ep.Path != "/metrics" {
		t.Errorf("PodMonitor scrapes port %q path %q; want the metrics port, /metrics", ptr(ep.Port), ep.Path)
	}
	return sts, cfg
}

func ptr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nameOf(c corev1.Container, port int32) string {
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			return p.Name
		}
	}
	return ""
}

// The example Secret decodes and names only configuration variables.
func TestSecretExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(base, "secret.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := yaml.UnmarshalStrict(raw, &s); err != nil {
		t.Fatal(err)
	}
	for k := range s.StringData {
		if !strings.HasPrefix(k, "SURVEYSYNC_") || !strings.Contains(k, "__") {
			t.Errorf("secret key %s is no SURVEYSYNC_<SECTION>__<KEY> variable", k)
		}
	}
}

// What kubectl applies: the base rendered by kustomize decodes strictly
// too (labels and the image applied). Skips without kubectl.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: the rendered output is not checked (the files are, above)")
	}
	out, err := exec.Command(kubectl, "kustomize", base).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	var m manifests
	decodeAll(t, "kubectl kustomize", out, &m)
	if len(m.statefulSets) != 1 || m.statefulSets[0].Spec.Template.Spec.Containers[0].Image != "localhost/surveysync:latest" {
		t.Errorf("rendered StatefulSet: %+v", m.statefulSets)
	}
}
