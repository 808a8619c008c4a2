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
	version := func() uint64 { return uint64(time.Now().UnixNano()) }

	first := buildBatch(mem, []testResponse{{ID: guid(1), SurveyID: survey, Version: version(), Answers: 2}})
	defer first.Release()
	if ch := s.views.Seen(first.Responses, first.Answers); ch == nil {
		t.Fatal("a new survey's first batch is no change to the views")
	}
	if err := s.Write(ctxT(t), first); err != nil {
		t.Fatal(err)
	}
	if ch := s.views.Seen(first.Responses, first.Answers); ch != nil {
		t.Errorf("the same questions again are a change to the views: %+v", ch)
	}
	same := buildBatch(mem, []testResponse{{ID: guid(2), SurveyID: survey, Version: version(), Answers: 2}})
	defer same.Release()
	if ch := s.views.Seen(same.Responses, same.Answers); ch != nil {
		t.Errorf("another response to the same questions is a change to the views: %+v", ch)
	}

	more := buildBatch(mem, []testResponse{{ID: guid(3), SurveyID: survey, Version: version(), Answers: 3}})
	defer more.Release()
	if ch := s.views.Seen(more.Responses, more.Answers); ch == nil {
		t.Fatal("a response with a new question is no change to the views")
	}
	if err := s.Write(ctxT(t), more); err != nil {
		t.Fatal(err)
	}
	if ch := s.views.Seen(more.Responses, more.Answers); ch != nil {
		t.Errorf("after the write, its questions are still a change: %+v", ch)
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
