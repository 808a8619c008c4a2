package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/survey"
)

// The per-survey metrics count each written response under its survey and
// status, its answer rows, and keep the newest date_completed per stream.
func TestPerSurveyMetrics(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	reg := prometheus.NewRegistry()
	f := &fakeFetcher{missing: map[survey.GUID]bool{id(3): true}}
	p := New(Options{Allocator: mem, MaxRows: 4, MaxDelay: 10 * time.Millisecond, Registerer: reg}, f, &memSink{})
	done := run(t, p, context.Background())
	for i := range 10 {
		sid := int64(4574)
		if i%2 == 1 {
			sid = 4575
		}
		if err := p.Submit(context.Background(), Ref{SurveyID: sid, ResponseID: id(i), Source: "poll"}); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// id(3) (survey 4575) is a 404: a deletion with no answers.
	want := `
# HELP surveysync_pipeline_newest_response_timestamp_seconds Unix time of the newest response written, by survey and stream: its date_completed (date_created for partial); sync lag = time() - this.
# TYPE surveysync_pipeline_newest_response_timestamp_seconds gauge
surveysync_pipeline_newest_response_timestamp_seconds{stream="completed",survey_id="4574"} 1.7000006e+09
surveysync_pipeline_newest_response_timestamp_seconds{stream="completed",survey_id="4575"} 1.7000006e+09
# HELP surveysync_pipeline_survey_answers_written_total Answer rows durably written, by survey and response status.
# TYPE surveysync_pipeline_survey_answers_written_total counter
surveysync_pipeline_survey_answers_written_total{status="completed",survey_id="4574"} 10
surveysync_pipeline_survey_answers_written_total{status="completed",survey_id="4575"} 8
# HELP surveysync_pipeline_survey_responses_written_total Responses durably written, by survey and response status (completed, partial, disqualified, quotafull, deleted, other).
# TYPE surveysync_pipeline_survey_responses_written_total counter
surveysync_pipeline_survey_responses_written_total{status="completed",survey_id="4574"} 5
surveysync_pipeline_survey_responses_written_total{status="completed",survey_id="4575"} 4
surveysync_pipeline_survey_responses_written_total{status="deleted",survey_id="4575"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"surveysync_pipeline_newest_response_timestamp_seconds",
		"surveysync_pipeline_survey_answers_written_total",
		"surveysync_pipeline_survey_responses_written_total"); err != nil {
		t.Fatal(err)
	}
}

func TestStatusLabelIsBounded(t *testing.T) {
	for in, want := range map[string]string{"completed": "completed", "quotafull": "quotafull", "weird": "other", "": "other"} {
		if got := statusLabel(in); got != want {
			t.Errorf("statusLabel(%q) = %q, want %q", in, got, want)
		}
	}
	m := newItemMeta(1, &survey.Response{ResponseStatus: survey.StatusPartial, DateCreated: survey.Time{Time: time.Unix(100, 0)}}, false, 0)
	if !m.at.Equal(time.Unix(100, 0)) {
		t.Errorf("partial response: newest time %v, want its date_created", m.at)
	}
}
