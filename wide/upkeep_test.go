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

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
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
		b := answersBatch(t, mem, n)
		defer b.Release()
		calls := store.calls
		ch := u.Seen(b.Responses, b.Answers)
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

// answersBatch is a flattened response of survey 7 answering the essay
// questions 1001…1000+n.
func answersBatch(t *testing.T, mem memory.Allocator, n int) *flatten.Batch {
	t.Helper()
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	resp := survey.Response{ResponseID: "00000000-0000-4000-8000-000000000001", SurveyID: 7,
		DateCreated: survey.Time{Time: at}, ResponseStatus: survey.StatusCompleted}
	page := survey.Page{ID: 1}
	for q := 1; q <= n; q++ {
		page.Questions = append(page.Questions, survey.Question{ID: int64(1000 + q), Type: "essay", Variable: fmt.Sprintf("q_%d", 1000+q),
			Answers: []survey.Answer{{Text: survey.Str("ano")}}})
	}
	resp.Pages = []survey.Page{page}
	b := flatten.NewBuilder(mem)
	defer b.Release()
	if err := b.Add(flatten.Item{SurveyID: 7, ResponseID: resp.ResponseID, Version: 1, SyncedAt: at, Response: &resp}); err != nil {
		t.Fatal(err)
	}
	return b.Flush()
}
