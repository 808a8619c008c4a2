package files_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/survey"
)

// The index in ClickHouse, end to end: the responses' rows are in the
// warehouse but the copier never saw them (as after a SIGKILL between the
// rows being written and the files being queued). A copier started on the
// warehouse finds the files in answers_current, copies them and indexes
// them; a deleted response's files leave uploaded_files_current; a second
// run copies nothing.
func TestClickHouseIndexEndToEnd(t *testing.T) {
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var rnd [6]byte
	rand.Read(rnd[:])
	ch, err := clickhouse.Open(ctx, clickhouse.Options{Addr: []string{addr}, Database: "test_files_" + hex.EncodeToString(rnd[:]), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ch.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS "+ch.Database())
		ch.Close()
	}()

	e := newEnv(t, sim.SurveySpec{ID: 77, Responses: 100, Seed: 9, Files: true, FileSize: 20 << 10})
	var resps []survey.Response
	var refs []files.FileRef
	for r := range e.sim.Responses(77) {
		resps = append(resps, r)
		refs = append(refs, files.FindFiles(&r, nil)...)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b := flatten.NewBuilder(mem)
	for i := range resps {
		if err := b.Add(flatten.Item{Response: &resps[i], SurveyID: 77, ResponseID: resps[i].ResponseID, Version: 1, SyncedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	if err := ch.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	batch.Release()
	b.Release()
	mem.AssertSize(t, 0)

	st, err := blob.OpenStore(ctx, blob.StoreOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := clickhouse.NewFileIndex(ch)
	newCopier := func(reg *prometheus.Registry) *blob.Copier {
		return blob.NewCopier(st, e.downloader(), idx, blob.Options{
			SpoolDir: t.TempDir(), RetryInitial: 20 * time.Millisecond, FlushInterval: 20 * time.Millisecond,
			IndexInterval: 100 * time.Millisecond, Registerer: reg,
		})
	}
	reg1 := prometheus.NewRegistry()
	c := newCopier(reg1)
	stop := run(t, c)
	stored := func() uint64 {
		var n uint64
		if err := ch.Conn().QueryRow(ctx, "SELECT count() FROM "+ch.Database()+".uploaded_files_current WHERE error = '' AND sha256 != ''").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for stored() != uint64(len(refs)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d files stored and indexed", stored(), len(refs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(refs) < 10 {
		t.Fatalf("only %d files generated", len(refs))
	}
	// Joinable to answers_current.
	var joined uint64
	if err := ch.Conn().QueryRow(ctx, "SELECT count() FROM (SELECT DISTINCT response_id, question_id FROM "+ch.Database()+
		".answers_current) ALL INNER JOIN (SELECT response_id, question_id FROM "+ch.Database()+
		".uploaded_files_current) USING (response_id, question_id)").Scan(&joined); err != nil {
		t.Fatal(err)
	}
	if joined != uint64(len(refs)) {
		t.Errorf("files joined to their answers: %d, want %d", joined, len(refs))
	}

	// A response is deleted: its files are marked deleted (FilesOf) and
	// leave the current view.
	gone := refs[0]
	c.MarkDeleted(gone.SurveyID, gone.ResponseID)
	deadline = time.Now().Add(30 * time.Second)
	for {
		recs, err := idx.FilesOf(ctx, gone.SurveyID, gone.ResponseID)
		if err != nil {
			t.Fatal(err)
		}
		var live []files.Record
		for _, r := range recs {
			if !r.Deleted {
				live = append(live, r)
			}
		}
		var shown uint64
		if err := ch.Conn().QueryRow(ctx, "SELECT count() FROM "+ch.Database()+".uploaded_files_current WHERE response_id = toUUID(?)",
			string(gone.ResponseID)).Scan(&shown); err != nil {
			t.Fatal(err)
		}
		if len(live) == 0 && len(recs) > 0 && shown == 0 && c.Idle() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted response still has %d live files", len(live))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()

	// A second run: discovery and reload find nothing to do.
	reg2 := prometheus.NewRegistry()
	c2 := newCopier(reg2)
	stop2 := run(t, c2)
	time.Sleep(500 * time.Millisecond)
	waitIdle(t, c2, 10*time.Second)
	stop2()
	if n := counter(t, reg2, "surveysync_files_copied_total"); n != 0 {
		t.Errorf("second run copied %v files", n)
	}
	if n := counter(t, reg1, "surveysync_files_copied_total"); n != float64(len(refs)) {
		t.Errorf("first run copied %v files, want %d", n, len(refs))
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}
