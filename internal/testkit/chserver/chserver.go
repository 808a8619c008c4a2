// Package chserver gives tests a throw-away ClickHouse server of their
// own (the machine's clickhouse-server, started by
// scripts/clickhouse-up.sh) whose default user has a password: what tests
// of credentials need, which the shared test servers (no password) cannot
// give. It skips the test when SURVEYSYNC_TEST_CLICKHOUSE_ADDR is unset
// (no test ClickHouse on the machine).
package chserver

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// Server is a private ClickHouse server.
type Server struct {
	Addr     string // native protocol, 127.0.0.1:port
	HTTP     string // HTTP interface, 127.0.0.1:port
	Password string // the default user's
	Dir      string
}

// Start starts a private server whose default user has password, with
// every query logged in system.query_log; it is stopped and deleted at
// the end of the test.
func Start(t testing.TB, password string) *Server {
	t.Helper()
	if os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR") == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	_, file, _, _ := runtime.Caller(0)
	scripts := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts")
	tcp, http := freePort(t), freePort(t)
	s := &Server{Addr: "127.0.0.1:" + tcp, HTTP: "127.0.0.1:" + http, Password: password, Dir: t.TempDir()}
	t.Cleanup(func() {
		if out, err := exec.Command(filepath.Join(scripts, "clickhouse-down.sh"), s.Dir).CombinedOutput(); err != nil {
			t.Errorf("clickhouse-down.sh: %v\n%s", err, out)
		}
	})
	up := exec.Command(filepath.Join(scripts, "clickhouse-up.sh"), s.Dir)
	up.Env = append(os.Environ(), "CLICKHOUSE_TCP_PORT="+tcp, "CLICKHOUSE_HTTP_PORT="+http,
		"CLICKHOUSE_PASSWORD="+password, "CLICKHOUSE_LOG_QUERIES=1")
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("clickhouse-up.sh: %v\n%s", err, out)
	}
	return s
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
