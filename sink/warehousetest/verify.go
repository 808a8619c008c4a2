package warehousetest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// testVerify: what verification reads (warehouse.VerifyReader) — counts
// of current responses by status and date range with their split date,
// ids, samples and contents — from a reader opened after the writes.
func testVerify(t *testing.T, s *suite) {
	wh := s.wh
	c := ctx(t)
	r := func(n int, status string, created time.Time, v int) resp {
		return resp{survey: surveyVerify, n: n, status: status, created: created, version: version(v)}
	}
	write(t, wh,
		r(1, "", base, 1),                // completed base+1m
		r(2, "", base.Add(time.Hour), 1), // completed base+1h1m
		r(3, survey.StatusPartial, base.Add(2*time.Hour+700*time.Millisecond), 1), // started at 2h and 0.7s
		r(4, survey.StatusDisqualified, base.Add(30*time.Minute), 1),              // no completion: dated by its start
		r(5, "", base, 1),
		r(6, "", base.Add(3*time.Hour), 1),
	)
	write(t, wh, resp{survey: surveyVerify, n: 5, deleted: true, version: version(2)}, // not current
		resp{survey: surveyVerify, n: 6, created: base.Add(3 * time.Hour), essay: "druhá verze", version: version(2)})
	write(t, wh, resp{survey: surveyVerify2, n: 7, version: version(1)}) // another survey's is not counted
	vr := wh.Verifier()
	if vr == nil {
		t.Fatal("Verifier is nil")
	}
	completed := []string{survey.StatusCompleted}
	for _, tc := range []struct {
		name string
		r    warehouse.Range
		want warehouse.RangeCount
	}{
		{"completed", warehouse.Range{SurveyID: surveyVerify, Statuses: completed},
			warehouse.RangeCount{N: 3, Mid: base.Add(time.Hour + time.Minute)}},
		{"completed before the split", warehouse.Range{SurveyID: surveyVerify, Statuses: completed, To: base.Add(time.Hour + time.Minute)},
			warehouse.RangeCount{N: 1, Mid: base.Add(time.Minute)}},
		{"completed from the split", warehouse.Range{SurveyID: surveyVerify, Statuses: completed, From: base.Add(time.Hour + time.Minute)},
			warehouse.RangeCount{N: 2, Mid: base.Add(3*time.Hour + time.Minute)}},
		{"completed and disqualified", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusCompleted, survey.StatusDisqualified}},
			warehouse.RangeCount{N: 4, Mid: base.Add(time.Hour + time.Minute)}},
		{"partial, by start, to the second", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusPartial}, Started: true,
			From: base.Add(2 * time.Hour), To: base.Add(2*time.Hour + time.Second)}, warehouse.RangeCount{N: 1, Mid: base.Add(2 * time.Hour)}},
		{"partial, after its second", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusPartial}, Started: true,
			From: base.Add(2*time.Hour + time.Second)}, warehouse.RangeCount{}},
		{"none", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusQuotaFull}}, warehouse.RangeCount{}},
	} {
		got, err := vr.Count(c, tc.r)
		if err != nil {
			t.Fatalf("Count %s: %v", tc.name, err)
		}
		if got.N != tc.want.N || !got.Mid.Equal(tc.want.Mid) {
			t.Errorf("Count %s = %d, mid %v; want %d, mid %v", tc.name, got.N, got.Mid, tc.want.N, tc.want.Mid)
		}
	}

	ids, err := vr.IDs(c, warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusCompleted, survey.StatusDisqualified}, From: base.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{guid(surveyVerify, 1): survey.StatusCompleted, guid(surveyVerify, 2): survey.StatusCompleted,
		guid(surveyVerify, 4): survey.StatusDisqualified, guid(surveyVerify, 6): survey.StatusCompleted}
	if got := lowerKeys(ids); !maps.Equal(got, want) {
		t.Errorf("IDs = %v, want %v", got, want)
	}

	all := []string{guid(surveyVerify, 1), guid(surveyVerify, 2), guid(surveyVerify, 3), guid(surveyVerify, 4), guid(surveyVerify, 6)}
	sample := func(n int) []string {
		t.Helper()
		got, err := vr.Sample(c, surveyVerify, n)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(got))
		for i, id := range got {
			out[i] = strings.ToLower(string(id))
		}
		slices.Sort(out)
		return out
	}
	if got := sample(100); !slices.Equal(got, all) {
		t.Errorf("Sample(100) = %v, want every current response %v", got, all)
	}
	got := sample(2)
	if len(got) != 2 || got[0] == got[1] || !slices.Contains(all, got[0]) || !slices.Contains(all, got[1]) {
		t.Errorf("Sample(2) = %v, want two current responses", got)
	}

	contents, err := vr.Content(c, surveyVerify, []survey.GUID{survey.GUID(guid(surveyVerify, 6)), survey.GUID(guid(surveyVerify, 5)),
		survey.GUID(guid(surveyVerify, 404))})
	if err != nil {
		t.Fatal(err)
	}
	six := warehouse.Content{Status: survey.StatusCompleted, Created: base.Add(3 * time.Hour), Completed: base.Add(3*time.Hour + time.Minute),
		Answers: []warehouse.Answer{
			{PageID: 1, QuestionID: qChoice, ChoiceID: warehouse.OptInt{V: 1, Valid: true}},
			{PageID: 1, QuestionID: qEssay, Text: "druhá verze"},
			{PageID: 1, QuestionID: qScale, Value: warehouse.OptInt{V: 9, Valid: true}},
		}}
	gotContents := map[string]warehouse.Content{}
	for id, ct := range contents {
		gotContents[strings.ToLower(string(id))] = ct
	}
	if diff := cmp.Diff(map[string]warehouse.Content{guid(surveyVerify, 6): six}, gotContents); diff != "" {
		t.Errorf("Content (-want +got):\n%s", diff)
	}
	if ct := gotContents[guid(surveyVerify, 6)]; !ct.Equal(six) {
		t.Error("Content.Equal says the contents differ")
	}
}

