package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// surveysync version names the version, the commit, the build date and the
// Go version on one line (issue 24 part 5).
func TestVersionLine(t *testing.T) {
	code, out, _ := cli(t, "version")
	re := regexp.MustCompile(`^surveysync \S+ \(commit \S+, built \S+, go\S+ \w+/\w+\)\n$`)
	if code != 0 || !re.MatchString(out) {
		t.Fatalf("version: %d %q, want %s", code, out, re)
	}
	old := [3]string{version, commit, buildDate}
	t.Cleanup(func() { version, commit, buildDate = old[0], old[1], old[2] })
	version, commit, buildDate = "v1.2.3", "0123456789abcdef", "2026-11-26T08:37:00Z"
	if got := versionString(); !strings.HasPrefix(got, "surveysync v1.2.3 (commit 0123456789abcdef") || !strings.Contains(got, "built 2026-11-26T08:37:00Z, go") {
		t.Fatalf("with ldflags: %q", got)
	}
}

// surveysync healthcheck: the container's HEALTHCHECK (no shell, no curl).
func TestHealthcheck(t *testing.T) {
	// A daemon whose sink is down, as its metrics listener answers
	// (daemon's TestReadyzNamesWhatIsNotReady checks the real one).
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready: sink: down", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	listen := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(listen)

	t.Setenv("SURVEYSYNC_METRICS__LISTEN", "0.0.0.0:"+port) // a wildcard is asked on loopback
	if code, out, errOut := cli(t, "healthcheck"); code != exitOK || !strings.Contains(out, "/healthz: ok") {
		t.Fatalf("healthcheck: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "healthcheck", "--ready"); code != exitFail || !strings.Contains(errOut, "503") || !strings.Contains(errOut, "sink: down") {
		t.Fatalf("healthcheck --ready on an unready daemon: %d %q", code, errOut)
	}
	if code, _, _ := cli(t, "healthcheck", "--url", srv.URL+"/healthz"); code != exitOK {
		t.Fatalf("healthcheck --url: %d", code)
	}
	srv.Close()
	if code, _, errOut := cli(t, "healthcheck", "--timeout", "2s"); code != exitFail || errOut == "" {
		t.Fatalf("healthcheck with nothing listening: %d %q", code, errOut)
	}
	t.Setenv("SURVEYSYNC_METRICS__LISTEN", "")
	if code, _, errOut := cli(t, "healthcheck"); code != exitUsage || !strings.Contains(errOut, "metrics.listen is empty") {
		t.Fatalf("healthcheck without metrics: %d %q", code, errOut)
	}
	for listen, want := range map[string]string{
		"127.0.0.1:9464": "http://127.0.0.1:9464/healthz",
		":9464":          "http://127.0.0.1:9464/healthz",
		"[::]:9464":      "http://127.0.0.1:9464/healthz",
		"10.0.0.7:9464":  "http://10.0.0.7:9464/healthz",
		"[::1]:9464":     "http://[::1]:9464/healthz",
	} {
		if got, err := localURL(listen, "/healthz"); err != nil || got != want {
			t.Errorf("localURL(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
}

// Under systemd (Type=notify) the daemon sends READY=1 once its listeners
// are bound, and STOPPING=1 when SIGTERM starts the drain.
func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Skipf("no unix datagram sockets here: %v", err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := runCLI(ctx, []string{"run", "--demo",
			"--parquet-dir", filepath.Join(dir, "data"),
			"--metrics-listen", "127.0.0.1:0",
			"--set", "demo.emulator.responses_per_survey=5", "--set", "demo.emulator.surveys=1",
			"--set", "webhooks.enabled=true", "--set", "webhooks.listen=127.0.0.1:0",
			"--set", "webhooks.path=/hooks/" + strings.Repeat("a1", 16),
			"--set", "webhooks.spool_dir=" + filepath.Join(dir, "spool")}, &out, &errOut)
		if code != 0 {
			t.Errorf("run: exit %d\n%s", code, tail(errOut.String(), 20))
		}
		done <- code
	}()
	read := func(want string) {
		t.Helper()
		buf := make([]byte, 256)
		_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("notify socket: %q %v, want %q", buf[:n], err, want)
		}
	}
	read("READY=1")
	cancel() // SIGTERM
	read("STOPPING=1")
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not stop")
	}
}
