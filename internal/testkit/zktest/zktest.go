// Package zktest gives tests a ZooKeeper: the shared one named by
// SURVEYSYNC_TEST_ZOOKEEPER (Addr), or a private one they may stop and
// start (Start, with scripts/zookeeper-up.sh). Both skip the test when
// SURVEYSYNC_TEST_ZOOKEEPER is unset; .ci/run sets it.
package zktest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Env is the variable naming the test ZooKeeper (host:port).
const Env = "SURVEYSYNC_TEST_ZOOKEEPER"

// Addr returns the shared test ZooKeeper's address, or skips t.
func Addr(t testing.TB) string {
	t.Helper()
	a := os.Getenv(Env)
	if a == "" {
		t.Skip(Env + " not set (scripts/zookeeper-up.sh DIR prints it)")
	}
	return a
}

// Root returns a znode path no other test uses.
func Root(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/surveysync-test/%s-%d", name, time.Now().UnixNano())
}

// Server is a private ZooKeeper.
type Server struct {
	Dir  string
	Addr string
	port int
}

func scripts() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts")
}

// Start starts a private ZooKeeper on a free loopback port, stopped and
// deleted at the end of the test; it skips t when SURVEYSYNC_TEST_ZOOKEEPER
// is unset.
func Start(t testing.TB) *Server {
	t.Helper()
	Addr(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{Dir: t.TempDir(), Addr: fmt.Sprintf("127.0.0.1:%d", port), port: port}
	t.Cleanup(func() { s.run(t, "zookeeper-down.sh", s.Dir) })
	s.Restart(t)
	return s
}

// Restart starts the server again (its data is kept).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.run(t, "zookeeper-up.sh", s.Dir, fmt.Sprint(s.port))
}

// Stop stops the server with SIGTERM, Kill with SIGKILL.
func (s *Server) Stop(t testing.TB) { t.Helper(); s.run(t, "zookeeper-down.sh", s.Dir) }
func (s *Server) Kill(t testing.TB) { t.Helper(); s.run(t, "zookeeper-down.sh", s.Dir, "--kill") }

func (s *Server) run(t testing.TB, script string, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(scripts(), script), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
}
