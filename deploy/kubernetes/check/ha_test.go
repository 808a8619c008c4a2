package check

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

const haOverlay = "../ha"

// overlay is the subset of kustomize's file the ha overlay may use.
type overlay struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

// loadHA renders the ha overlay offline as kustomize does for these files:
// the base, the overlay's own resources, and its strategic-merge patches
// applied with Kubernetes' own strategicpatch (each patch also decodes
// strictly into its type, so a misspelt field fails).
func loadHA(t *testing.T) (manifests, []policyv1.PodDisruptionBudget) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(haOverlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k overlay
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("ha/kustomization.yaml: %v", err)
	}
	var m manifests
	var pdbs []policyv1.PodDisruptionBudget
	used := map[string]bool{"kustomization.yaml": true}
	for _, r := range k.Resources {
		if r == "../base" {
			_, m = loadBase(t)
			continue
		}
		used[r] = true
		data, err := os.ReadFile(filepath.Join(haOverlay, r))
		if err != nil {
			t.Fatalf("ha/kustomization.yaml names %s: %v", r, err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(data, &head); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if head.APIVersion+" "+head.Kind == "policy/v1 PodDisruptionBudget" {
			var v policyv1.PodDisruptionBudget
			if err := yaml.UnmarshalStrict(data, &v); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			pdbs = append(pdbs, v)
			continue
		}
		decodeAll(t, r, data, &m)
	}
	if !slices.Contains(k.Resources, "../base") {
		t.Fatal("the ha overlay does not build on ../base")
	}
	for _, p := range k.Patches {
		used[p.Path] = true
		data, err := os.ReadFile(filepath.Join(haOverlay, p.Path))
		if err != nil {
			t.Fatalf("ha/kustomization.yaml patches %s: %v", p.Path, err)
		}
		patch, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatalf("%s: %v", p.Path, err)
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(patch, &head); err != nil {
			t.Fatalf("%s: %v", p.Path, err)
		}
		switch head.Kind {
		case "StatefulSet":
			i := slices.IndexFunc(m.statefulSets, func(s appsv1.StatefulSet) bool { return s.Name == head.Metadata.Name })
			if i < 0 {
				t.Fatalf("%s patches StatefulSet %s, not in the base", p.Path, head.Metadata.Name)
			}
			applyPatch(t, p.Path, data, patch, &m.statefulSets[i], &appsv1.StatefulSet{})
		case "ConfigMap":
			i := slices.IndexFunc(m.configMaps, func(c corev1.ConfigMap) bool { return c.Name == head.Metadata.Name })
			if i < 0 {
				t.Fatalf("%s patches ConfigMap %s, not in the base", p.Path, head.Metadata.Name)
			}
			applyPatch(t, p.Path, data, patch, &m.configMaps[i], &corev1.ConfigMap{})
		default:
			t.Fatalf("%s: a patch of %s (add it to the test)", p.Path, head.Kind)
		}
	}
	files, _ := filepath.Glob(filepath.Join(haOverlay, "*.yaml"))
	for _, f := range files {
		if n := filepath.Base(f); !used[n] {
			t.Errorf("ha/%s is neither a resource nor a patch of the overlay", n)
		}
	}
	return m, pdbs
}

// applyPatch decodes the patch strictly into a fresh value of the target's
// type (typo check), then applies it to target as a strategic merge.
func applyPatch[T any](t *testing.T, name string, data, patch []byte, target *T, fresh *T) {
	t.Helper()
	if err := yaml.UnmarshalStrict(data, fresh); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	orig, err := json.Marshal(target)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(orig, patch, *fresh)
	if err != nil {
		t.Fatalf("%s: strategic merge: %v", name, err)
	}
	var merged T
	if err := yaml.UnmarshalStrict(out, &merged); err != nil {
		t.Fatalf("%s: merged: %v", name, err)
	}
	*target = merged
}

// TestHAOverlay: the ha overlay passes every check of the single daemon,
// and adds what high availability needs: two or more replicas, ha.servers,
// each replica's ha.instance from its pod name (downward API), a
// PodDisruptionBudget over the pods, and the webhook Service routing to
// every replica.
func TestHAOverlay(t *testing.T) {
	m, pdbs := loadHA(t)
	sts, cfg := checkDaemon(t, m, []string{"SURVEYSYNC_HA__INSTANCE=surveysync-0"})
	pod := sts.Spec.Template
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas < 2 {
		t.Errorf("replicas %v: the HA overlay runs two or more", sts.Spec.Replicas)
	}
	if !cfg.HA.Enabled() || len(cfg.HA.Servers) == 0 {
		t.Fatal("the overlay's configuration has no ha.servers")
	}
	for _, s := range cfg.HA.Servers {
		if i := strings.LastIndex(s, ":"); i <= 0 || i == len(s)-1 {
			t.Errorf("ha.servers: %q is no host:port", s)
		}
	}
	if cfg.HA.Instance != "surveysync-0" {
		t.Errorf("ha.instance %q: the pod name (SURVEYSYNC_HA__INSTANCE) must decide it, not the ConfigMap", cfg.HA.Instance)
	}
	if cfg.HA.SessionTimeout <= 0 {
		t.Errorf("ha.session_timeout %v", cfg.HA.SessionTimeout)
	}
	c := pod.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SURVEYSYNC_HA__INSTANCE" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("SURVEYSYNC_HA__INSTANCE does not come from the pod name (valueFrom.fieldRef metadata.name)")
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" }) {
		t.Error("the patch dropped the base's env (GOMEMLIMIT)")
	}

	if len(pdbs) != 1 {
		t.Fatalf("want one PodDisruptionBudget, have %d", len(pdbs))
	}
	pdb := pdbs[0]
	if pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("PodDisruptionBudget selects %v, not the pods %v", pdb.Spec.Selector, pod.Labels)
	}
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		if v := pdb.Spec.MaxUnavailable; v.Type != intstr.Int || v.IntVal < 1 || v.IntVal >= *sts.Spec.Replicas {
			t.Errorf("PodDisruptionBudget maxUnavailable %s: want 1 to replicas-1", v.String())
		}
	case pdb.Spec.MinAvailable != nil:
		if v := pdb.Spec.MinAvailable; v.Type != intstr.Int || v.IntVal < 1 || v.IntVal >= *sts.Spec.Replicas {
			t.Errorf("PodDisruptionBudget minAvailable %s: want 1 to replicas-1 (a drain must be possible)", v.String())
		}
	default:
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}

	// The webhook Service routes to every replica: it selects the pods by
	// the labels they share (no pod name) and only ready ones.
	var routed bool
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			target, _ := namedPort(c, p.TargetPort)
			if target != portOf(t, cfg.Webhooks.Listen) {
				continue
			}
			routed = true
			if s.Spec.ClusterIP == corev1.ClusterIPNone || s.Spec.PublishNotReadyAddresses {
				t.Errorf("Service %s: webhooks through a headless Service or to pods not ready", s.Name)
			}
			if _, one := s.Spec.Selector["statefulset.kubernetes.io/pod-name"]; one || !matches(s.Spec.Selector, pod.Labels) {
				t.Errorf("Service %s selects %v: not every replica", s.Name, s.Spec.Selector)
			}
		}
	}
	if !routed {
		t.Error("no Service routes webhooks to the replicas")
	}
}

