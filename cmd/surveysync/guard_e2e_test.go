package main

// One daemon per data directory and per database, the start-up policy and
// the rejected token's error state (issue 22, items 1 and 2), through the
// real binary.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/internal/testkit/faultproxy"
	"github.com/surveysync/surveysync/sim"
)

// waitOutput waits until the daemon's output contains s.
func waitOutput(t *testing.T, d *daemonProc, s string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(d.output(), s) {
			return
		}
		if d.cmd.ProcessState != nil {
			break
		}
	}
	t.Fatalf("no %q in the daemon's output after %v:\n%s", s, timeout, tail(d.output(), 30))
}

// refused runs `run` with cfg, which must exit 1 within 30 s naming the
// first daemon (its host and pid).
func refused(t *testing.T, cfg string, first *daemonProc, want string, args ...string) string {
	t.Helper()
	start := time.Now()
	out, code := runCLIBin(t, append([]string{"run", "--config", cfg}, args...)...)
	host, _ := os.Hostname()
	if code != exitFail {
		t.Fatalf("second daemon: exit %d, want 1:\n%s", code, tail(out, 20))
	}
	for _, w := range []string{want, "host " + host, fmt.Sprintf("pid %d", first.cmd.Process.Pid), "started 20"} {
		if !strings.Contains(out, w) {
			t.Errorf("the refusal lacks %q:\n%s", w, tail(out, 10))
		}
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("refused after %v", took)
	}
	return lastLine(out)
}

// Two daemons on one Parquet folder: the second is refused, naming the
// first; once the first is killed (SIGKILL: the kernel drops its lock) a
// daemon starts at once.
func TestSecondDaemonOnOneDataDirIsRefused(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 20, 51)})
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n")
	first := startDaemon(t, cfg)
	waitOutput(t, first, "surveysync started", 30*time.Second)
	t.Logf("refused: %s", refused(t, cfg, first, "is in use by another surveysync daemon"))
	// metrics.listen is off: status tells from the lock.
	statusSays(t, cfg, fmt.Sprintf("daemon: running (metrics.listen is off; host %s, pid %d", hostname(), first.cmd.Process.Pid))

	_ = first.cmd.Process.Kill()
	_ = first.cmd.Wait()
	statusSays(t, cfg, "daemon: NOT RUNNING")
	again := startDaemon(t, cfg)
	waitOutput(t, again, "surveysync started", 30*time.Second)
	_ = again.cmd.Process.Signal(syscall.SIGTERM)
	again.wait(t, time.Minute)
}

// Two daemons on one ClickHouse database (each with its own data folder):
// the second is refused naming the first; --force starts it anyway and the
// first notices it at its next heartbeat; a daemon killed by SIGKILL on
// this host leaves a lease the next start takes at once.
func TestSecondDaemonOnOneDatabaseIsRefused(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 20, 52)})
	cfgA := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n")
	cfgB := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n")
	first := startDaemon(t, cfgA)
	waitOutput(t, first, "lease taken", time.Minute)
	t.Logf("refused: %s", refused(t, cfgB, first, "another surveysync daemon writes"))
	statusSays(t, cfgB, fmt.Sprintf("pid %d, started", first.cmd.Process.Pid), "lease renewed")

	forced := startDaemon(t, cfgB, "--force")
	waitOutput(t, forced, "--force: starting although another daemon holds a live lease", time.Minute)
	waitOutput(t, forced, "surveysync started", time.Minute)
	waitOutput(t, first, "another surveysync daemon writes the same database", 30*time.Second)
	_ = forced.cmd.Process.Signal(syscall.SIGTERM)
	forced.wait(t, time.Minute)

	_ = first.cmd.Process.Kill()
	_ = first.cmd.Wait()
	again := startDaemon(t, cfgB)
	waitOutput(t, again, "surveysync started", time.Minute)
	if !strings.Contains(again.output(), "the lease of a daemon of this host that is gone is free") {
		t.Errorf("no line about the killed daemon's lease:\n%s", tail(again.output(), 20))
	}
	_ = again.cmd.Process.Signal(syscall.SIGTERM)
	again.wait(t, time.Minute)
	// Stopped cleanly, it released its lease: the next start needs no wait.
	last := startDaemon(t, cfgA, "--exit-when-synced")
	last.wait(t, time.Minute)
	if strings.Contains(last.output(), fmt.Sprintf("pid=%d", again.cmd.Process.Pid)) {
		t.Errorf("a released lease was seen as live:\n%s", tail(last.output(), 20))
	}
}

