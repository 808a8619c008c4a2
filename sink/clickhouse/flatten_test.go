package clickhouse

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// emulatorItems returns the emulator's responses for one survey (every
// question type, uploads included) as flatten items at version.
func emulatorItems(tb testing.TB, n int, version uint64) []flatten.Item {
	tb.Helper()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Options{
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Responses: n, Seed: 1, Files: true}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	var items []flatten.Item
	for r := range s.Responses(4574) {
		items = append(items, flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: version, SyncedAt: now})
	}
	if len(items) == 0 {
		tb.Fatal("the emulator generated no responses")
	}
	return items
}

func flattenBatch(tb testing.TB, mem memory.Allocator, items []flatten.Item) *flatten.Batch {
	tb.Helper()
	b := flatten.NewBuilder(mem)
	defer b.Release()
	for _, it := range items {
		if err := b.Add(it); err != nil {
			tb.Fatal(err)
		}
	}
	return b.Flush()
}

// The real flattener's output goes through Write into the views, and a
// deletion known only from a 404 (no detail) removes a response.
func TestWriteFlattenedEmulatorResponses(t *testing.T) {
	s, _ := openTest(t, nil)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	items := emulatorItems(t, 300, 10)
	wantResponses, wantAnswers := 0, 0
	for _, it := range items {
		if it.Response.ResponseStatus == survey.StatusDeleted {
			continue
		}
		wantResponses++
		for _, p := range it.Response.Pages {
			for _, q := range p.Questions {
				wantAnswers += len(q.Answers)
			}
		}
	}
	batch := flattenBatch(t, mem, items)
	for range 2 { // a retried batch changes nothing
		if err := s.Write(ctxT(t), batch); err != nil {
			t.Fatal(err)
		}
	}
	batch.Release()
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")); n != uint64(wantResponses) {
		t.Errorf("responses_current: %d rows, want %d", n, wantResponses)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")); n != uint64(wantAnswers) {
		t.Errorf("answers_current: %d rows, want %d", n, wantAnswers)
	}

	gone := items[0]
	del := flattenBatch(t, mem, []flatten.Item{{SurveyID: gone.SurveyID, ResponseID: gone.ResponseID, Deleted: true, Version: 20, SyncedAt: time.Now()}})
	if err := s.Write(ctxT(t), del); err != nil {
		t.Fatal(err)
	}
	del.Release()
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")+" WHERE response_id = toUUID('"+string(gone.ResponseID)+"')"); n != 0 {
		t.Errorf("deleted response still in responses_current")
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")+" WHERE response_id = toUUID('"+string(gone.ResponseID)+"')"); n != 0 {
		t.Errorf("deleted response still has %d answers in answers_current", n)
	}
}

// BenchmarkFlattenWrite compares, in one run and alternating, the raw
// clickhouse-go/v2 insert of ~100k answers rows (column slices prepared
// beforehand) with the whole path: flatten the emulator's responses into
// Arrow, then Sink.Write (answers and responses). Issue 3's bar:
// flatten+write answers rows/s ≥ 70 % of raw.
//
//	SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000 \
//	  go test -run '^$' -bench FlattenWrite -benchtime 10x ./sink/clickhouse/
func BenchmarkFlattenWrite(b *testing.B) {
	s, _ := openTest(b, nil)
	items := emulatorItems(b, 6700, 1) // ~100k answers rows
	mem := memory.NewGoAllocator()
	ref := flattenBatch(b, mem, items)
	defer ref.Release()
	rows := int(ref.Answers.NumRows())
	query := insertSQL(s.table(flatten.TableAnswers), flatten.AnswersSchema)
	cols := make([]any, ref.Answers.NumCols())
	for i, f := range ref.Answers.Schema().Fields() {
		v, err := new(conv).values(ref.Answers.Column(i), f, uuidColumns[f.Name])
		if err != nil {
			b.Fatal(err)
		}
		cols[i] = v
	}
	bld := flatten.NewBuilder(mem)
	defer bld.Release()
	var raw, full time.Duration
	for b.Loop() {
		start := time.Now()
		chb, err := s.Conn().PrepareBatch(ctxT(b), query)
		if err != nil {
			b.Fatal(err)
		}
		for i, v := range cols {
			if err := chb.Column(i).Append(v); err != nil {
				b.Fatal(err)
			}
		}
		if err := chb.Send(); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(start)

		start = time.Now()
		for _, it := range items {
			if err := bld.Add(it); err != nil {
				b.Fatal(err)
			}
		}
		batch := bld.Flush()
		if err := s.Write(ctxT(b), batch); err != nil {
			b.Fatal(err)
		}
		batch.Release()
		full += time.Since(start)
	}
	rawRate := float64(b.N*rows) / raw.Seconds()
	fullRate := float64(b.N*rows) / full.Seconds()
	b.ReportMetric(float64(rows), "answers/batch")
	b.ReportMetric(rawRate, "raw-rows/s")
	b.ReportMetric(fullRate, "flatten+write-rows/s")
	b.ReportMetric(100*fullRate/rawRate, "ratio-%")
}
