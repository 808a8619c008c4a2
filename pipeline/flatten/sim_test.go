package flatten_test

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// emulatorItems returns every response the emulator generates for a survey
// with all its question types, uploads included (a test-only dependency:
// the flattener itself imports none of the sources).
func emulatorItems(tb testing.TB, n int) []flatten.Item {
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
		items = append(items, flatten.Item{
			Response: &r, SurveyID: 4574, ResponseID: r.ResponseID,
			Version: uint64(len(items) + 1), SyncedAt: now,
		})
	}
	if len(items) == 0 {
		tb.Fatal("the emulator generated no responses")
	}
	return items
}

func TestEmulatorResponses(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	items := emulatorItems(t, 2000)
	b := flatten.NewBuilder(mem)
	defer b.Release()
	wantAnswers, deleted := 0, 0
	types := map[string]int{}
	for _, it := range items {
		if err := b.Add(it); err != nil {
			t.Fatalf("emulator response: %v", err)
		}
		if it.Response.ResponseStatus == survey.StatusDeleted {
			deleted++
			continue
		}
		for _, p := range it.Response.Pages {
			for _, q := range p.Questions {
				wantAnswers += len(q.Answers)
				types[q.Type] += len(q.Answers)
			}
		}
	}
	batch := b.Flush()
	defer batch.Release()
	resp, ans := batch.Rows()
	if resp != int64(len(items)) || ans != int64(wantAnswers) {
		t.Fatalf("rows %d/%d, want %d/%d", resp, ans, len(items), wantAnswers)
	}
	t.Logf("%d responses (%d deleted), %d answers rows, %.1f per response; answers by question type: %v",
		resp, deleted, ans, float64(ans)/float64(resp), types)
}

// BenchmarkAddEmulator is BenchmarkAdd on the emulator's responses.
func BenchmarkAddEmulator(b *testing.B) {
	items := emulatorItems(b, 2000)
	bld := flatten.NewBuilder(memory.NewGoAllocator())
	defer bld.Release()
	answers := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := bld.Add(items[i%len(items)]); err != nil {
			b.Fatal(err)
		}
		if r, a := bld.Rows(); r >= 5000 {
			answers += a
			bld.Flush().Release()
		}
	}
	_, a := bld.Rows()
	answers += a
	bld.Flush().Release()
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/sec, "responses/s")
	b.ReportMetric(float64(answers)/sec, "answers/s")
}
