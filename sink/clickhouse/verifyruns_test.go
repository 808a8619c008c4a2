package clickhouse

import (
	"testing"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
)

// verify_runs keeps every pass; VerifyStates gives the latest row of each
// survey × stream and each survey's latest clean pass.
func TestVerifyRunsHistory(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	if sts, err := s.VerifyStates(ctx); err != nil || len(sts) != 0 {
		t.Fatalf("no history yet: %v, %v", sts, err)
	}
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	row := func(survey int64, stream string, at time.Time, pass string, missing int64) warehouse.VerifyRun {
		r := warehouse.VerifyRun{SurveyID: survey, Stream: stream, Method: warehouse.VerifyCounts, StartedAt: at.Add(-time.Second), FinishedAt: at,
			Service: 10, Warehouse: 10 - missing, Missing: missing, Result: warehouse.VerifyClean, PassResult: pass, APICalls: 4}
		if missing > 0 {
			r.Result = warehouse.VerifyDrift
		}
		return r
	}
	runs := []warehouse.VerifyRun{
		row(4574, "completed", t0, warehouse.VerifyClean, 0), row(4574, "partial", t0, warehouse.VerifyClean, 0),
		row(4574, "completed", t0.Add(time.Hour), warehouse.VerifyDrift, 2), row(4574, "partial", t0.Add(time.Hour), warehouse.VerifyDrift, 0),
		row(77, "completed", t0, warehouse.VerifyDrift, 1),
	}
	if err := s.RecordVerifyRuns(ctx, runs); err != nil {
		t.Fatal(err)
	}
	sts, err := s.VerifyStates(ctx)
	if err != nil || len(sts) != 2 {
		t.Fatalf("states: %+v, %v", sts, err)
	}
	if st := sts[0]; st.SurveyID != 77 || !st.LastClean.IsZero() || st.Result != warehouse.VerifyDrift || len(st.Latest) != 1 {
		t.Errorf("survey 77: %+v", st)
	}
	st := sts[1]
	if st.SurveyID != 4574 || !st.LastClean.Equal(t0) || !st.LastPass.Equal(t0.Add(time.Hour)) || st.Result != warehouse.VerifyDrift || len(st.Latest) != 2 {
		t.Fatalf("survey 4574: %+v", st)
	}
	if st.Latest[0].Stream != "completed" || st.Latest[0].Missing != 2 || st.Latest[0].APICalls != 4 {
		t.Errorf("latest completed row: %+v", st.Latest[0])
	}
}
