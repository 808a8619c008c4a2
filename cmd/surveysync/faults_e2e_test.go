package main

// Readiness and local state under faults (issue 22, item 5), through the
// real binary.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/diskfault"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

// readyz returns /readyz's status code and body ("" and 0 when nothing
// answers).
func readyz(addr string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyz waits until /readyz answers want and its body contains
// substr.
func waitReadyz(t *testing.T, d *daemonProc, addr string, want int, substr string, timeout time.Duration) string {
	t.Helper()
	var code int
	var body string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, body = readyz(addr); code == want && strings.Contains(body, substr) {
			return body
		}
	}
	t.Fatalf("/readyz: %d %q after %v, want %d with %q; output:\n%s", code, body, timeout, want, substr, tail(d.output(), 40))
	return ""
}

// The Parquet folder and the webhook spool each fill up (or turn
// read-only) and are freed again while the daemon runs: /readyz says 503
// naming the cause while writes cannot succeed, and 200 again once the
// cause is gone, with no webhook or other request in between; nothing is
// lost.
func TestReadyzFollowsDiskFaultsAndRecovers(t *testing.T) {
	data := diskfault.New(t, 32)
	spool := diskfault.New(t, 1)
	port, path := freePort(t), "/hooks/e2e-"+randHex(8)
	// The emulator posts response_received for the response added below.
	e := newEmulator(t, sim.Options{Surveys: specs(1, 100, 71),
		WebhookURL: fmt.Sprintf("http://127.0.0.1:%d%s", port, path), WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second}})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, nil, fmt.Sprintf("sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n  partial_lookback: 2h\n  batch:\n    max_delay: 100ms\n"+
		"webhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n", port, path, spool.Path))
	rewriteConfig(t, cfg, map[string]string{
		"parquet:\n  dir: " + filepath.Join(filepath.Dir(cfg), "data") + "\n": "parquet:\n  dir: " + data.Path + "\n",
		"metrics:\n  listen: \"\"\n":                                          "metrics:\n  listen: " + metrics + "\n",
	})
	d := startDaemon(t, cfg)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 60*time.Second)

	// The data folder: a ping of the sink fails at once; a response
	// written meanwhile fails and is held.
	data.Break(t)
	body := waitReadyz(t, d, metrics, http.StatusServiceUnavailable, "parquet sink", 10*time.Second)
	t.Logf("data folder %s: /readyz: %s", data.Kind(), strings.TrimSpace(body))
	now := time.Now().UTC().Add(-2 * time.Minute)
	r, err := e.sim.AddResponse(e.ids[0], survey.Response{ResponseStatus: survey.StatusCompleted,
		DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)})
	if err != nil {
		t.Fatal(err)
	}
	body = waitReadyz(t, d, metrics, http.StatusServiceUnavailable, "sink writes", 30*time.Second)
	t.Logf("write held: /readyz: %s", strings.TrimSpace(body))
	data.Heal(t)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 45*time.Second)

	// The spool: no webhook is sent at all.
	spool.Break(t)
	body = waitReadyz(t, d, metrics, http.StatusServiceUnavailable, "webhookrx", 10*time.Second)
	t.Logf("spool %s: /readyz: %s", spool.Kind(), strings.TrimSpace(body))
	spool.Heal(t)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 10*time.Second)

	// Nothing is lost: every response, the one added while the folder
	// could not be written included, reaches the output.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cur, err := parquet.ReadCurrent(context.Background(), data.Path, 0)
		if err == nil && len(cur.Responses) == 101 && cur.Responses[string(r.ResponseID)] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("output: %v, want 101 responses with %s; output:\n%s", err, r.ResponseID, tail(d.output(), 30))
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
	if out := d.output(); !strings.Contains(out, "sink writes succeed again") {
		t.Errorf("no recovery line in the log:\n%s", tail(out, 30))
	}
}

// rewriteConfig replaces text in a configuration file written by
// writeConfig.
func rewriteConfig(t *testing.T, path string, repl map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for old, new := range repl {
		if !strings.Contains(s, old) {
			t.Fatalf("config lacks %q:\n%s", old, s)
		}
		s = strings.Replace(s, old, new, 1)
	}
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A truncated _state/sync_state.json (a crash of the disk, a copy cut
// short) used to make every start exit 1: a crash loop under
// Restart=always. It is set aside with a log line and the state rebuilt by
// reading the service again; the output stays exact.
func TestTruncatedStateFileIsSetAsideAndRebuilt(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(2, 60, 81)})
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	startDaemon(t, cfg, "--exit-when-synced").wait(t, 2*time.Minute)
	dir := filepath.Join(filepath.Dir(cfg), "data")
	state := filepath.Join(dir, "_state", "sync_state.json")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, b[:len(b)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 2*time.Minute)
	out := d.output()
	if !strings.Contains(out, "a local file is damaged") || !strings.Contains(out, "moved_to=") {
		t.Errorf("no log line about the damaged state file:\n%s", tail(out, 30))
	}
	if aside, _ := filepath.Glob(state + ".damaged-*"); len(aside) != 1 {
		t.Errorf("set-aside files: %v", aside)
	}
	if _, err := os.ReadFile(state); err != nil {
		t.Errorf("the state file was not rebuilt: %v", err)
	}
	cur, err := parquet.ReadCurrent(context.Background(), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cur.Responses); n != 120 {
		t.Errorf("%d responses in the output, want 120", n)
	}
	// status reads the rebuilt state.
	sout, err := exec.Command(binPath, "status", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(sout), "synced") {
		t.Errorf("status: %v\n%s", err, sout)
	}
}
