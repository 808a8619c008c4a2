package parquet

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

func TestReadCurrent(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	later := testItems(2)[:4] // a later version of the first four
	later[0].Response.ResponseStatus = survey.StatusPartial
	later[0].Response.DateCompleted = nil
	b1 := buildBatch(t, mem, testItems(1))
	defer b1.Release()
	b2 := buildBatch(t, mem, later)
	defer b2.Release()
	for _, b := range []*flatten.Batch{b1, b2} {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	cur, err := ReadCurrent(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := b1.Responses.NumRows() + b2.Responses.NumRows(); cur.Rows != want {
		t.Errorf("Rows = %d, want %d", cur.Rows, want)
	}
	if cur.Files == 0 || len(cur.Responses) != 13 {
		t.Fatalf("Files = %d, %d responses; want some files and 13 responses", cur.Files, len(cur.Responses))
	}
	first := cur.Responses[string(testItems(1)[0].ResponseID)]
	if first == nil || first.Version != 2 || first.Rows != 2 || first.Status != survey.StatusPartial || !first.Completed.IsZero() {
		t.Errorf("response 0 = %+v, want version 2 of 2 rows, partial, not completed", first)
	}
	if r := cur.Responses["ffffffff-0000-4000-8000-000000000000"]; r == nil || !r.Deleted {
		t.Errorf("the deleted response = %+v, want Deleted", r)
	}
	counts, total := cur.Counts()
	sum, deleted := 0, 0
	for i, c := range counts {
		if i > 0 && counts[i-1].SurveyID >= c.SurveyID {
			t.Errorf("counts not ordered by survey: %+v", counts)
		}
		sum += c.Current
		deleted += c.Deleted
	}
	if sum != total || total+deleted != 13 || deleted == 0 {
		t.Errorf("counts %+v: total %d, %d deleted; want them to cover the 13 responses", counts, total, deleted)
	}
	sample := cur.Sample(3)
	if len(sample) != 3 {
		t.Fatalf("Sample(3) = %d responses", len(sample))
	}
	for i, r := range sample {
		if r.Deleted || (i > 0 && r.Created.After(sample[i-1].Created)) {
			t.Errorf("sample %+v: want live responses, newest first", sample)
		}
	}

	one, err := ReadCurrent(ctx, dir, 3177)
	if err != nil {
		t.Fatal(err)
	}
	counts, total = one.Counts()
	if len(counts) != 1 || counts[0].SurveyID != 3177 || total != 4 || counts[0].ByStatus[survey.StatusPartial] != 1 || counts[0].ByStatus[survey.StatusCompleted] != 3 || counts[0].Name != "Průzkum" {
		t.Errorf("survey 3177: %+v, total %d; want 3 completed and 1 partial", counts, total)
	}
	if none, err := ReadCurrent(ctx, t.TempDir(), 0); err != nil || none.Files != 0 || len(none.Responses) != 0 {
		t.Errorf("empty folder: %+v, %v", none, err)
	}
}
