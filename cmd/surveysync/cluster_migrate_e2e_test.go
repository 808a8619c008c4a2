package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/chcluster"
	"github.com/surveysync/surveysync/internal/testkit/zktest"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/clickhouse"
)

// migrateClusterSection is clusterSection with a short
// clickhouse.ddl_timeout: a statement waits that long for a dead node.
func migrateClusterSection(t *testing.T, c *chcluster.Cluster, db string) string {
	t.Helper()
	s := regexp.MustCompile(`ddl_timeout: \S+`).ReplaceAllString(clusterSection(t, c, db), "ddl_timeout: 5s")
	if !strings.Contains(s, "ddl_timeout: 5s") {
		t.Fatalf("no ddl_timeout in the cluster section:\n%s", s)
	}
	return s
}

// withMetrics turns on the metrics listener of the config writeConfig
// wrote, on a free port, and returns its address.
func withMetrics(t *testing.T, cfg string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	rewriteConfig(t, cfg, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + addr + "\n"})
	return addr
}

// migrationsRecorded counts the rows of db.schema_migrations on node 1
// (0 before the table exists).
func migrationsRecorded(c *chcluster.Cluster, db string) int {
	out, err := c.QueryErr(1, "SELECT count() FROM "+db+".schema_migrations")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(out)
	return n
}

// TestClusterReplicaKilledDuringFirstMigrations: a fresh 2 × 2 cluster
// database, a daemon starting on it, and one replica (node 4) SIGKILLed as
// soon as the first migration is recorded, while the rest run ON CLUSTER.
// The daemon does not exit: it waits with back-off, one log line per step,
// /readyz 503 naming the node and the migration, status saying so; once the
// node is started again it finishes the migrations and syncs, and every
// replica ends exact.
func TestClusterReplicaKilledDuringFirstMigrations(t *testing.T) {
	c, w := clusterOrSkip(t)
	c.Lock(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 60, 71), Seed: 71})
	cfg := writeConfig(t, e, nil, migrateClusterSection(t, c, w.db)+"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	metrics := withMetrics(t, cfg)
	d := startDaemon(t, cfg)

	for deadline := time.Now().Add(2 * time.Minute); migrationsRecorded(c, w.db) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) || d.cmd.ProcessState != nil {
			t.Fatalf("no migration recorded; output:\n%s", tail(d.output(), 30))
		}
	}
	// Not at the very moment of the record: node 4 is fetching its part
	// then, and a replica killed while it fetches a part of a one-part
	// table refuses to start without force_restore_data
	// (scripts/cluster-node.sh handles it, docs/operations.md says how).
	time.Sleep(500 * time.Millisecond)
	const dead = 4
	c.Kill(t, dead)
	killed := time.Now()
	t.Logf("node %d killed after %d migration(s) recorded", dead, migrationsRecorded(c, w.db))

	node := c.Addrs[dead-1]
	body := waitReadyz(t, d, metrics, 503, "node "+node, 2*time.Minute)
	t.Logf("/readyz %v after the kill: %s", time.Since(killed).Round(100*time.Millisecond), strings.TrimSpace(body))
	if !regexp.MustCompile(`migration \d{4}_\w+\.sql`).MatchString(body) {
		t.Errorf("/readyz does not name the migration: %s", body)
	}
	// A few back-off steps, each one log line, the daemon still up.
	waitOutput(t, d, "attempt=3", time.Minute)
	out, code := runCLIBin(t, "status", "--config", withoutAPISecrets(t, cfg))
	if code != exitFail || !strings.Contains(out, "NOT READY") || !strings.Contains(out, node) {
		t.Errorf("status while the node is down: exit %d:\n%s", code, out)
	}
	t.Logf("status:\n%s", out)
	// doctor and a one-shot run fail with the fix that names the node
	// (waiting, if need be, while the daemon holds the migrations lock for
	// its next attempt), never the unreachable-server one.
	oneShot := filepath.Join(t.TempDir(), "one-shot.yaml") // without the daemon's metrics.listen
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(oneShot, []byte(strings.Replace(string(b), "listen: "+metrics, `listen: ""`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"doctor", "--config", cfg}, {"run", "--config", oneShot, "--exit-when-synced"}} {
		out, code := runCLIBin(t, args...)
		if code != exitFail || strings.Contains(out, "check clickhouse.addr (native port") || !strings.Contains(out, "start ClickHouse on "+node) {
			t.Errorf("%s while the node is down: exit %d:\n%s", args[0], code, out)
		}
		t.Logf("%s: exit %d: %s", args[0], code, tail(out, 3))
	}
	if strings.Contains(d.output(), "check clickhouse.addr (native port") {
		t.Errorf("the daemon gave the unreachable-server fix:\n%s", tail(d.output(), 20))
	}
	if d.cmd.ProcessState != nil {
		t.Fatalf("the daemon exited:\n%s", tail(d.output(), 30))
	}

	c.Start(t, dead)
	started := time.Now()
	waitReadyz(t, d, metrics, 200, "ready", 3*time.Minute)
	t.Logf("ready %v after node %d was started again (%d waiting lines)", time.Since(started).Round(100*time.Millisecond), dead,
		strings.Count(d.output(), "start-up: the cluster has not run a migration on every node"))
	waitConverged(t, e, w, 2*time.Minute)
	t.Logf("synced %v after the node was started", time.Since(started).Round(100*time.Millisecond))
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)
	syncReplicas(t, c, w.db)
	checkReplicas(t, c, w.db, truthFingerprints(e))
}

