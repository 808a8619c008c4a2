package verify

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/internal/testkit/chtest"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

const testSurvey = 4574

var testNow = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

// fixture is the emulator (one survey of n responses, on a fixed clock)
// behind the real client, and a Parquet warehouse holding exactly what the
// emulator holds.
type fixture struct {
	sim    *sim.Sim
	client *surveyapi.Client
	wh     warehouse.Warehouse
	ver    uint64
}

// backends are the warehouses every test runs on.
var backends = []string{"parquet", "clickhouse"}

func openWarehouse(t *testing.T, backend string) warehouse.Warehouse {
	t.Helper()
	if backend == "parquet" {
		wh, err := parquet.OpenWarehouse(parquet.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}
	db := fmt.Sprintf("verify_test_%d", time.Now().UnixNano())
	o, ok := chtest.Options(db)
	if !ok {
		t.Skip("no ClickHouse: set SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	}
	wh, err := clickhouse.OpenWarehouse(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = chtest.DropDatabase(context.Background(), wh.(*clickhouse.Sink)) })
	return wh
}

func newFixture(t *testing.T, backend string, n int) *fixture {
	t.Helper()
	wh := openWarehouse(t, backend) // first: it may skip the test
	s, err := sim.New(sim.Options{Token: "t", Now: func() time.Time { return testNow }, Seed: 3, Surveys: []sim.SurveySpec{{
		ID: testSurvey, Responses: n, Seed: 11, Start: testNow.Add(-time.Hour - time.Duration(n)*time.Minute),
		Statuses: sim.StatusMix{Completed: 0.7, Disqualified: 0.1, QuotaFull: 0.1, Partial: 0.1}, LateCompletion: -1,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	c, err := surveyapi.New(surveyapi.Options{BaseURL: srv.URL + "/v1", Token: "t", UserAgent: "test (t@example.invalid)", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wh.Close(); c.Close(); srv.Close(); s.Close() })
	f := &fixture{sim: s, client: c, wh: wh, ver: 1}
	var items []flatten.Item
	for r := range s.Responses(testSurvey) {
		items = append(items, f.item(r))
		if len(items) == 10_000 {
			f.write(t, items...)
			items = items[:0]
		}
	}
	f.write(t, items...)
	return f
}

func (f *fixture) item(r survey.Response) flatten.Item {
	f.ver++
	rr := r
	return flatten.Item{Response: &rr, SurveyID: testSurvey, ResponseID: r.ResponseID, Version: f.ver, SyncedAt: testNow}
}

func (f *fixture) write(t *testing.T, items ...flatten.Item) {
	t.Helper()
	b := flatten.NewBuilder(memory.NewGoAllocator())
	defer b.Release()
	for _, it := range items {
		if err := b.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	defer batch.Release()
	if err := f.wh.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// countingLister counts list calls.
type countingLister struct {
	Lister
	n atomic.Int64
}

func (c *countingLister) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	c.n.Add(1)
	return c.Lister.ListResponses(ctx, surveyID, q)
}

func (f *fixture) verify(t *testing.T, o Options) *Result {
	t.Helper()
	if o.Until.IsZero() {
		o.Until = testNow
	}
	l := &countingLister{Lister: f.client}
	res, err := New(l, f.client, f.wh.Verifier(), o).Survey(context.Background(), testSurvey)
	if err != nil {
		t.Fatal(err)
	}
	if res.ListCalls != l.n.Load() {
		t.Errorf("ListCalls = %d, the lister saw %d", res.ListCalls, l.n.Load())
	}
	return res
}

func (f *fixture) ids(status string, n int) []survey.Response {
	var out []survey.Response
	for r := range f.sim.Responses(testSurvey) {
		if r.ResponseStatus == status && len(out) < n {
			out = append(out, r)
		}
	}
	return out
}

func TestCleanPassCostsOneListCallPerStream(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { testCleanPass(t, b) })
	}
}

func testCleanPass(t *testing.T, backend string) {
	f := newFixture(t, backend, 3000)
	res := f.verify(t, Options{})
	if !res.Clean() {
		t.Fatalf("a copy of the emulator differs: %+v", res.Streams)
	}
	if res.ListCalls != 4 || res.DetailCalls != 0 {
		t.Errorf("a clean pass made %d list and %d detail calls; want 4 and 0", res.ListCalls, res.DetailCalls)
	}
	var total int64
	for _, s := range res.Streams {
		if s.Service != s.Warehouse {
			t.Errorf("%s: service %d, warehouse %d", s.Stream, s.Service, s.Warehouse)
		}
		total += s.Service
	}
	if total < 2900 {
		t.Errorf("the streams total %d responses; want about 3000", total)
	}
}

func TestFindsEachDifference(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { testFindsEachDifference(t, b) })
	}
}

func testFindsEachDifference(t *testing.T, backend string) {
	f := newFixture(t, backend, 3000)
	ctx := context.Background()
	// 7 completed responses deleted from the warehouse (deletion rows).
	var del []flatten.Item
	for _, r := range f.ids(survey.StatusCompleted, 7) {
		f.ver++
		del = append(del, flatten.Item{SurveyID: testSurvey, ResponseID: r.ResponseID, Deleted: true, Version: f.ver, SyncedAt: testNow})
	}
	f.write(t, del...)
	// 5 disqualified responses removed at the emulator (no webhook).
	dq := f.ids(survey.StatusDisqualified, 5)
	for _, r := range dq {
		if err := f.sim.PurgeResponse(testSurvey, r.ResponseID); err != nil {
			t.Fatal(err)
		}
	}
	// 3 completed responses added dated 60 days back.
	for i := range 3 {
		at := testNow.Add(-60*24*time.Hour + time.Duration(i)*time.Hour)
		if _, err := f.sim.AddResponse(testSurvey, survey.Response{DateCreated: survey.Time{Time: at.Add(-10 * time.Minute)},
			DateCompleted: &survey.Time{Time: at}, ResponseStatus: survey.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	// 1 phantom row (a quota-full response the service never had).
	phantom := f.ids(survey.StatusQuotaFull, 1)[0]
	phantom.ResponseID = "0badf00d-0000-4000-8000-000000000001"
	f.write(t, f.item(phantom))
	// 1 answer altered in the warehouse (a newer version).
	alt := f.ids(survey.StatusCompleted, 20)[19]
	altered := alt
	altered.Pages = slices.Clone(alt.Pages)
	for pi := range altered.Pages {
		qs := slices.Clone(altered.Pages[pi].Questions)
		altered.Pages[pi].Questions = qs
		for qi := range qs {
			if len(qs[qi].Answers) > 0 {
				as := slices.Clone(qs[qi].Answers)
				txt := "altered"
				as[0].Text, as[0].ChoiceID = &txt, nil
				qs[qi].Answers = as
				goto done
			}
		}
	}
done:
	f.write(t, f.item(altered))

	res := f.verify(t, Options{})
	want := map[string][2]int{survey.StatusCompleted: {3 + 7, 0}, survey.StatusDisqualified: {0, 5}, survey.StatusQuotaFull: {0, 1}, survey.StatusPartial: {0, 0}}
	for _, s := range res.Streams {
		w := want[s.Stream]
		if len(s.Missing) != w[0] || len(s.Extra) != w[1] || len(s.Content) != 0 {
			t.Errorf("%s: missing %d, extra %d, content %d; want %d, %d, 0", s.Stream, len(s.Missing), len(s.Extra), len(s.Content), w[0], w[1])
		}
		if got := s.Service - int64(len(s.Missing)) + int64(len(s.Extra)); got != s.Warehouse {
			t.Errorf("%s: service %d − missing + extra = %d, warehouse %d", s.Stream, s.Service, got, s.Warehouse)
		}
	}
	if res.Clean() {
		t.Error("Clean with differences")
	}
	t.Logf("a pass with 16 differences: %d list calls", res.ListCalls)
	if res.ListCalls > 60 {
		t.Errorf("%d list calls for 16 differences in 3 clusters", res.ListCalls)
	}
	if got := len(res.Rereads()); got != 16 {
		t.Errorf("Rereads: %d; want 16", got)
	}

	deep := f.verify(t, Options{Deep: true})
	if c := deep.Streams[0].Content; len(c) != 1 || c[0] != alt.ResponseID {
		t.Errorf("deep: completed content mismatches %v; want [%s]", c, alt.ResponseID)
	}
	n := 0
	for _, s := range deep.Streams {
		n += len(s.Content)
	}
	if n != 1 {
		t.Errorf("deep: %d content mismatches; want 1", n)
	}
	if deep.DetailCalls != int64(deep.Compared) || deep.Compared < 2900 {
		t.Errorf("deep: %d detail calls, %d compared", deep.DetailCalls, deep.Compared)
	}
	_ = ctx
}

// The service's quirk: a quota-full response detailed as disqualified is
// current in the warehouse as disqualified, and counts in quotafull.
func TestQuotaFullDetailedAsDisqualified(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { testQuotaFull(t, b) })
	}
}

func testQuotaFull(t *testing.T, backend string) {
	f := newFixture(t, backend, 500)
	var items []flatten.Item
	for _, r := range f.ids(survey.StatusQuotaFull, 1000) {
		r.ResponseStatus = survey.StatusDisqualified
		items = append(items, f.item(r))
	}
	f.write(t, items...)
	res := f.verify(t, Options{})
	if !res.Clean() {
		t.Fatalf("differs: %+v", res.Streams)
	}
	for _, s := range res.Streams {
		if s.Service != s.Warehouse {
			t.Errorf("%s: service %d, warehouse %d", s.Stream, s.Service, s.Warehouse)
		}
	}
}

// A late completion the warehouse still holds as partial is MISSING in
// completed and EXTRA in partial; a response rejected when listed so (and
// not written since) is named as rejected, not missing.
func TestStatusChangeAndRejected(t *testing.T) {
	f := newFixture(t, "parquet", 400)
	partial := f.ids(survey.StatusPartial, 1)[0]
	done, err := f.sim.CompletePartial(testSurvey, partial.ResponseID, "")
	if err != nil {
		t.Fatal(err)
	}
	rejected := f.ids(survey.StatusCompleted, 1)[0]
	f.ver++
	f.write(t, flatten.Item{SurveyID: testSurvey, ResponseID: rejected.ResponseID, Deleted: true, Version: f.ver, SyncedAt: testNow})
	// The emulator's clock stands still: the completion is at testNow,
	// which a pass up to testNow leaves out.
	res := f.verify(t, Options{Until: testNow.Add(time.Second), Rejected: func(context.Context, int64) (map[survey.GUID]string, error) {
		return map[survey.GUID]string{rejected.ResponseID: survey.StatusCompleted}, nil
	}})
	want := map[string]Stream{
		survey.StatusCompleted: {Missing: []survey.GUID{done.ResponseID}, Rejected: []survey.GUID{rejected.ResponseID}},
		survey.StatusPartial:   {Extra: []survey.GUID{partial.ResponseID}},
	}
	for _, s := range res.Streams {
		w := want[s.Stream]
		if !slices.Equal(s.Missing, w.Missing) || !slices.Equal(s.Extra, w.Extra) || !slices.Equal(s.Rejected, w.Rejected) {
			t.Errorf("%s: missing %v extra %v rejected %v; want %v %v %v", s.Stream, s.Missing, s.Extra, s.Rejected, w.Missing, w.Extra, w.Rejected)
		}
	}
	// One re-read of the changed response, at the status listed now.
	rr := res.Rereads()
	if len(rr) != 1 || rr[0] != (Reread{ID: done.ResponseID, ListedStatus: survey.StatusCompleted}) {
		t.Errorf("Rereads = %+v", rr)
	}
}
