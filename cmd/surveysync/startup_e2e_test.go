package main

// One-shot runs fail fast, with the fix, on a rejected token and on
// ClickHouse's HTTP port given as clickhouse.addr (issue 22, item 2),
// through the real binary.

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
)

// A token the service rejects (401 on every call) ends run
// --exit-when-synced with exit 1 and the fix, instead of waiting for ever.
func TestRejectedTokenEndsExitWhenSynced(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(2, 20, 5)})
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n")
	rewriteConfig(t, cfg, map[string]string{"  token: " + tokenOf(e) + "\n": "  token: not-the-token-" + randHex(4) + "\n"})
	cmd := exec.Command(binPath, "run", "--config", cfg, "--exit-when-synced")
	cmd.Env = cliEnv()
	start := time.Now()
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("run --exit-when-synced with a rejected token did not exit in 60 s:\n%s", tail(string(out), 20))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFail {
		t.Fatalf("exit: %v, want 1\n%s", err, tail(string(out), 20))
	}
	for _, want := range []string{"rejects the API token", "HTTP 401", "SURVEYSYNC_API__TOKEN"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, tail(string(out), 20))
		}
	}
	t.Logf("exited 1 after %v: %s", time.Since(start).Round(time.Millisecond), lastLine(string(out)))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// ClickHouse's HTTP port given as clickhouse.addr: the native handshake
// times out there; the error names the mistake and the native port.
func TestClickHouseHTTPPortIsNamed(t *testing.T) {
	native := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if native == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	host, _, err := net.SplitHostPort(native)
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := net.JoinHostPort(host, "8123")
	if c, err := net.DialTimeout("tcp", httpAddr, time.Second); err != nil {
		t.Skipf("no ClickHouse HTTP interface on %s: %v", httpAddr, err)
	} else {
		c.Close()
	}
	e := newEmulator(t, sim.Options{Surveys: specs(1, 5, 6)})
	w := &testWarehouse{addr: httpAddr, db: "test_e2e_httpport_" + randHex(4)}
	cfg := writeConfig(t, e, w, "")
	rewriteConfig(t, cfg, map[string]string{"  database: " + w.db + "\n": "  database: " + w.db + "\n  dial_timeout: 2s\n"})
	for _, args := range [][]string{{"run", "--config", cfg, "--exit-when-synced"}, {"doctor", "--config", cfg}} {
		cmd := exec.Command(binPath, args...)
		cmd.Env = cliEnv()
		out, err := cmd.CombinedOutput()
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != exitFail {
			t.Errorf("%s: exit %v, want 1\n%s", args[0], err, tail(string(out), 20))
		}
		for _, want := range []string{httpAddr + " is ClickHouse's HTTP interface", "native port"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: output lacks %q:\n%s", args[0], want, tail(string(out), 20))
			}
		}
		t.Logf("%s: %s", args[0], lastLine(string(out)))
	}
}

// Every log line names its component once (the ClickHouse sink used to
// add its own to the daemon's: component=clickhouse component=clickhouse).
func TestLogLinesNameTheirComponentOnce(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 20, 7)})
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 2*time.Minute)
	lines := 0
	for _, l := range strings.Split(d.output(), "\n") {
		if strings.Count(l, "component=") > 1 {
			t.Errorf("component repeated: %s", l)
		}
		if strings.Contains(l, "component=clickhouse") {
			lines++
		}
	}
	if lines == 0 {
		t.Errorf("no line of the ClickHouse sink:\n%s", tail(d.output(), 20))
	}
}
