package warehousetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// surveySummary is testSummary's survey.
const surveySummary = 910020

// testSummary: surveysync query's counts. A survey with a response written
// twice, one per other status and one deleted counts its current responses
// per status, named; asked for every survey, it is among them and the total
// adds up. Where the backend counts deletions it counts the one; where it
// samples, the sample is the newest current responses, newest first, with
// their versions.
func testSummary(t *testing.T, s *suite) {
	wh := s.wh
	at := func(d time.Duration) time.Time { return base.Add(d) }
	write(t, wh,
		resp{survey: surveySummary, n: 1, version: version(1), created: at(time.Hour)},
		resp{survey: surveySummary, n: 2, version: version(1), created: at(2 * time.Hour), status: survey.StatusPartial},
		resp{survey: surveySummary, n: 3, version: version(1), created: at(3 * time.Hour)},
		resp{survey: surveySummary, n: 4, version: version(1), created: at(30 * time.Minute), status: survey.StatusDisqualified},
	)
	write(t, wh,
		resp{survey: surveySummary, n: 1, version: version(2), created: at(time.Hour)},
		resp{survey: surveySummary, n: 3, version: version(2), deleted: true},
	)
	name := "Průzkum 910020" // as the responses name it
	if err := wh.SaveSurveys(ctx(t), []pipeline.SurveyInfo{{SurveyID: surveySummary, Name: name, FirstSeen: base, LastSeen: base}}); err != nil {
		t.Fatal(err)
	}
	if err := wh.SaveStates(ctx(t), []pipeline.StreamState{{SurveyID: surveySummary, Stream: pipeline.StreamCompleted, Watermark: base, UpdatedAt: base}}); err != nil {
		t.Fatal(err)
	}

	sum, err := wh.Summarizer().Summary(ctx(t), surveySummary, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := warehouse.SurveyCount{SurveyID: surveySummary, Name: name, Current: 3,
		ByStatus: map[string]int{survey.StatusCompleted: 1, survey.StatusPartial: 1, survey.StatusDisqualified: 1}}
	if sum.Deletions {
		want.Deleted = 1
	}
	if diff := cmp.Diff([]warehouse.SurveyCount{want}, sum.Surveys); diff != "" || sum.Total != 3 {
		t.Errorf("Summary of survey %d: total %d, want 3; counts (-want +got):\n%s", surveySummary, sum.Total, diff)
	}
	if sum.About == "" {
		t.Error("Summary says nothing of where the data is (About)")
	}
	if sum.Sampled {
		wantSample := []warehouse.SampledResponse{
			{ID: guid(surveySummary, 2), SurveyID: surveySummary, Status: survey.StatusPartial, Created: at(2 * time.Hour), Versions: 1},
			{ID: guid(surveySummary, 1), SurveyID: surveySummary, Status: survey.StatusCompleted, Created: at(time.Hour),
				Completed: at(time.Hour + time.Minute), Versions: 2},
		}
		if diff := cmp.Diff(wantSample, sum.Sample); diff != "" {
			t.Errorf("Summary's sample of 2 (-want +got):\n%s", diff)
		}
	} else if len(sum.Sample) != 0 {
		t.Errorf("Summary not Sampled, with a sample: %v", sum.Sample)
	}

	all, err := wh.Summarizer().Summary(ctx(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	total, found := 0, false
	for i, sc := range all.Surveys {
		total += sc.Current
		if i > 0 && all.Surveys[i-1].SurveyID >= sc.SurveyID {
			t.Errorf("Summary of every survey is not ordered by survey: %d before %d", all.Surveys[i-1].SurveyID, sc.SurveyID)
		}
		if sc.SurveyID == surveySummary {
			found = true
			if diff := cmp.Diff(want, sc); diff != "" {
				t.Errorf("Summary of every survey, survey %d (-want +got):\n%s", surveySummary, diff)
			}
		}
	}
	if !found {
		t.Errorf("Summary of every survey lacks survey %d: %+v", surveySummary, all.Surveys)
	}
	if total != all.Total {
		t.Errorf("Summary of every survey: total %d, its surveys add up to %d", all.Total, total)
	}
	if len(all.Sample) != 0 {
		t.Errorf("Summary with a sample of 0: %d sampled", len(all.Sample))
	}
}
