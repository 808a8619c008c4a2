package clickhouse

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestWideUpkeepRunsWhenQuestionsChange: Write runs the wide views' upkeep
// only for a batch that changes what they show. After a write, the same
// questions again are no change (wide.Upkeep.Seen, no query); a response
// with a question the survey did not have is one, and once written the
// view has its column.
func TestWideUpkeepRunsWhenQuestionsChange(t *testing.T) {
	s, _ := openTest(t, nil)
	const survey = 9101
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// Each step: a response with that many answers (questions q0…),
	// whether the views lack something of it, and whether it is written.
	for i, step := range []struct {
		what    string
		answers int
		change  bool
		write   bool
	}{
		{"a new survey's first response", 2, true, true},
		{"the same questions again", 2, false, false},
		{"a response with a new question", 3, true, true},
		{"that response, written", 3, false, false},
	} {
		b := buildBatch(mem, []testResponse{{ID: guid(i + 1), SurveyID: survey, Version: uint64(time.Now().UnixNano()), Answers: step.answers}})
		if got := s.views.Seen(b.Responses, b.Answers) != nil; got != step.change {
			t.Errorf("%s: a change to the views %v, want %v", step.what, got, step.change)
		}
		if step.write {
			if err := s.Write(ctxT(t), b); err != nil {
				t.Fatal(err)
			}
		}
		b.Release()
	}
	cols, err := s.WideColumns(ctxT(t), survey)
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 3 {
		t.Fatalf("%d columns recorded, want 3 (q0…q2)", len(cols))
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table(WideViewName(survey))+" WHERE "+quoteIdent(cols[2].Name)+" != ''"); n != 1 {
		t.Errorf("%d rows of the view answer the new question, want 1", n)
	}
}
