package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/internal/testkit/chcluster"
	"github.com/surveysync/surveysync/pipeline"
)

// TestLayoutOnOneShardCluster builds the cluster layout (<t>_local + Distributed) on
// the one-shard cluster "surveysync_local" that scripts/clickhouse-up.sh
// declares, without ON CLUSTER (that needs ZooKeeper), and runs the view
// checks through the Distributed tables.
func TestLayoutOnOneShardCluster(t *testing.T) {
	if testAddr() == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	probe, _ := openTest(t, nil)
	if countRows(t, probe, "SELECT count() FROM system.clusters WHERE cluster = 'surveysync_local'") == 0 {
		t.Skip("the server declares no cluster surveysync_local (start it with scripts/clickhouse-up.sh)")
	}
	s, _ := openTest(t, func(o *Options) {
		o.Cluster = "surveysync_local"
		o.noOnClusterDDL = true
	})
	var engine string
	if err := s.Conn().QueryRow(ctxT(t), "SELECT engine FROM system.tables WHERE database = '"+s.Database()+"' AND name = 'answers'").Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if engine != "Distributed" {
		t.Fatalf("answers engine = %s, want Distributed", engine)
	}
	done := baseTime.Add(time.Hour)
	writeBatch(t, s, []testResponse{
		{ID: guid(1), SurveyID: 1, Version: 100, Completed: &done, Answers: 5},
		{ID: guid(2), SurveyID: 1, Version: 100, Completed: &done, Answers: 3},
	})
	for range 3 {
		writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 1, Version: 200, Completed: &done, Answers: 2}})
	}
	writeBatch(t, s, []testResponse{{ID: guid(2), SurveyID: 1, Version: 300, Deleted: true}})
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_local")); n != 14 {
		t.Errorf("answers_local has %d rows, want 14 (insert_distributed_sync)", n)
	}
	got := readAnswers(t, s)
	if len(got) != 2 || got[0].Version != 200 {
		t.Errorf("answers_current = %v, want the 2 answers of version 200", got)
	}
	if rs := readResponses(t, s); len(rs) != 1 || rs[0].Version != 200 {
		t.Errorf("responses_current = %+v", rs)
	}
}

func TestOptionsValidation(t *testing.T) {
	cases := []struct {
		o    Options
		want string
	}{
		{Options{}, "addr"},
		{Options{Addr: []string{"x:9000"}, Database: "bad-name"}, "database"},
		{Options{Addr: []string{"x:9000"}, Cluster: "a;DROP"}, "cluster"},
	}
	for _, c := range cases {
		c.o.setDefaults()
		err := c.o.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want mention of %s", c.o, err, c.want)
		}
	}
	o := Options{Addr: []string{"x:9000"}}
	o.setDefaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if o.Database != "surveysync" || o.DialTimeout != 10*time.Second || o.Logger == nil || o.Registerer == nil {
		t.Errorf("defaults: %+v", o)
	}
}

func TestPasswordNeverLogged(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := Options{Addr: []string{"127.0.0.1:1"}, Password: "s3cret-pw", Logger: log, DialTimeout: 200 * time.Millisecond}
	log.Info("options", "options", o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Open(ctx, o)
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if strings.Contains(buf.String(), "s3cret-pw") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("password leaked: log %s, error %v", buf.String(), err)
	}
	if !strings.Contains(buf.String(), `"password":"***"`) {
		t.Errorf("log lacks the masked password: %s", buf.String())
	}
}

