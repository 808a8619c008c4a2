package clickhouse

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/internal/testkit/chcluster"
	"github.com/surveysync/surveysync/pipeline"
)

// TestClusterCopyFromSingleNode moves a single-node database (the server of
// SURVEYSYNC_TEST_CLICKHOUSE_ADDR) to the test cluster with CopyFrom:
// responses at several versions, a deletion, answers, rejects and
// checkpoints. The views on the cluster then show exactly what they showed
// on the single node, every response on one shard, and a second copy
// (after a failure half-way, say) changes nothing.
func TestClusterCopyFromSingleNode(t *testing.T) {
	c := chcluster.FromEnv(t)
	single := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if single == "" || onCluster() {
		t.Skip("needs the single test server and the cluster (the cluster tests of make test-cluster)")
	}
	c.Quiet(t) // no other package's test takes a node down meanwhile
	ctx := ctxT(t)
	src, err := Open(ctx, Options{Addr: []string{single}, Database: randomDB()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropDatabase(context.Background(), src); src.Close() })
	dst, err := Open(ctx, Options{Addr: c.Addrs, Database: randomDB(), Cluster: c.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dropDatabase(context.Background(), dst); dst.Close() })

	done := baseTime.Add(time.Hour)
	var rs []testResponse
	for i := range 300 {
		rs = append(rs, testResponse{ID: guid(i), SurveyID: int64(1 + i%3), Version: 10, Completed: &done, Answers: 1 + i%4,
			Params: [][2]string{{"src", "mail"}}})
	}
	writeBatch(t, src, rs)
	writeBatch(t, src, []testResponse{{ID: guid(5), SurveyID: 3, Version: 20, Completed: &done, Answers: 7}})
	writeBatch(t, src, []testResponse{{ID: guid(6), SurveyID: 1, Version: 30, Deleted: true}})
	if err := src.WriteRejects(ctx, []pipeline.Reject{{SurveyID: 2, ResponseID: "not-a-guid", Stage: pipeline.StageFetch,
		Reason: "decode", Error: "bad JSON", Source: "poll", RejectedAt: baseTime}}); err != nil {
		t.Fatal(err)
	}
	states := []pipeline.StreamState{{SurveyID: 1, Stream: pipeline.StreamCompleted, Watermark: baseTime, LastRunAt: baseTime, Synced: 100, UpdatedAt: baseTime}}
	if err := src.SaveStates(ctx, states); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		reports, err := dst.CopyFrom(ctx, CopySource{Addr: single, Database: src.Database()})
		if err != nil {
			t.Fatal(err)
		}
		if len(reports) != len(copiedTables) {
			t.Fatalf("%d tables copied, want %d", len(reports), len(copiedTables))
		}
	}
	if diff := cmp.Diff(readResponses(t, src), readResponses(t, dst)); diff != "" {
		t.Errorf("responses_current differs (-single +cluster):\n%s", diff)
	}
	if diff := cmp.Diff(readAnswers(t, src), readAnswers(t, dst)); diff != "" {
		t.Errorf("answers_current differs (-single +cluster):\n%s", diff)
	}
	if got, err := dst.LoadStates(ctx); err != nil || len(got) != 1 || !got[0].Watermark.Equal(baseTime) {
		t.Errorf("checkpoints on the cluster = %+v, %v", got, err)
	}
	// The wide views' columns keep their names, and the views exist.
	for _, id := range []int64{1, 2, 3} {
		want, err := src.WideColumns(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.WideColumns(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || len(got) != len(want) {
			t.Errorf("survey %d: %d wide columns on the cluster, %d on the single node", id, len(got), len(want))
		}
		if n := countRows(t, dst, "SELECT count() FROM "+dst.table(WideViewName(id))); n != countRows(t, src, "SELECT count() FROM "+src.table(WideViewName(id))) || n == 0 {
			t.Errorf("survey %d: wide view has %d rows on the cluster", id, n)
		}
	}
	if n := countRows(t, dst, "SELECT count() FROM "+dst.table("rejects")+" FINAL"); n != 1 {
		t.Errorf("rejects on the cluster: %d, want 1", n)
	}
	// Each response on one shard: the shards' responses_local hold disjoint
	// sets that add up to the whole.
	total := uint64(0)
	for _, n := range []int{1, 3} {
		out := strings.TrimSpace(c.Query(t, n, "SELECT uniqExact(response_id) FROM "+dst.Database()+".responses_local"))
		var k uint64
		for _, ch := range out {
			k = 10*k + uint64(ch-'0')
		}
		if k == 0 {
			t.Errorf("node %d (shard %d) holds no responses", n, c.Shard(n))
		}
		total += k
	}
	if total != 300 {
		t.Errorf("the shards hold %d distinct responses in all, want 300 (each on one shard)", total)
	}
}

// A source that is not at the target's migrations is refused before
// anything is copied, and the source's password is in no error.
func TestCopyRefusesOtherMigrations(t *testing.T) {
	s, _ := openTest(t, nil)
	addr := testAddrs()[0]
	_, err := s.CopyFrom(ctxT(t), CopySource{Addr: addr, Database: "system", Password: "s3cret-copy-pw"})
	if err == nil {
		t.Fatal("copy from a database without surveysync's tables succeeded")
	}
	if strings.Contains(err.Error(), "s3cret-copy-pw") {
		t.Errorf("the source's password is in the error: %v", err)
	}
	if _, err := s.CopyFrom(ctxT(t), CopySource{Addr: "no-port", Database: "x"}); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("bad source address: %v", err)
	}
}