// TestClusterThreeDaemonsFirstStartTogether: three daemons (ha: one
// account, one database) started at the same moment on a fresh replicated
// cluster database. The migrations lock lets one apply the migrations while
// the others wait: each migration is recorded once and each ON CLUSTER
// statement queued once (no ALTER twice, the ClickHouse 18.x DDLWorker
// race); all three come up ready, and the data is exact on every replica.
func TestClusterThreeDaemonsFirstStartTogether(t *testing.T) {
	c, w := clusterOrSkip(t)
	zk := zktest.Addr(t)
	root := zktest.Root(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 60, 72), Seed: 72})
	var ds []*daemonProc
	var addrs []string
	var cfgs []string
	for i := range 3 {
		cfg := writeConfig(t, e, nil, migrateClusterSection(t, c, w.db)+"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n"+
			fmt.Sprintf("ha:\n  servers: [%s]\n  root: %s\n  instance: d%d\n", zk, root, i))
		addrs = append(addrs, withMetrics(t, cfg))
		cfgs = append(cfgs, cfg)
	}
	start := time.Now()
	for _, cfg := range cfgs {
		ds = append(ds, startDaemon(t, cfg))
	}
	for i, d := range ds {
		waitReadyz(t, d, addrs[i], 200, "ready", 3*time.Minute)
	}
	t.Logf("all three ready %v after they started", time.Since(start).Round(100*time.Millisecond))
	waitConverged(t, e, w, 2*time.Minute)

	applied, waited := 0, 0
	for _, d := range ds {
		applied += strings.Count(d.output(), "migration applied")
		waited += strings.Count(d.output(), "another surveysync applies the migrations")
	}
	recorded := migrationsRecorded(c, w.db)
	if applied != recorded || recorded == 0 {
		t.Errorf("%d migrations applied by the three daemons, %d recorded", applied, recorded)
	}
	// Every ON CLUSTER statement of the migrations queued once: as many
	// tasks of the database in the DDL queue as the migrations have
	// statements (the bootstrap's CREATE … IF NOT EXISTS, run before the
	// lock, may be queued by each daemon: harmless, no ALTER; the wide
	// views survey_<id> are the running daemons').
	stmts, err := clickhouse.SchemaDDL(w.db, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := len(stmts) - 3
	queued := c.Query(t, 1, "SELECT count() FROM system.zookeeper WHERE path = '"+clickhouse.DDLQueuePath+"' AND position(value, '"+w.db+".') > 0 "+
		"AND position(value, 'schema_migrations') = 0 AND position(value, 'migration_lock') = 0 AND position(value, '"+w.db+".survey_') = 0")
	if queued != strconv.Itoa(want) {
		t.Errorf("%s ON CLUSTER tasks of the migrations queued for %s, want %d (one per statement)", queued, w.db, want)
	}
	t.Logf("%d migrations applied once (%d ON CLUSTER statements queued once); %d waiting lines in the others' logs", recorded, want, waited)
	for _, d := range ds {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, d := range ds {
		d.wait(t, time.Minute)
	}
	syncReplicas(t, c, w.db)
	checkReplicas(t, c, w.db, truthFingerprints(e))
}