// TestClusterFailoverWhenNodeDies: with every node of the test cluster in
// clickhouse.addr, the Sink talks to the first; when that node is killed,
// the next write goes through another node (clickhouse-go dials the
// addresses in order), and nothing written is lost. Runs with the cluster
// tests of make test-cluster, not again in its on-cluster pass
// (SURVEYSYNC_TEST_CLICKHOUSE_ON_CLUSTER, whose tests use the cluster).
func TestClusterFailoverWhenNodeDies(t *testing.T) {
	c := chcluster.FromEnv(t)
	if onCluster() {
		t.Skip("runs once, with the cluster tests of make test-cluster, not in its on-cluster pass")
	}
	c.Lock(t)
	done := baseTime.Add(time.Hour)
	batch := func(from, n int) []testResponse {
		var rs []testResponse
		for i := from; i < from+n; i++ {
			rs = append(rs, testResponse{ID: guid(i), SurveyID: 1, Version: 10, Completed: &done, Answers: 3})
		}
		return rs
	}
	open := func(t *testing.T, quorum int) *Sink {
		s, err := Open(ctxT(t), Options{Addr: c.Addrs, Database: randomDB(), Cluster: c.Name,
			InsertQuorum: quorum, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Start(t, 1)
			if err := dropDatabase(context.Background(), s); err != nil {
				t.Errorf("drop: %v", err)
			}
			s.Close()
		})
		return s
	}
	want := func(t *testing.T, s *Sink, responses uint64) {
		t.Helper()
		if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")); n != responses {
			t.Errorf("responses_current has %d rows, want %d", n, responses)
		}
		if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")); n != 3*responses {
			t.Errorf("answers_current has %d rows, want %d", n, 3*responses)
		}
	}

	// Acknowledged by one replica (the default): the pooled connections to
	// node 1 fail, the write again (the pipeline's retry) dials node 2 and the write succeeds. Rows that
	// node 1 took just before it died and node 2 had not fetched yet are out
	// of reach until node 1 is back, then all are there.
	t.Run("quorum 1", func(t *testing.T) {
		s := open(t, 0)
		writeBatch(t, s, batch(0, 100))
		c.Kill(t, 1)
		writeRetrying(t, s, batch(100, 100), 6) // as the pipeline would
		if err := s.Ping(ctxT(t)); err != nil {
			t.Fatalf("Ping after the failover: %v", err)
		}
		c.Start(t, 1)
		syncReplicas(t, c.Addrs, s.Database(), "responses_local", "answers_local")
		want(t, s, 200)
	})
	// insert_quorum 2: an acknowledged insert is on both replicas, so it
	// stays readable while the node that took it is down.
	t.Run("quorum 2", func(t *testing.T) {
		s := open(t, 2)
		writeBatch(t, s, batch(0, 100))
		c.Kill(t, 1)
		if err := s.Ping(ctxT(t)); err != nil {
			t.Fatalf("Ping after the failover: %v", err)
		}
		want(t, s, 100)
		c.Start(t, 1)
		writeRetrying(t, s, batch(100, 100), 6)
		want(t, s, 200)
	})
}

// syncReplicas waits until every replica of db's tables has fetched what
// its peers have (SYSTEM SYNC REPLICA on each node).
func syncReplicas(t *testing.T, addrs []string, db string, tables ...string) {
	t.Helper()
	eachAddr(t, addrs, func(addr string, c driver.Conn) {
		for _, table := range tables {
			if err := c.Exec(ctxT(t), "SYSTEM SYNC REPLICA "+db+"."+table); err != nil {
				t.Fatalf("%s: SYSTEM SYNC REPLICA %s: %v", addr, table, err)
			}
		}
	})
}

// TestClusterOpenWithANodeDown: the migrations of a fresh database wait for every
// node; with one down, Open fails within clickhouse.ddl_timeout with a
// *ClusterDDLError that names the cluster, the node and the statement (the
// daemon waits it out), and succeeds once the node is back.
func TestClusterOpenWithANodeDown(t *testing.T) {
	c := chcluster.FromEnv(t)
	if onCluster() {
		t.Skip("runs once, with the cluster tests of make test-cluster, not in its on-cluster pass")
	}
	c.Lock(t)
	c.Kill(t, 4)
	o := Options{Addr: c.Addrs, Database: randomDB(), Cluster: c.Name, DDLTimeout: 3 * time.Second, Registerer: prometheus.NewRegistry()}
	start := time.Now()
	_, err := Open(ctxT(t), o)
	var cde *ClusterDDLError
	if !errors.As(err, &cde) || !Unreachable(err) {
		t.Fatalf("Open with a node down: %v, want a *ClusterDDLError", err)
	}
	for _, want := range []string{"cluster " + c.Name, "migration bootstrap statement 1", "did not finish on every node", "node " + c.Addrs[3]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !strings.Contains(cde.Fix(), "start ClickHouse on "+c.Addrs[3]) {
		t.Errorf("fix: %s", cde.Fix())
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Open took %v to fail", took)
	}
	c.Start(t, 4)
	o.DDLTimeout = time.Minute
	// The node runs the statement queued meanwhile first: until then Open
	// says so (the daemon retries with back-off, as here).
	var s *Sink
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		o.Registerer = prometheus.NewRegistry()
		if s, err = Open(ctxT(t), o); err == nil {
			break
		}
		if !errors.As(err, &cde) || time.Now().After(deadline) {
			t.Fatalf("Open once the node is back: %v", err)
		}
		t.Logf("node 4 back, not done yet: %s", cde.Summary())
	}
	if err := dropDatabase(context.Background(), s); err != nil {
		t.Error(err)
	}
	s.Close()
}

