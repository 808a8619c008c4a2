package main

// Read-only commands need no API secrets; status says whether the daemon
// runs (issue 22, item 3), through the real binary.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
)

// withoutAPISecrets writes a copy of a writeConfig file without api.token
// and api.user_agent.
func withoutAPISecrets(t *testing.T, cfg string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "  token:") || strings.HasPrefix(l, "  user_agent:") {
			continue
		}
		keep = append(keep, l)
	}
	out := filepath.Join(t.TempDir(), "readonly.yaml")
	if err := os.WriteFile(out, []byte(strings.Join(keep, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// cliEnv is the environment without any SURVEYSYNC_ variable.
func cliEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SURVEYSYNC_") {
			env = append(env, e)
		}
	}
	return env
}

func runCLIBin(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = cliEnv()
	out, err := cmd.CombinedOutput()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// status and query run with no API token or user agent, while the daemon
// runs and after it was killed mid-backfill: status then says the daemon
// is not running and how old its report is, and shows no rate or ETA.
func TestStatusWithoutTokenSaysWhetherTheDaemonRuns(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 400, 91)})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// 20 calls a second: the backfill takes 20 s and saves its progress
	// every 10 s.
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n")
	rewriteConfig(t, cfg, map[string]string{
		"rate_limit: 100000":         "rate_limit: 20",
		"max_concurrency: 32":        "max_concurrency: 4",
		"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\n",
	})
	ro := withoutAPISecrets(t, cfg)

	// Without a token, run is refused (it needs it), status is not.
	if out, code := runCLIBin(t, "run", "--config", ro); code != exitConfig || !strings.Contains(out, "api.token") {
		t.Fatalf("run without a token: exit %d\n%s", code, out)
	}
	d := startDaemon(t, cfg)
	state := filepath.Join(filepath.Dir(cfg), "data", "_state", "sync_state.json")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if b, _ := os.ReadFile(state); strings.Contains(string(b), "cycle_listed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress saved; output:\n%s", tail(d.output(), 30))
		}
	}
	out, code := runCLIBin(t, "status", "--config", ro)
	t.Logf("status, daemon running:\n%s", out)
	if code != exitOK || !strings.Contains(out, "daemon: running") || !strings.Contains(out, "backfilling") {
		t.Fatalf("status while running: exit %d\n%s", code, out)
	}
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()

	out, code = runCLIBin(t, "status", "--config", ro)
	t.Logf("status, daemon killed:\n%s", out)
	if code != exitOK {
		t.Fatalf("status without a token: exit %d\n%s", code, out)
	}
	for _, want := range []string{"daemon: NOT RUNNING", "last report saved", "stopped mid-backfill", "stopped in a cycle"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	for _, bogus := range []string{"ETA", "backfilling", "left", "/s"} {
		if strings.Contains(out, bogus) {
			t.Errorf("status of a stopped daemon shows %q", bogus)
		}
	}
	if out, code := runCLIBin(t, "query", "--config", ro, "--sample", "0"); code != exitOK {
		t.Errorf("query without a token: exit %d\n%s", code, out)
	}
}