func lowerKeys(m map[survey.GUID]string) map[string]string {
	out := make(map[string]string, len(m))
	for id, v := range m {
		out[strings.ToLower(string(id))] = v
	}
	return out
}

// testVerifyLog: passes read back per survey — the latest pass, the latest
// clean one, the latest row of each stream — ordered by survey id.
func testVerifyLog(t *testing.T, s *suite) {
	vl := s.wh.VerifyLog()
	if vl == nil {
		t.Fatal("VerifyLog is nil")
	}
	c := ctx(t)
	at := base.Add(time.Hour)
	run := func(surveyID int64, stream string, pass int, result, passResult string) warehouse.VerifyRun {
		start := at.Add(time.Duration(pass) * time.Hour)
		r := warehouse.VerifyRun{SurveyID: surveyID, Stream: stream, Method: warehouse.VerifyCounts, StartedAt: start,
			FinishedAt: start.Add(time.Minute), Service: 100, Warehouse: 100, Sampled: 5, Result: result, PassResult: passResult, APICalls: 4}
		if result == warehouse.VerifyDrift {
			r.Warehouse, r.Missing, r.Repaired = 98, 2, 2
		}
		return r
	}
	passes := [][]warehouse.VerifyRun{
		{run(surveyVerify, "completed", 0, warehouse.VerifyClean, warehouse.VerifyClean), run(surveyVerify, "partial", 0, warehouse.VerifyClean, warehouse.VerifyClean)},
		{run(surveyVerify, "completed", 1, warehouse.VerifyDrift, warehouse.VerifyDrift), run(surveyVerify, "partial", 1, warehouse.VerifyClean, warehouse.VerifyDrift),
			run(surveyVerify2, "completed", 1, warehouse.VerifyDrift, warehouse.VerifyDrift)},
	}
	for _, p := range passes {
		if err := vl.RecordVerifyRuns(c, p); err != nil {
			t.Fatal(err)
		}
	}
	all, err := vl.VerifyStates(c)
	if err != nil {
		t.Fatal(err)
	}
	var got []warehouse.VerifyState
	for _, st := range all {
		if st.SurveyID == surveyVerify || st.SurveyID == surveyVerify2 {
			slices.SortFunc(st.Latest, func(a, b warehouse.VerifyRun) int { return strings.Compare(a.Stream, b.Stream) })
			got = append(got, st)
		}
	}
	want := []warehouse.VerifyState{
		{SurveyID: surveyVerify, LastPass: passes[1][0].FinishedAt, LastClean: passes[0][0].FinishedAt, Result: warehouse.VerifyDrift,
			Latest: passes[1][:2]},
		{SurveyID: surveyVerify2, LastPass: passes[1][2].FinishedAt, Result: warehouse.VerifyDrift, Latest: passes[1][2:]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VerifyStates (-want +got):\n%s", diff)
	}
	if !slices.IsSortedFunc(all, func(a, b warehouse.VerifyState) int { return int(a.SurveyID - b.SurveyID) }) {
		t.Error("VerifyStates is not ordered by survey id")
	}
}