// TestUUIDShardingKeyIsARefusal: the cluster layout of earlier versions
// (Distributed tables sharded by cityHash64(response_id), which ClickHouse
// 18.16 cannot compute for a UUID) refused every insert with code 43. Such
// a refusal is reported as one (table, code, message), so the pipeline
// backs off and status, doctor and the alert name it; migration 0050
// re-creates the tables with a key every version computes.
func TestUUIDShardingKeyIsARefusal(t *testing.T) {
	if !onCluster() {
		t.Skip("needs the 2-shard cluster (make test-cluster): a one-shard cluster never computes the key")
	}
	s, _ := openTest(t, nil)
	for _, stmt := range []string{
		"DROP TABLE IF EXISTS " + s.table("responses") + s.tmpl.OnCluster,
		"CREATE TABLE " + s.table("responses") + s.tmpl.OnCluster + " AS " + s.tmpl.Local("responses") +
			" ENGINE = Distributed(" + s.opts.Cluster + ", " + s.Database() + ", responses_local, cityHash64(response_id))",
	} {
		if err := s.Conn().Exec(s.ddlCtx(ctxT(t)), stmt); err != nil {
			t.Fatal(err)
		}
	}
	done := baseTime.Add(time.Hour)
	err := s.Write(ctxT(t), buildBatch(memory.DefaultAllocator, []testResponse{{ID: guid(1), SurveyID: 1, Version: 1, Completed: &done, Answers: 0}}))
	var we *pipeline.WriteError
	if !errors.As(err, &we) {
		t.Fatalf("Write = %v, want a *pipeline.WriteError", err)
	}
	if !we.Refused || we.Code != 43 || we.Table != "responses" || !strings.Contains(we.Message, "cityHash64") {
		t.Errorf("WriteError = %+v, want a refusal of responses with code 43 naming cityHash64", we)
	}
}

// TestClusterMigrationAttachesAReplicaLeftByACrash: a node killed while it
// created a replicated table leaves the replica registered in ZooKeeper
// without the table (no metadata file); a CREATE … IF NOT EXISTS then fails
// on that node with "Replica … already exists" (code 253) at every start.
// The migrations attach the replica there instead (ATTACH TABLE IF NOT
// EXISTS … ON CLUSTER), metadata included, and go on.
func TestClusterMigrationAttachesAReplicaLeftByACrash(t *testing.T) {
	c := chcluster.FromEnv(t)
	if onCluster() {
		t.Skip("runs once, with the cluster tests of make test-cluster, not in its on-cluster pass")
	}
	if c.Dir == "" {
		t.Skip(chcluster.EnvDir + " is not set: the test removes a node's metadata file")
	}
	c.Quiet(t)
	create := `CREATE TABLE IF NOT EXISTS {{.Local "t"}}{{.OnCluster}} (a UInt8) ENGINE = {{.Engine "t" "MergeTree()"}} ORDER BY a`
	one := fstest.MapFS{"migrations/0001_t.sql": {Data: []byte(create)}}
	two := fstest.MapFS{"migrations/0001_t.sql": one["migrations/0001_t.sql"], "migrations/0002_t_again.sql": {Data: []byte(create)}}
	db := randomDB()
	o := Options{Addr: c.Addrs, Database: db, Cluster: c.Name, Registerer: prometheus.NewRegistry(), migrations: one}
	s, err := Open(ctxT(t), o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = dropDatabase(context.Background(), s)
		s.Close()
	}()
	// Node 4 as a kill mid-CREATE leaves it: the replica in ZooKeeper, no
	// table, no metadata file.
	c.Query(t, 4, "DETACH TABLE "+db+".t_local")
	meta := filepath.Join(c.Dir, "n4", "data", "metadata", db, "t_local.sql")
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	o.migrations, o.Registerer = two, prometheus.NewRegistry()
	s2, err := Open(ctxT(t), o)
	if err != nil {
		t.Fatalf("Open over a replica left without its table: %v", err)
	}
	s2.Close()
	if n := c.Query(t, 4, "SELECT count() FROM system.tables WHERE database = '"+db+"' AND name = 't_local'"); n != "1" {
		t.Errorf("node 4 has %s t_local tables after the migration", n)
	}
	if _, err := os.Stat(meta); err != nil {
		t.Errorf("node 4's metadata of t_local: %v", err)
	}
}
