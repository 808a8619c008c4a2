// Package chcluster gives integration tests the real ClickHouse test cluster
// that scripts/cluster-up.sh starts on loopback (make cluster-up; .ci/run
// starts it too): cluster surveysync_cluster, 2 shards x 2 replicas of
// ClickHouse 18.16 and one ZooKeeper. Node n (1..4) is Addrs[n-1]; nodes 1
// and 2 are shard 01 (macros replica n1, n2), nodes 3 and 4 shard 02 (n3,
// n4).
//
// FromEnv skips the test unless SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR is
// set and the test runs under scripts/test-cluster.sh (make test-cluster),
// which sets SURVEYSYNC_TEST_CLUSTER_GUARD=1: every test that uses the
// cluster runs under that script's guard against ClickHouse 18.16's
// DDLWorker race (docs/operations.md, "Replicated ClickHouse 18.x"), none in
// the first pass of make test. Such a test is named TestCluster… (FromEnv
// fails any other), which is how the script finds them.
//
// Stop, Kill and Start run scripts/cluster-node.sh on one node, for
// chaos tests; they need SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_DIR (the
// cluster's directory). A test that stops or kills a node holds an exclusive
// lock on the directory until it ends (so two such tests, in different
// packages, never take nodes down at once) and, if it leaves a node down,
// the node is started again when it ends. Tests that only read and write
// may still see a node down while a chaos test of another package runs:
// they should tolerate it or take the lock with Quiet.
//
// After a replica restarts, its Replicated tables stay read-only until
// ZooKeeper expires the killed process's session (the nodes use a 10 s
// session timeout): wait with SYSTEM SYNC REPLICA or poll system.replicas.
//
// Standard library only: queries go through clickhouse-client (installed
// beside clickhouse-server).
package chcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The variables scripts/cluster-up.sh prints.
const (
	EnvAddr = "SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR" // 127.0.0.1:9101,...,127.0.0.1:9104
	EnvName = "SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER"      // surveysync_cluster
	EnvDir  = "SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_DIR"  // the directory given to cluster-up.sh

	// EnvGuard is set to 1 by scripts/test-cluster.sh, whose guard restarts
	// a node whose DDLWorker stopped and runs the package again.
	EnvGuard = "SURVEYSYNC_TEST_CLUSTER_GUARD"
	// TestPrefix begins the name of every test that uses the cluster.
	TestPrefix = "TestCluster"
)

// WaitTimeout bounds Start and WaitAll.
var WaitTimeout = 90 * time.Second

// Cluster is the test cluster named by the environment.
type Cluster struct {
	Addrs []string // native host:port of node n at Addrs[n-1]
	Name  string   // the cluster's name in remote_servers
	Dir   string   // its directory ("" when the cluster was not started by cluster-up.sh)

	mu       sync.Mutex
	locked   map[testing.TB]bool // tests holding the lock
	holders  int                 // len(locked)
	lockFile *os.File            // flocked while holders > 0
}

// FromEnv returns the cluster of the environment, or skips the test when
// SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR is unset or the test does not run
// under scripts/test-cluster.sh. It fails a test not named TestCluster….
func FromEnv(t testing.TB) *Cluster {
	t.Helper()
	if !strings.HasPrefix(t.Name(), TestPrefix) {
		t.Fatalf("%s uses the test cluster: name it %s… so that make test-cluster runs it under its guard", t.Name(), TestPrefix)
	}
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Skip(EnvAddr + " is not set (make cluster-up prints it)")
	}
	if os.Getenv(EnvGuard) != "1" {
		t.Skip("the cluster tests run in make test-cluster (scripts/test-cluster.sh), under its guard against ClickHouse 18.16's DDLWorker race")
	}
	c := &Cluster{Name: os.Getenv(EnvName), Dir: os.Getenv(EnvDir), locked: map[testing.TB]bool{}}
	for _, a := range strings.Split(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if c.Name == "" {
		t.Fatalf("%s is set but %s is not", EnvAddr, EnvName)
	}
	return c
}

// Shard returns node n's shard number (1 or 2): nodes 1, 2 are shard 1,
// nodes 3, 4 shard 2.
func (c *Cluster) Shard(n int) int { return (n + 1) / 2 }

// Stop stops node n with SIGTERM and waits until it has exited.
func (c *Cluster) Stop(t testing.TB, n int) {
	t.Helper()
	c.Lock(t)
	c.restartAtEnd(t, n)
	c.node(t, "stop", n)
}

// Kill kills node n with SIGKILL and waits until it has exited.
func (c *Cluster) Kill(t testing.TB, n int) {
	t.Helper()
	c.Lock(t)
	c.restartAtEnd(t, n)
	c.node(t, "kill", n)
}

