package parquet

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/wide"
)

// TestExportWideWithoutChoiceIDs: without wide.choice_ids the export has no
// choice-id column, and its CSV starts with a byte order mark when asked.
// The export's content is the warehouse suite's
// (TestWarehouseSuite/ExportWide, choice ids on).
func TestExportWideWithoutChoiceIDs(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	em, err := sim.New(sim.Options{Now: func() time.Time { return now }, Surveys: []sim.SurveySpec{{ID: 4574, Responses: 10, Seed: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	b := flatten.NewBuilder(memory.NewGoAllocator())
	defer b.Release()
	for r := range em.Responses(4574) {
		if err := b.Add(flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: 1, SyncedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	defer batch.Release()
	if err := s.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := ExportWide(ctx, dir, 4574, WideOptions{}, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewCSV(&buf, fields, true)
	})
	if err != nil || n != 10 {
		t.Fatalf("ExportWide: %d rows, %v", n, err)
	}
	header, _, _ := strings.Cut(buf.String(), "\n")
	if !strings.HasPrefix(header, "\ufeffresponse_id,") {
		t.Errorf("header %q: want a byte order mark, then response_id", header)
	}
	if !strings.Contains(header, ",spokojenost,") || strings.Contains(header, "spokojenost_id") {
		t.Errorf("header %q: want spokojenost and no choice-id column", header)
	}
}
