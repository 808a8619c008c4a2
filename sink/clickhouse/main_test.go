package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/pipeline/flatten"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The integration tests run against the single server of
// SURVEYSYNC_TEST_CLICKHOUSE_ADDR, or, with SURVEYSYNC_TEST_CLICKHOUSE_ON_CLUSTER=1
// (make test-cluster), against the cluster of
// SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER (its nodes in
// SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR, comma-separated): every Sink the
// tests open is then in cluster mode, replicated, ON CLUSTER.

// onCluster reports whether the integration tests target the cluster.
func onCluster() bool { return os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ON_CLUSTER") == "1" }

// testAddr is the ClickHouse server (or cluster nodes, comma-separated) of
// the integration tests, or "".
func testAddr() string {
	if onCluster() {
		return os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR")
	}
	return os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
}

// testAddrs is testAddr as a list.
func testAddrs() []string { return strings.Split(testAddr(), ",") }

// testOptions are the Options of a test's Sink on database db: the single
// server, or the cluster.
func testOptions(db string) Options {
	o := Options{Addr: testAddrs(), Database: db, Registerer: prometheus.NewRegistry()}
	if onCluster() {
		o.Cluster = os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER")
	}
	return o
}

// dropDatabase drops db (on every node of the cluster in cluster mode).
func dropDatabase(ctx context.Context, s *Sink) error {
	return s.Conn().Exec(s.ddlCtx(ctx), "DROP DATABASE IF EXISTS "+s.Database()+s.tmpl.OnCluster)
}

// openTest opens a Sink on a fresh database that is dropped after the test.
// It skips the test when no server is configured.
func openTest(t testing.TB, mod func(*Options)) (*Sink, *prometheus.Registry) {
	t.Helper()
	addr := testAddr()
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	reg := prometheus.NewRegistry()
	o := testOptions(randomDB())
	o.Registerer = reg
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, s); err != nil {
			t.Errorf("drop database %s: %v", s.Database(), err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, reg
}

func randomDB() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "test_clickhouse_" + hex.EncodeToString(b[:])
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testResponse describes one response version for a hand-built batch.
type testResponse struct {
	ID        string // lower-case GUID
	SurveyID  int64
	Version   uint64
	Deleted   bool
	Status    string
	Completed *time.Time
	Answers   int // answers rows, one question per row
	Params    [][2]string
	// ContactIDHash is the contact_id_hash column (privacy: hash).
	ContactIDHash string
}

func guid(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

var baseTime = time.Date(2026, 8, 21, 10, 30, 0, 0, time.UTC)

// buildBatch builds a flatten.Batch directly with the Arrow builders, in
// the order and with the schema flatten uses.
func buildBatch(mem memory.Allocator, rs []testResponse) *flatten.Batch {
	rb := array.NewRecordBuilder(mem, flatten.ResponsesSchema)
	defer rb.Release()
	ab := array.NewRecordBuilder(mem, flatten.AnswersSchema)
	defer ab.Release()
	for i, r := range rs {
		status := r.Status
		if status == "" {
			status = "completed"
		}
		if r.Deleted {
			status = "deleted"
		}
		rb.Field(0).(*array.StringBuilder).Append(r.ID)
		rb.Field(1).(*array.Int64Builder).Append(r.SurveyID)
		rb.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("Průzkum %d", r.SurveyID))
		if i%2 == 0 {
			rb.Field(3).(*array.Int64Builder).Append(14457)
			rb.Field(4).(*array.Int64Builder).AppendNull()
		} else {
			rb.Field(3).(*array.Int64Builder).AppendNull()
			rb.Field(4).(*array.Int64Builder).Append(4998745)
		}
		rb.Field(5).(*array.StringBuilder).Append("10.0.0.1")
		if r.Deleted {
			// As flatten writes a deletion known only from a 404: no
			// detail, date_created at the epoch (another partition).
			rb.Field(6).(*array.TimestampBuilder).Append(0)
		} else {
			rb.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(baseTime.UnixMilli()))
		}
		if r.Completed != nil {
			rb.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(r.Completed.UnixMilli()))
			rb.Field(8).(*array.Int64Builder).Append(int64(r.Completed.Sub(baseTime) / time.Second))
		} else {
			rb.Field(7).(*array.TimestampBuilder).AppendNull()
			rb.Field(8).(*array.Int64Builder).AppendNull()
		}
		rb.Field(9).(*array.StringBuilder).Append(status)
		names := rb.Field(10).(*array.ListBuilder)
		values := rb.Field(11).(*array.ListBuilder)
		names.Append(true)
		values.Append(true)
		for _, p := range r.Params {
			names.ValueBuilder().(*array.StringBuilder).Append(p[0])
			values.ValueBuilder().(*array.StringBuilder).Append(p[1])
		}
		var deleted uint8
		if r.Deleted {
			deleted = 1
		}
		rb.Field(12).(*array.Uint8Builder).Append(deleted)
		rb.Field(13).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Unix(0, int64(r.Version)).UnixMilli()))
		rb.Field(14).(*array.Uint64Builder).Append(r.Version)
		rb.Field(15).(*array.StringBuilder).Append(r.ContactIDHash)

		if r.Deleted {
			continue
		}
		for q := 0; q < r.Answers; q++ {
			appendAnswer(ab, r, q, status)
		}
	}
	return &flatten.Batch{Responses: rb.NewRecordBatch(), Answers: ab.NewRecordBatch(), Token: "test"}
}

