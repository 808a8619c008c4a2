package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/webhookrx"
)

// The security review's findings of issue 32, through the real binary
// (Parquet sink: no ClickHouse needed).

// postWebhook posts body to url with the headers hdr; it returns the status
// and the answer.
func postWebhook(t *testing.T, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitListening waits until the daemon accepts connections on addr.
func waitListening(t *testing.T, d *daemonProc, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers on %s after 30 s; output:\n%s", url, tail(d.output(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With webhooks.standard_webhooks_secret set, a request without signature
// headers is refused (401) — also a signed request replayed without them —
// and a signed one accepted; require_signature: false keeps the old
// behaviour with a WARN at start; a key shorter than 16 bytes stops the
// start with an error naming the key, not showing it.
func TestUnsignedWebhookRefusedWhenSecretSet(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	e := newEmulator(t, sim.Options{Surveys: specs(1, 5, 61)})
	port := freePort(t)
	path := "/hooks/e2e-" + randHex(12)
	hooks := func(extra string) string {
		return fmt.Sprintf("sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n  partial_lookback: 2h\nwebhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n  standard_webhooks_secret: %s\n%s",
			port, path, t.TempDir(), secret, extra)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
	body := fmt.Sprintf(`{"event_name":"survey_paused","survey_id":%d}`, e.ids[0])

	d := startDaemon(t, writeConfig(t, e, nil, hooks("")))
	waitListening(t, d, url)
	if st, ans := postWebhook(t, url, body, nil); st != http.StatusUnauthorized || !strings.Contains(ans, "signature required") {
		t.Errorf("unsigned request with a secret set: %d %s, want 401 signature required", st, ans)
	}
	now := time.Now()
	sig, err := webhookrx.Sign(secret, "msg_e2e_1", now, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	signed := map[string]string{"webhook-id": "msg_e2e_1", "webhook-timestamp": fmt.Sprint(now.Unix()), "webhook-signature": sig}
	if st, ans := postWebhook(t, url, body, signed); st != http.StatusOK {
		t.Errorf("signed request: %d %s, want 200", st, ans)
	}
	// The captured request replayed without its headers (outside the
	// timestamp window or not): refused.
	if st, ans := postWebhook(t, url, body, map[string]string{"webhook-id": "msg_e2e_2"}); st != http.StatusUnauthorized {
		t.Errorf("signed body replayed without its signature: %d %s, want 401", st, ans)
	}
	if strings.Contains(d.output(), "MfKQ9r8") {
		t.Error("the secret appears in the daemon's output")
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 30*time.Second)

	// An explicit require_signature: false: the old behaviour, warned.
	d = startDaemon(t, writeConfig(t, e, nil, hooks("  require_signature: false\n")))
	waitListening(t, d, url)
	if st, ans := postWebhook(t, url, body, nil); st != http.StatusOK {
		t.Errorf("unsigned request with require_signature: false: %d %s, want 200", st, ans)
	}
	if out := d.output(); !strings.Contains(out, "WARN") || !strings.Contains(out, "webhooks.require_signature is false: requests without signature headers are accepted") {
		t.Errorf("no WARN about require_signature: false; output:\n%s", tail(out, 20))
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 30*time.Second)

	// A 15-byte raw key: the configuration is refused.
	short := strings.Replace(hooks(""), secret, "hunter2-hunter2", 1)
	cmd := exec.Command(binPath, "run", "--config", writeConfig(t, e, nil, short))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitConfig {
		t.Fatalf("a short key: %v, want exit %d\n%s", err, exitConfig, out)
	}
	if !strings.Contains(string(out), "webhooks.standard_webhooks_secret must be a key of at least 16 bytes") || strings.Contains(string(out), "hunter2") {
		t.Errorf("a short key's error:\n%s", out)
	}
}

// POST /admin/resync: a call without the admin token, or with a wrong one,
// is refused although it comes from loopback — here through a reverse proxy
// on the same host, which makes any remote caller local — and surveysync
// resync, which reads the 0600 token file the daemon created under
// parquet.dir, is served.
func TestAdminCallWithoutTokenRefused(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 20, 62)})
	port := freePort(t)
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.Replace(string(raw), "metrics:\n  listen: \"\"\n", fmt.Sprintf("metrics:\n  listen: 0.0.0.0:%d\n", port), 1))
	if err := os.WriteFile(cfg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	metrics := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitListening(t, d, metrics+"/healthz")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(d.output(), "surveysync started") })

	// The token file: 0600, under parquet.dir.
	tokenPath := filepath.Join(filepath.Dir(cfg), "data", daemon.AdminTokenFile)
	fi, err := os.Stat(tokenPath)
	if err != nil {
		t.Fatalf("the admin token file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %04o, want 0600", tokenPath, fi.Mode().Perm())
	}
	token, err := os.ReadFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}

	// A proxy on the same host: the daemon sees loopback callers.
	target, _ := url.Parse(metrics)
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	resync := fmt.Sprintf("/admin/resync?survey=%d", e.ids[0])
	for _, c := range []struct {
		name, base, auth string
		want             int
	}{
		{"direct, no token", metrics, "", http.StatusUnauthorized},
		{"through the proxy, no token", proxy.URL, "", http.StatusUnauthorized},
		{"through the proxy, the old header", proxy.URL, "", http.StatusUnauthorized},
		{"through the proxy, a wrong token", proxy.URL, "Bearer " + strings.Repeat("0", 64), http.StatusForbidden},
		{"direct, a wrong token", metrics, "Bearer x", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, c.base+resync, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		req.Header.Set("X-Surveysync-Admin", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, b, c.want)
		}
		if strings.Contains(string(b), strings.TrimSpace(string(token))) {
			t.Errorf("%s: the answer shows the token", c.name)
		}
	}
	if strings.Contains(d.output(), "resync asked") {
		t.Fatalf("a refused call queued a resync; output:\n%s", tail(d.output(), 20))
	}

	// The command reads the token and is served.
	out := resyncCLI(t, cfg, "--survey", fmt.Sprint(e.ids[0]))
	if !strings.Contains(out, "queued") {
		t.Fatalf("surveysync resync with the daemon running:\n%s", out)
	}
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(d.output(), "resync done") })
	if strings.Contains(d.output(), strings.TrimSpace(string(token))) {
		t.Error("the token appears in the daemon's output")
	}

	// Without read access to the token file the command says what to do.
	if err := os.Rename(tokenPath, tokenPath+".moved"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "resync", "--config", cfg, "--survey", fmt.Sprint(e.ids[0]))
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "the admin token "+tokenPath+" does not exist") {
		t.Errorf("resync without the token file: %v\n%s", err, b)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 30*time.Second)
}

// A privacy hash key file that others may read stops the start, naming
// the file and the fix; the key never shows.
func TestWorldReadableHashKeyRefused(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 5, 63)})
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "hash.key")
	const key = "e2e-privacy-hash-key-0123456789abcdef"
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	cfg := writeConfig(t, e, nil, fmt.Sprintf("privacy:\n  hash_key_file: %s\n  fields:\n    contact_id: hash\n", keyFile))
	out, err := exec.Command(binPath, "run", "--config", cfg, "--exit-when-synced").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitConfig {
		t.Fatalf("a world-readable key file: %v, want exit %d\n%s", err, exitConfig, out)
	}
	want := fmt.Sprintf("privacy.hash_key_file (%s) may be read or changed by its group or others (mode 0644)", keyFile)
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "chmod 600 "+keyFile) {
		t.Errorf("output:\n%s\nwant %q and the chmod", out, want)
	}
	if strings.Contains(string(out), key) {
		t.Error("the key appears in the output")
	}
	// Fixed as told, the same command syncs.
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg, "--exit-when-synced").wait(t, 60*time.Second)
}