// Start starts node n (nothing if it runs) with its config and data, and
// waits until it answers SELECT 1.
func (c *Cluster) Start(t testing.TB, n int) {
	t.Helper()
	c.node(t, "start", n)
}

// WaitAll waits until every node answers SELECT 1 and reaches ZooKeeper.
func (c *Cluster) WaitAll(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for n := 1; n <= len(c.Addrs); n++ {
		for {
			_, err := c.QueryErr(n, "SELECT count() FROM system.zookeeper WHERE path = '/'")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %d (%s) does not answer after %v: %v", n, c.Addrs[n-1], WaitTimeout, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// Query runs sql on node n with clickhouse-client and returns its output
// (TabSeparated) without the final newline; the test fails on an error.
func (c *Cluster) Query(t testing.TB, n int, sql string) string {
	t.Helper()
	out, err := c.QueryErr(n, sql)
	if err != nil {
		t.Fatalf("node %d: %s: %v", n, sql, err)
	}
	return out
}

// QueryErr is Query returning the error (the server's message) instead.
func (c *Cluster) QueryErr(n int, sql string) (string, error) {
	if n < 1 || n > len(c.Addrs) {
		return "", fmt.Errorf("chcluster: no node %d (have %d)", n, len(c.Addrs))
	}
	host, port, ok := strings.Cut(c.Addrs[n-1], ":")
	if !ok {
		port = "9000"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "clickhouse-client", "--host", host, "--port", port, "--connect_timeout", "2", "--query", sql)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", errors.New(msg)
		}
		return "", err
	}
	return strings.TrimSuffix(stdout.String(), "\n"), nil
}

// Lock takes an exclusive lock on the cluster's directory until the test
// ends (Stop and Kill take it): tests of different packages that take nodes
// down run one at a time.
func (c *Cluster) Lock(t testing.TB) {
	t.Helper()
	c.needDir(t)
	// A test and its subtests share the lock this Cluster holds (flock on a
	// second descriptor of the same file would wait for ever).
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locked[t] {
		return
	}
	c.locked[t] = true
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.locked, t)
		c.holders--
		if c.holders == 0 {
			_ = syscall.Flock(int(c.lockFile.Fd()), syscall.LOCK_UN) // closing the file releases it too
			c.lockFile.Close()
			c.lockFile = nil
		}
	})
	c.holders++
	if c.lockFile != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "chaos.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	c.lockFile = f
}

// Quiet holds the same lock as Lock when chaos tests can run (the cluster
// has a directory) and does nothing otherwise: a test that reads and writes
// and does not tolerate a node going down under it takes it, so that no
// chaos test of another package runs meanwhile (seen in CI: a migration's
// ALTER … ON CLUSTER refused with "some replicas are inactive" while
// another package's test had node 4 down).
func (c *Cluster) Quiet(t testing.TB) {
	t.Helper()
	if c.Dir == "" {
		return
	}
	c.Lock(t)
}

// restartAtEnd starts node n again when the test ends, if it is down then.
// Cleanups run last-registered first: Lock's was registered earlier, so the
// node is back before the lock is released.
func (c *Cluster) restartAtEnd(t testing.TB, n int) {
	t.Cleanup(func() {
		if _, err := c.QueryErr(n, "SELECT 1"); err == nil {
			return
		}
		if out, err := c.run("start", n); err != nil {
			t.Errorf("restart node %d at the end of the test: %v\n%s", n, err, out)
		}
	})
}

func (c *Cluster) node(t testing.TB, action string, n int) {
	t.Helper()
	c.needDir(t)
	if n < 1 || n > len(c.Addrs) {
		t.Fatalf("chcluster: no node %d (have %d)", n, len(c.Addrs))
	}
	if out, err := c.run(action, n); err != nil {
		t.Fatalf("cluster-node.sh %s %d: %v\n%s", action, n, err, out)
	}
}

func (c *Cluster) run(action string, n int) ([]byte, error) {
	script, err := nodeScript()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, c.Dir, action, fmt.Sprint(n))
	cmd.Env = append(os.Environ(), fmt.Sprintf("CLUSTER_WAIT_SECONDS=%d", int(WaitTimeout/time.Second)))
	return cmd.CombinedOutput()
}

func (c *Cluster) needDir(t testing.TB) {
	t.Helper()
	if c.Dir == "" {
		t.Skip(EnvDir + " is not set: stopping nodes needs the cluster of scripts/cluster-up.sh")
	}
}

// nodeScript finds scripts/cluster-node.sh in the repository: up from the
// working directory (go test runs in the package's directory).
func nodeScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "cluster-node.sh")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("chcluster: %s: %w", p, err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("chcluster: no go.mod above the working directory, cannot find scripts/cluster-node.sh")
		}
		dir = parent
	}
}