// ClickHouse unreachable at start: a one-shot run fails at once with
// doctor's fix; the daemon waits with back-off (a log line per attempt,
// /readyz 503 saying why) and, once ClickHouse answers 20 s later, syncs
// everything.
func TestClickHouseDownAtStartIsWaitedOut(t *testing.T) {
	w := clickhouseOrSkip(t)
	proxy, err := faultproxy.New(w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetDown(true)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 50, 53)})
	direct := *w
	w.addr = proxy.Addr()
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	rewriteConfig(t, cfg, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\n"})

	start := time.Now()
	out, code := runCLIBin(t, "run", "--config", cfg, "--exit-when-synced")
	if code != exitFail || !strings.Contains(out, "fix: check clickhouse.addr") {
		t.Fatalf("one-shot run with ClickHouse down: exit %d:\n%s", code, tail(out, 10))
	}
	t.Logf("one-shot run failed after %v: %s", time.Since(start).Round(time.Millisecond), lastLine(out))
	for _, args := range [][]string{{"status", "--config", withoutAPISecrets(t, cfg)}, {"doctor", "--config", cfg}} {
		out, code := runCLIBin(t, args...)
		if code != exitFail || !strings.Contains(out, "check clickhouse.addr (native port") {
			t.Errorf("%s with ClickHouse down: exit %d:\n%s", args[0], code, tail(out, 10))
		}
	}

	d := startDaemon(t, cfg)
	body := waitReadyz(t, d, metrics, 503, "starting: the warehouse is unreachable", 30*time.Second)
	t.Logf("/readyz while down: %s", strings.TrimSpace(body))
	time.Sleep(20 * time.Second)
	proxy.SetDown(false)
	up := time.Now()
	waitReadyz(t, d, metrics, 200, "ready", time.Minute)
	t.Logf("ready %v after ClickHouse came back", time.Since(up).Round(100*time.Millisecond))
	waitConverged(t, e, &direct, time.Minute)
	lines := strings.Count(d.output(), "start-up: the warehouse is unreachable; waiting")
	if lines < 3 || !strings.Contains(d.output(), "start-up: the warehouse answers; starting") {
		t.Errorf("%d waiting lines, and the recovery line? output:\n%s", lines, tail(d.output(), 20))
	}
	t.Logf("%d waiting lines in 20 s", lines)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)
}

// A token the service rejects, in daemon mode: /readyz 503, the gauge
// surveysync_api_token_rejected at 1, and surveysync status says so; the
// daemon keeps running.
func TestRejectedTokenIsAnErrorStateOfTheDaemon(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 10, 54)})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n")
	rewriteConfig(t, cfg, map[string]string{
		"  token: " + tokenOf(e) + "\n": "  token: not-the-token-" + randHex(4) + "\n",
		"metrics:\n  listen: \"\"\n":    "metrics:\n  listen: " + metrics + "\n",
	})
	d := startDaemon(t, cfg)
	waitReadyz(t, d, metrics, 503, "api: token rejected", 30*time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		m, err := scrapeOne(metrics, "surveysync_api_token_rejected")
		if err == nil && m == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("surveysync_api_token_rejected: %v %v", m, err)
		}
	}
	out, code := runCLIBin(t, "status", "--config", cfg)
	t.Logf("status:\n%s", out)
	if code != exitOK || !strings.Contains(out, "API TOKEN REJECTED (HTTP 401") {
		t.Errorf("status: exit %d, no API TOKEN REJECTED line", code)
	}
	if d.cmd.ProcessState != nil {
		t.Fatalf("the daemon exited:\n%s", tail(d.output(), 20))
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)
}

// scrapeOne reads one unlabelled sample from the daemon's /metrics.
func scrapeOne(addr, name string) (float64, error) {
	m, err := daemon.Scrape(context.Background(), addr, name)
	if err != nil {
		return 0, err
	}
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("no %s on /metrics", name)
	}
	return v, nil
}

func hostname() string { h, _ := os.Hostname(); return h }

// statusSays runs surveysync status (without the API token) and checks its
// output.
func statusSays(t *testing.T, cfg string, want ...string) {
	t.Helper()
	out, code := runCLIBin(t, "status", "--config", withoutAPISecrets(t, cfg))
	if code != exitOK {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "daemon:") {
			t.Logf("status: %s", l)
		}
	}
}

// A token that may read none of the polled surveys (403 on each list
// call) is the same error state, with its own wording; once the service
// lets it read them again the daemon turns ready by itself.
func TestForbiddenOnEverySurveyIsAnErrorState(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(2, 10, 55)})
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpListResponses, Kind: "403"}); err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n")
	rewriteConfig(t, cfg, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\n"})
	d := startDaemon(t, cfg)
	body := waitReadyz(t, d, metrics, 503, "the token may read none of the surveys", 30*time.Second)
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	statusSays(t, cfg, "API TOKEN REJECTED (HTTP 403 on every survey")
	if v, err := scrapeOne(metrics, "surveysync_api_token_rejected"); err != nil || v != 1 {
		t.Errorf("surveysync_api_token_rejected: %v %v", v, err)
	}
	e.sim.ClearFaults()
	waitReadyz(t, d, metrics, 200, "ready", time.Minute)
	if v, err := scrapeOne(metrics, "surveysync_api_token_rejected"); err != nil || v != 0 {
		t.Errorf("surveysync_api_token_rejected after the fix: %v %v", v, err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)
}

// The service unreachable at start: a one-shot run fails at once with the
// fix; the daemon keeps running, /readyz says what it waits for.
func TestAPIDownAtStart(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 5, 56)})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n")
	rewriteConfig(t, cfg, map[string]string{
		e.srv.URL:                    fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\n",
	})
	start := time.Now()
	out, code := runCLIBin(t, "run", "--config", cfg, "--exit-when-synced")
	if code != exitFail || !strings.Contains(out, "does not answer") || !strings.Contains(out, "fix: check api.base_url") {
		t.Fatalf("one-shot run with the service down: exit %d:\n%s", code, tail(out, 10))
	}
	t.Logf("one-shot run failed after %v: %s", time.Since(start).Round(time.Millisecond), lastLine(out))
	d := startDaemon(t, cfg)
	body := waitReadyz(t, d, metrics, 503, "starting: the survey service does not answer", time.Minute)
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	waitOutput(t, d, "start-up: the survey service does not answer; waiting for it", 10*time.Second)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)
}
