package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/testkit/chcluster"
	"github.com/surveysync/surveysync/sim"
)

// clusterOrSkip is the test cluster of scripts/cluster-up.sh as a
// testWarehouse on a fresh database (dropped ON CLUSTER after the test),
// connected to every node, or skips the test.
func clusterOrSkip(t *testing.T) (*chcluster.Cluster, *testWarehouse) {
	t.Helper()
	c := chcluster.FromEnv(t)
	c.Quiet(t) // no other package's test takes a node down meanwhile
	conn, err := ch.Open(&ch.Options{Addr: c.Addrs})
	if err != nil {
		t.Fatal(err)
	}
	w := &testWarehouse{conn: conn, db: "test_e2e_" + randHex(6), addr: strings.Join(c.Addrs, ", ")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+w.db+" ON CLUSTER "+c.Name)
		conn.Close()
	})
	return c, w
}

// rowsWritten counts the responses rows written so far (0 before the
// tables exist or while the cluster cannot answer).
func rowsWritten(w *testWarehouse) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM "+w.db+".responses").Scan(&n); err != nil {
		return 0
	}
	return n
}

// waitRows waits until at least n responses rows are written.
func waitRows(t *testing.T, w *testWarehouse, d *daemonProc, n uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for rowsWritten(w) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d responses rows after %v; output:\n%s", n, timeout, tail(d.output(), 40))
		}
		if d.cmd.ProcessState != nil {
			t.Fatalf("surveysync exited early; output:\n%s", tail(d.output(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterChaosBackfillIsExact runs the real binary against the 2 × 2
// test cluster, with API faults, while (a) one replica of each shard is
// killed and restarted, and (b) the node the daemon talks to (node 1, the
// first address: clickhouse-go connects in order) is killed and restarted.
// Afterwards every replica holds exactly the emulator's truth, each
// response on one shard only.
func TestClusterChaosBackfillIsExact(t *testing.T) {
	c, w := clusterOrSkip(t)
	c.Lock(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 3000, 41), Seed: 9})
	for _, f := range []sim.Fault{
		{Op: "get_response", Kind: "429", Probability: 0.03},
		{Op: "get_response", Kind: "503", Probability: 0.03},
		{Op: "list_responses", Kind: "500", Probability: 0.1},
		// No "shift" here: it inserts responses into windows already read,
		// and in 3 of 6 CI runs one of those was missing at the end even
		// after a second run (behind a watermark, only reconcile reads it
		// again): a poller matter, not the cluster's, kept in
		// TestFaultsLoseNothing and noted as open.
		{Op: "*", Kind: "uppercase_guid", Probability: 0.5},
	} {
		if err := e.sim.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}
	// 6,000 responses at 150 calls/s: a backfill of about 40 s, long
	// enough for both phases. The clickhouse section is examples/cluster.yaml's.
	cfg := writeConfig(t, e, nil, clusterSection(t, c, w.db)+"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  batch:\n    max_rows: 500\n")
	cfg = setRateLimit(t, cfg, 150)
	d := startDaemon(t, cfg, "--exit-when-synced")

	// (a) one replica of each shard.
	waitRows(t, w, d, 600, 3*time.Minute)
	c.Kill(t, 2)
	c.Kill(t, 4)
	time.Sleep(4 * time.Second)
	c.Start(t, 2)
	c.Start(t, 4)
	// (b) the node the daemon talks to.
	waitRows(t, w, d, rowsWritten(w)+1000, 3*time.Minute)
	c.Kill(t, 1)
	time.Sleep(4 * time.Second)
	c.Start(t, 1)

	d.wait(t, 6*time.Minute)
	if n := rowsWritten(w); n < 6000 {
		t.Fatalf("only %d responses rows written", n)
	}
	// The "shift" fault adds responses to the emulator while it lists: one
	// added by the last list call of the run arrives after the daemon's last
	// pass, as a real late response would (seen twice in CI: one response
	// missing). A second run without faults reads what arrived after the
	// watermarks; a response lost behind a watermark would stay missing.
	e.sim.ClearFaults()
	d = startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	truth := truthFingerprints(e)
	// A replica that was down catches up after its restart; until then a
	// read through the Distributed views may be served by it (the nodes
	// prefer the first replica: load_balancing in_order) and miss rows its
	// peer took meanwhile (seen once in CI). Nothing is lost: wait for the
	// replicas, then compare.
	syncReplicas(t, c, w.db)
	if msg := diff(truth, warehouseFingerprints(t, w)); msg != "" {
		t.Fatalf("through the Distributed views: %s", msg)
	}
	checkReplicas(t, c, w.db, truth)
}

// syncReplicas waits on every node until its replicas of db's responses
// and answers have fetched what their peers have (SYSTEM SYNC REPLICA).
func syncReplicas(t *testing.T, c *chcluster.Cluster, db string) {
	t.Helper()
	for i, addr := range c.Addrs {
		conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for _, table := range []string{"responses_local", "answers_local"} {
			if err := conn.Exec(ctx, "SYSTEM SYNC REPLICA "+db+"."+table); err != nil {
				t.Fatalf("node %d: SYSTEM SYNC REPLICA %s: %v", i+1, table, err)
			}
		}
		cancel()
		conn.Close()
	}
}

// checkReplicas reads each node's own _local tables (after syncReplicas):
// the two replicas of a shard hold the same responses, the two
// shards none in common, and together exactly truth.
func checkReplicas(t *testing.T, c *chcluster.Cluster, db string, truth map[string]string) {
	t.Helper()
	perNode := make([]map[string]string, len(c.Addrs))
	for i, addr := range c.Addrs {
		conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		// The views' logic, on this node's rows only (syncReplicas ran).
		got, err := readWarehouseAs(conn,
			"(SELECT * FROM "+db+".responses_local FINAL) WHERE is_deleted = 0",
			"(SELECT * FROM "+db+".answers_local FINAL) WHERE (response_id, _version) IN (SELECT response_id, _version FROM "+db+".responses_local FINAL WHERE is_deleted = 0)")
		conn.Close()
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		perNode[i] = got
	}
	union := map[string]string{}
	for shard := 0; shard < len(c.Addrs)/2; shard++ {
		a, b := perNode[2*shard], perNode[2*shard+1]
		if msg := diff(a, b); msg != "" {
			t.Errorf("shard %d: replicas differ: %s", shard+1, msg)
		}
		for id, v := range a {
			if _, dup := union[id]; dup {
				t.Errorf("response %s is on two shards", id)
			}
			union[id] = v
		}
		t.Logf("shard %d: %d responses on each replica", shard+1, len(a))
	}
	if msg := diff(truth, union); msg != "" {
		t.Errorf("the shards together: %s", msg)
	}
}

// setRateLimit rewrites api.rate_limit in the config file writeConfig wrote.
func setRateLimit(t *testing.T, path string, perSecond int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(b), "rate_limit: 100000", fmt.Sprintf("rate_limit: %d", perSecond), 1)
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClusterCopyFromSingleNodeThenRun: the documented move of a
// single-node deployment to a cluster, through the real binary: a backfill
// into the single node, `surveysync copy-from` into the cluster, then the
// daemon on the cluster, which finds everything in place (the emulator's
// truth, each response once).
func TestClusterCopyFromSingleNodeThenRun(t *testing.T) {
	w := clickhouseOrSkip(t)
	c, cw := clusterOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 400, 77)})
	d := startDaemon(t, writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n"), "--exit-when-synced")
	d.wait(t, 3*time.Minute)

	cfg := writeConfig(t, e, nil, clusterSection(t, c, cw.db)+"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	out, err := exec.Command(binPath, "copy-from", w.addr, "--from-database", w.db, "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("copy-from: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "responses") || !strings.Contains(string(out), "copied database "+w.db) {
		t.Errorf("copy-from output:\n%s", out)
	}
	truth := truthFingerprints(e)
	if msg := diff(truth, warehouseFingerprints(t, cw)); msg != "" {
		t.Fatalf("after the copy: %s", msg)
	}
	d = startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	if msg := diff(truth, warehouseFingerprints(t, cw)); msg != "" {
		t.Fatalf("after a run on the cluster: %s", msg)
	}
}

// clusterSection is the clickhouse section of examples/cluster.yaml, with
// the test cluster's addresses and name (they differ when cluster-up.sh ran
// on other ports) and database db.
func clusterSection(t *testing.T, c *chcluster.Cluster, db string) string {
	t.Helper()
	ex, err := config.Load("../../examples/cluster.yaml", []string{"SURVEYSYNC_API__TOKEN=t", "SURVEYSYNC_API__USER_AGENT=surveysync-test (t@example.invalid)", "SURVEYSYNC_SURVEYS=1"}, nil)
	if err != nil {
		t.Fatalf("examples/cluster.yaml: %v", err)
	}
	ch := ex.ClickHouse
	if ch.Cluster == "" || !ch.Replicated {
		t.Fatalf("examples/cluster.yaml: cluster %q, replicated %v", ch.Cluster, ch.Replicated)
	}
	return fmt.Sprintf("clickhouse:\n  addr: [%s]\n  database: %s\n  cluster: %s\n  replicated: %v\n  zookeeper_prefix: %s\n  ddl_timeout: %s\n  insert_quorum: %d\n",
		strings.Join(c.Addrs, ", "), db, c.Name, ch.Replicated, ch.ZooKeeperPrefix, ch.DDLTimeout, ch.InsertQuorum)
}
