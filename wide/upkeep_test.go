package wide

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// memStore is a Store in memory: the upkeep's policy tested at its own
// level (sink/clickhouse's wide tests run it on a real ClickHouse).
type memStore struct {
	cols     map[int64][]Column
	views    map[string]string // view → query
	calls    int               // every call
	failNext int               // ReplaceView calls to fail
}

func (m *memStore) Surveys(context.Context) ([]int64, error) { m.calls++; return nil, nil }
func (m *memStore) Columns(_ context.Context, id int64) ([]Column, error) {
	m.calls++
	return append([]Column(nil), m.cols[id]...), nil
}
func (m *memStore) RecordColumns(_ context.Context, cols []Column) error {
	m.calls++
	for _, c := range cols {
		m.cols[c.SurveyID] = append(m.cols[c.SurveyID], c)
	}
	return nil
}
func (m *memStore) ScanColumns(context.Context, int64) ([]Column, error) { m.calls++; return nil, nil }
func (m *memStore) View(_ context.Context, view string) (string, []string, error) {
	m.calls++
	return m.views[view], nil, nil
}
func (m *memStore) ReplaceView(_ context.Context, view, query string) error {
	m.calls++
	if m.failNext > 0 {
		m.failNext--
		return errors.New("node down")
	}
	m.views[view] = query
	return nil
}

// TestUpkeepRunsWhenQuestionsChange: Seen finds a change only in a batch
// that brings a question the views lack (never asking the store), Update
// records it and replaces the view; a failed replacement is not tried at
// every write but a minute later, and then it is.
func TestUpkeepRunsWhenQuestionsChange(t *testing.T) {
	ctx := context.Background()
	store := &memStore{cols: map[int64][]Column{}, views: map[string]string{}, failNext: 1}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	u := NewUpkeep(store, UpkeepOptions{Database: "db", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }})
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	// seen returns whether a batch of one response to the questions
	// 1001…1000+n is a change, and applies it.
	seen := func(n int) bool {
		t.Helper()
		answers := answersBatch(mem, n)
		defer answers.Release()
		calls := store.calls
		ch := u.Seen(nil, answers)
		if store.calls != calls {
			t.Fatal("Seen asked the store")
		}
		u.Update(ctx, ch)
		return ch != nil
	}
	if !seen(2) {
		t.Fatal("a new survey's first batch is no change")
	}
	if len(store.cols[7]) != 2 {
		t.Fatalf("%d columns recorded, want 2", len(store.cols[7]))
	}
	if store.views[ViewName(7)] != "" {
		t.Fatal("the view was replaced though ReplaceView failed")
	}
	if seen(2) {
		t.Error("the same questions with the failed replacement not due are a change: retried at every write")
	}
	now = now.Add(retryAfter)
	if !seen(2) {
		t.Error("the failed replacement is not tried again a minute later")
	}
	if q := store.views[ViewName(7)]; !strings.Contains(q, "AS `q_1002`") {
		t.Errorf("the view's query lacks the column q_1002:\n%s", q)
	}
	if seen(2) {
		t.Error("the same questions are a change once the view is replaced")
	}
	if !seen(3) {
		t.Error("a new question is no change")
	}
	if q := store.views[ViewName(7)]; len(store.cols[7]) != 3 || !strings.Contains(q, "AS `q_1003`") {
		t.Errorf("%d columns recorded, want 3; the view's query lacks q_1003:\n%s", len(store.cols[7]), q)
	}
}

// answersBatch is the answers of one response of survey 7 to the essay
// questions 1001…1000+n: the columns of flatten's answers schema that the
// upkeep reads (built here: wide imports nothing of the module, not even
// in its tests).
func answersBatch(mem memory.Allocator, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
		{Name: "survey_id", Type: arrow.PrimitiveTypes.Int64}, {Name: "question_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "row_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, {Name: "other_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "question_type", Type: arrow.BinaryTypes.String}, {Name: "variable", Type: arrow.BinaryTypes.String},
		{Name: "question_title", Type: arrow.BinaryTypes.String}, {Name: "row_label", Type: arrow.BinaryTypes.String},
		{Name: "page_index", Type: arrow.PrimitiveTypes.Uint16}, {Name: "question_index", Type: arrow.PrimitiveTypes.Uint16},
	}, nil))
	defer b.Release()
	for q := 1; q <= n; q++ {
		b.Field(0).(*array.Int64Builder).Append(7)
		b.Field(1).(*array.Int64Builder).Append(int64(1000 + q))
		b.Field(2).(*array.Int64Builder).AppendNull()
		b.Field(3).(*array.Int64Builder).AppendNull()
		b.Field(4).(*array.StringBuilder).Append("essay")
		b.Field(5).(*array.StringBuilder).Append(fmt.Sprintf("q_%d", 1000+q))
		b.Field(6).(*array.StringBuilder).Append(fmt.Sprintf("Otázka %d", q))
		b.Field(7).(*array.StringBuilder).Append("")
		b.Field(8).(*array.Uint16Builder).Append(0)
		b.Field(9).(*array.Uint16Builder).Append(uint16(q))
	}
	return b.NewRecordBatch()
}