// What kubectl applies for the ha overlay: rendered by kustomize, it
// decodes strictly and agrees with the offline rendering above. Skips
// without kubectl.
func TestKustomizeBuildHA(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: the rendered output is not checked (the files are, above)")
	}
	out, err := exec.Command(kubectl, "kustomize", haOverlay).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	var docs []string
	var pdbs int
	for _, d := range strings.Split(string(out), "\n---") {
		if strings.Contains(d, "kind: PodDisruptionBudget") {
			var v policyv1.PodDisruptionBudget
			if err := yaml.UnmarshalStrict([]byte(d), &v); err != nil {
				t.Fatal(err)
			}
			pdbs++
			continue
		}
		docs = append(docs, d)
	}
	var m manifests
	decodeAll(t, "kubectl kustomize ha", []byte(strings.Join(docs, "\n---")), &m)
	off, _ := loadHA(t)
	if pdbs != 1 || len(m.statefulSets) != 1 || len(m.configMaps) != 1 {
		t.Fatalf("rendered: %d PodDisruptionBudgets, %d StatefulSets, %d ConfigMaps", pdbs, len(m.statefulSets), len(m.configMaps))
	}
	got, want := m.statefulSets[0], off.statefulSets[0]
	if *got.Spec.Replicas != *want.Spec.Replicas || got.Spec.PodManagementPolicy != want.Spec.PodManagementPolicy {
		t.Errorf("kustomize renders replicas %d %s, the offline merge %d %s", *got.Spec.Replicas, got.Spec.PodManagementPolicy, *want.Spec.Replicas, want.Spec.PodManagementPolicy)
	}
	if g, w := len(got.Spec.Template.Spec.Containers[0].Env), len(want.Spec.Template.Spec.Containers[0].Env); g != w {
		t.Errorf("kustomize renders %d env variables, the offline merge %d", g, w)
	}
	if m.configMaps[0].Data["surveysync.yaml"] != off.configMaps[0].Data["surveysync.yaml"] {
		t.Error("kustomize renders another configuration than the offline merge")
	}
}