func appendAnswer(ab *array.RecordBuilder, r testResponse, q int, status string) {
	ab.Field(0).(*array.StringBuilder).Append(r.ID)
	ab.Field(1).(*array.Int64Builder).Append(r.SurveyID)
	ab.Field(2).(*array.Int64Builder).Append(100 + int64(q/5))
	ab.Field(3).(*array.Uint16Builder).Append(uint16(q / 5))
	ab.Field(4).(*array.Int64Builder).Append(1000 + int64(q))
	ab.Field(5).(*array.Uint16Builder).Append(uint16(q % 5))
	ab.Field(6).(*array.StringBuilder).Append("single_choice")
	ab.Field(7).(*array.StringBuilder).Append(fmt.Sprintf("Otázka %d: jak se vám líbí?", q))
	ab.Field(8).(*array.StringBuilder).Append(fmt.Sprintf("q%d", q))
	ab.Field(9).(*array.Uint16Builder).Append(0)
	if q%3 == 0 {
		ab.Field(10).(*array.Int64Builder).Append(int64(q))
		ab.Field(11).(*array.StringBuilder).Append("řádek")
	} else {
		ab.Field(10).(*array.Int64Builder).AppendNull()
		ab.Field(11).(*array.StringBuilder).Append("")
	}
	ab.Field(12).(*array.Int64Builder).AppendNull()
	ab.Field(13).(*array.StringBuilder).Append("")
	ab.Field(14).(*array.Int64Builder).Append(5000 + int64(q))
	ab.Field(15).(*array.StringBuilder).Append("Ano")
	ab.Field(16).(*array.Int64Builder).AppendNull()
	ab.Field(17).(*array.StringBuilder).Append(fmt.Sprintf("text v%d", r.Version))
	ab.Field(18).(*array.Int64Builder).Append(int64(q))
	ab.Field(19).(*array.StringBuilder).Append(status)
	if r.Completed != nil {
		ab.Field(20).(*array.TimestampBuilder).Append(arrow.Timestamp(r.Completed.UnixMilli()))
	} else {
		ab.Field(20).(*array.TimestampBuilder).AppendNull()
	}
	ab.Field(21).(*array.Uint64Builder).Append(r.Version)
}

// skipOnCluster skips a test of the one-shard layout of the single server.
func skipOnCluster(t *testing.T) {
	t.Helper()
	if onCluster() {
		t.Skip("the one-shard cluster surveysync_local is declared on the single test server only")
	}
}

// optimizeFinal merges every part of the storage table of s's table (the
// public name, or its _local table). In cluster mode it runs on each node
// in turn, then waits until every replica has the merged parts
// (OPTIMIZE … ON CLUSTER of a replicated table fails on ClickHouse 18.16
// with "Unknown log entry type: 0", and so, at times, does a plain one).
func optimizeFinal(t testing.TB, s *Sink, storage string) {
	t.Helper()
	if s.tmpl.OnCluster == "" {
		if err := s.Conn().Exec(ctxT(t), "OPTIMIZE TABLE "+s.table(storage)+" FINAL"); err != nil {
			t.Fatal(err)
		}
		return
	}
	local := s.tmpl.Local(strings.TrimSuffix(storage, "_local"))
	eachNode(t, func(addr string, c driver.Conn) {
		// 18.16 may fail while it waits for the other replica to run the
		// merge it queued ("Unknown log entry type: 0", from
		// waitForAllReplicasToProcessLogEntry): the merge is queued, and
		// SYSTEM SYNC REPLICA below waits for it.
		if err := c.Exec(ctxT(t), "OPTIMIZE TABLE "+local+" FINAL"); err != nil && !strings.Contains(err.Error(), "Unknown log entry type") {
			t.Fatalf("%s: %v", addr, err)
		}
	})
	eachNode(t, func(addr string, c driver.Conn) {
		if err := c.Exec(ctxT(t), "SYSTEM SYNC REPLICA "+local); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
	})
}

// eachNode calls f with a connection to each node of testAddrs in turn.
func eachNode(t testing.TB, f func(addr string, c driver.Conn)) {
	t.Helper()
	eachAddr(t, testAddrs(), f)
}

// eachAddr calls f with a connection to each of addrs in turn.
func eachAddr(t testing.TB, addrs []string, f func(addr string, c driver.Conn)) {
	t.Helper()
	for _, addr := range addrs {
		c, err := ch.Open(&ch.Options{Addr: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		f(addr, c)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
