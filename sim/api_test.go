package sim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/survey"
)

// truthList returns, from the truth, the ids a list of status st must show
// at the sim's now, in the service's order.
func truthList(t *testing.T, s *Sim, surveyID int64, st string, keep func(*survey.Response) bool) []survey.GUID {
	t.Helper()
	type item struct {
		t  time.Time
		id survey.GUID
	}
	var items []item
	now := s.now()
	for r := range s.Responses(surveyID) {
		if r.ResponseStatus != st || (keep != nil && !keep(&r)) {
			continue
		}
		at := r.DateCreated.Time
		if st != survey.StatusPartial {
			at = r.DateCompleted.Time
		}
		if at.After(now) {
			continue
		}
		items = append(items, item{at, r.ResponseID})
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]survey.GUID, len(items))
	for k, it := range items {
		out[k] = it.id
	}
	return out
}

func TestListMatchesTruthForEveryStatus(t *testing.T) {
	e := newEnv(t, nil)
	for _, st := range []string{"completed", "disqualified", "quotafull", "partial"} {
		got := e.listAll("status="+st, 97)
		want := truthList(t, e.sim, 4574, st, nil)
		if len(want) == 0 {
			t.Fatalf("%s: the truth has no responses; generation is broken", st)
		}
		if d := gocmp.Diff(want, got); d != "" {
			t.Errorf("status %s: list differs from truth (-want +got):\n%s", st, d)
		}
	}
	// Default status is completed; default per_page 50.
	l := e.list("")
	if l.PerPage != 50 || l.Page != 1 || len(l.Data) != 50 {
		t.Fatalf("defaults: per_page %d page %d items %d", l.PerPage, l.Page, len(l.Data))
	}
	if l.Data[0].ResponseID != truthList(t, e.sim, 4574, "completed", nil)[0] {
		t.Fatal("default status is not completed")
	}
	wantHref := e.srv.URL + "/v1/surveys/4574/responses/" + string(l.Data[0].ResponseID)
	if l.Data[0].Href != wantHref {
		t.Fatalf("href %q, want %q", l.Data[0].Href, wantHref)
	}
	// Beyond the last page: empty data, same total.
	far := e.list("page=1000")
	if len(far.Data) != 0 || far.Total != l.Total {
		t.Fatalf("page beyond the end: %d items, total %d (want 0, %d)", len(far.Data), far.Total, l.Total)
	}
}

func TestDetailMatchesTruthAndDecodes(t *testing.T) {
	e := newEnv(t, nil)
	n, withFiles, noTitle, strValue, partial := 0, 0, 0, 0, 0
	types := map[string]bool{}
	for want := range e.sim.Responses(4574) {
		n++
		if n%7 != 0 { // every 7th keeps the test quick
			continue
		}
		a := e.get("/v1/surveys/4574/responses/" + string(want.ResponseID))
		var got survey.Response
		e.envelope(a, 200, &got)
		if d := gocmp.Diff(want, got); d != "" {
			t.Fatalf("detail %s differs from truth (-want +got):\n%s", want.ResponseID, d)
		}
		if bytes.Contains(a.body, []byte(`"value":"`)) {
			strValue++
		}
		if want.ResponseStatus == survey.StatusPartial {
			partial++
			if want.DateCompleted != nil || want.TotalTime != nil {
				t.Fatalf("partial %s has date_completed/total_time", want.ResponseID)
			}
		}
		for _, p := range want.Pages {
			for _, q := range p.Questions {
				types[q.Type] = true
				if q.Title == "" {
					noTitle++
				}
				if q.Type == "file_upload" && len(q.Answers) > 0 {
					withFiles++
				}
			}
		}
		if (want.ContactID != nil) != (distKind(*want.DistributionID) == distEmail || distKind(*want.DistributionID) == distCATI) {
			t.Fatalf("%s: contact_id %v with distribution %d", want.ResponseID, want.ContactID, *want.DistributionID)
		}
	}
	for _, typ := range []string{"url_parameter", "single", "multiple", "matrix_single", "matrix_multiple", "scale", "essay", "file_upload"} {
		if !types[typ] {
			t.Errorf("no question of type %s generated", typ)
		}
	}
	if withFiles == 0 || noTitle == 0 || strValue == 0 || partial == 0 {
		t.Errorf("variety missing: files %d, no title %d, string values %d, partial %d", withFiles, noTitle, strValue, partial)
	}
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	e := newEnv(t, nil)
	k := 0
	for r := range e.sim.Responses(4574) {
		if k++; k > 300 {
			break
		}
		for _, o := range []encOpts{{}, {strValues: true}, {upper: true}} {
			b := appendResponse(nil, &r, o)
			var got survey.Response
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if o.upper { // upload answers carry the file id upper case in text too
				for _, p := range got.Pages {
					for _, q := range p.Questions {
						for _, a := range q.Answers {
							if a.Text != nil && q.Type == "file_upload" {
								*a.Text = strings.ToLower(*a.Text)
							}
						}
					}
				}
			}
			if d := gocmp.Diff(r, got); d != "" {
				t.Fatalf("encode %+v of %s round-trips differently:\n%s", o, r.ResponseID, d)
			}
		}
	}
	// Escaping matches encoding/json for awkward text.
	for _, s := range []string{"a\"b\\c\nd\te\r\x01\x1f", "Příliš žluťoučký kůň", "👍 <&>"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil {
			t.Fatal(err)
		}
		if got != s {
			t.Fatalf("escape %q: got %q", s, got)
		}
	}
}

func TestInvalidUTF8IsSanitised(t *testing.T) {
	e := newEnv(t, nil)
	r, err := e.sim.AddResponse(4574, survey.Response{IPAddress: "bad \xff"})
	if err != nil {
		t.Fatal(err)
	}
	var got survey.Response
	a := e.get("/v1/surveys/4574/responses/" + string(r.ResponseID))
	e.envelope(a, 200, &got)
	if got.IPAddress != "bad \ufffd" || r.IPAddress != got.IPAddress {
		t.Fatalf("%q / %q", got.IPAddress, r.IPAddress)
	}
}

func TestListFiltersAndValidation(t *testing.T) {
	e := newEnv(t, nil)
	all := truthList(t, e.sim, 4574, "completed", nil)
	r0, _ := e.sim.Response(4574, all[100])
	r1, _ := e.sim.Response(4574, all[300])
	from, to := r0.DateCompleted.Time, r1.DateCompleted.Time
	q := "start_completed_at=" + url.QueryEscape(survey.FormatTime(from)) + "&end_completed_at=" + url.QueryEscape(survey.FormatTime(to))
	got := e.listAll(q, 1000)
	want := truthList(t, e.sim, 4574, "completed", func(r *survey.Response) bool {
		return !r.DateCompleted.Before(from) && !r.DateCompleted.After(to)
	})
	if d := gocmp.Diff(want, got); d != "" {
		t.Fatalf("completed window (inclusive bounds) differs:\n%s", d)
	}
	if got[0] != all[100] || got[len(got)-1] != all[300] {
		t.Fatal("window bounds are not inclusive")
	}
	// Started window on completed and on partial.
	s0 := r0.DateCreated.Time
	s1 := s0.Add(6 * time.Hour)
	qs := "start_started_at=" + url.QueryEscape(survey.FormatTime(s0)) + "&end_started_at=" + url.QueryEscape(survey.FormatTime(s1))
	for _, st := range []string{"completed", "partial"} {
		got := e.listAll(qs+"&status="+st, 1000)
		want := truthList(t, e.sim, 4574, st, func(r *survey.Response) bool {
			return !r.DateCreated.Before(s0) && !r.DateCreated.After(s1)
		})
		if d := gocmp.Diff(want, got); d != "" {
			t.Fatalf("%s started window differs:\n%s", st, d)
		}
	}
	// Completed filters do not apply to partial.
	if a, b := e.listAll("status=partial", 1000), e.listAll("status=partial&"+q, 1000); len(a) != len(b) {
		t.Fatalf("completed filters changed the partial list: %d vs %d", len(a), len(b))
	}
	// An inverted window is empty, not an error; absurd pages are empty.
	inv := "start_started_at=" + url.QueryEscape(survey.FormatTime(s1)) + "&end_started_at=" + url.QueryEscape(survey.FormatTime(s0))
	for _, st := range []string{"completed", "partial"} {
		if l := e.list(inv + "&status=" + st); l.Total != 0 {
			t.Fatalf("inverted window on %s: total %d", st, l.Total)
		}
	}
	if l := e.list("page=4611686018427387904&per_page=1000"); len(l.Data) != 0 || l.Total == 0 {
		t.Fatalf("huge page: %d items, total %d", len(l.Data), l.Total)
	}
	// Date-only filters are accepted.
	e.list("start_completed_at=2026-10-31")
	for _, bad := range []string{"per_page=0", "per_page=1001", "per_page=x", "page=0", "page=-1", "status=deleted", "status=done", "start_completed_at=yesterday", "end_started_at=2026-13-01T00:00:00Z"} {
		msg := e.errorBody(e.get("/v1/surveys/4574/responses?"+bad), 400)
		if !strings.Contains(msg, "Invalid parameter") {
			t.Errorf("%s: message %q", bad, msg)
		}
	}
	e.list("per_page=1000")
	e.list("per_page=1")
}

func TestAuthAndRouting(t *testing.T) {
	e := newEnv(t, nil)
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/surveys/4574/responses", nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	req.Header.Set("X-API-TOKEN", "wrong")
	resp, err = e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 401 || body["meta"]["http_status"] != float64(401) || body["meta"]["requestId"] == nil {
		t.Fatalf("wrong token: %d %v", resp.StatusCode, body)
	}
	if msg := e.errorBody(e.get("/v1/surveys/999/responses"), 404); msg != "Survey not found" {
		t.Fatal(msg)
	}
	e.errorBody(e.get("/v1/surveys/4574/responses/not-a-guid"), 404)
	e.errorBody(e.get("/v1/surveys/4574/responses/00000000-0000-4000-8000-000000000000"), 404)
	e.errorBody(e.get("/v1/nothing"), 404)
	e.errorBody(e.get("/v2/surveys/4574/responses"), 404)
	e.errorBody(e.do("POST", "/v1/surveys/4574/responses", nil), 405)
	e.errorBody(e.get("/v1/distributions/45742/contacts"), 405)
	// Upper-case ids in the path are accepted; the answer is lower case.
	id := truthList(t, e.sim, 4574, "completed", nil)[0]
	var r survey.Response
	e.envelope(e.get("/v1/surveys/4574/responses/"+strings.ToUpper(string(id))), 200, &r)
	if r.ResponseID != id {
		t.Fatal(r.ResponseID)
	}
	calls := e.sim.Calls()
	if calls[OpListResponses] < 3 || calls[OpGetResponse] < 3 || calls["other"] < 2 {
		t.Fatalf("calls %v", calls)
	}
	// A response of another survey is not found under this one.
	e2 := newEnv(t, func(o *Options) {
		o.Surveys = append(o.Surveys, SurveySpec{ID: 4575, Responses: 10, Seed: 7})
	})
	e2.errorBody(e2.get("/v1/surveys/4575/responses/"+string(id)), 404)
}

func TestTimestampsAndGUIDsOnTheWire(t *testing.T) {
	e := newEnv(t, nil)
	digits := map[int]bool{}
	k := 0
	for r := range e.sim.Responses(4574) {
		if k++; k > 400 {
			break
		}
		a := e.get("/v1/surveys/4574/responses/" + string(r.ResponseID))
		var raw struct {
			Result map[string]any `json:"result"`
		}
		json.Unmarshal(a.body, &raw)
		s := raw.Result["date_created"].(string)
		d := 0
		if i := strings.IndexByte(s, '.'); i >= 0 {
			d = len(s) - i - 2
		}
		digits[d] = true
		if id := raw.Result["response_id"].(string); id != strings.ToLower(id) {
			t.Fatalf("upper-case id without the fault: %s", id)
		}
	}
	if !digits[0] || !digits[7] || len(digits) < 4 {
		t.Fatalf("fractional digits seen: %v; want 0, 7 and others", digits)
	}
}

func TestPagingStableUnderFixedClock(t *testing.T) {
	e := newEnv(t, nil)
	a := e.listAll("status=completed", 33)
	b := e.listAll("status=completed", 1000)
	if d := gocmp.Diff(a, b); d != "" {
		t.Fatalf("page size changes the order:\n%s", d)
	}
	c := e.listAll("status=completed", 33)
	if d := gocmp.Diff(a, c); d != "" {
		t.Fatalf("order changed between two pagings on a fixed clock:\n%s", d)
	}
	seen := map[survey.GUID]bool{}
	for _, id := range a {
		if seen[id] {
			t.Fatalf("duplicate %s", id)
		}
		seen[id] = true
	}
}

func TestClockMakesResponsesArriveAndComplete(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		// Half the responses lie in the future of the clock.
		o.Surveys[0].Start = newClock().Now().Add(-1000 * time.Minute)
	})
	before := e.list("per_page=1").Total
	partials := e.listAll("status=partial", 1000)
	// Find a partial that is only in progress (it will complete).
	var inProgress survey.GUID
	for _, id := range partials {
		r, _ := e.sim.Response(4574, id)
		g, _ := parseGUID16(string(id))
		i, _ := e.sim.surveys[4574].gen.decodeBase(g)
		if h := e.sim.surveys[4574].gen.header(i); h.final != stPartial {
			inProgress = r.ResponseID
			break
		}
	}
	if inProgress == "" {
		t.Fatal("no in-progress partial found")
	}
	e.clk.Add(49 * time.Hour)
	after := e.list("per_page=1").Total
	if after <= before {
		t.Fatalf("total did not grow as the clock advanced: %d -> %d", before, after)
	}
	r, _ := e.sim.Response(4574, inProgress)
	if !isFinal(r.ResponseStatus) || r.DateCompleted == nil {
		t.Fatalf("in-progress partial did not complete: %s", r.ResponseStatus)
	}
	if slices.Contains(e.listAll("status=partial", 1000), inProgress) {
		t.Fatal("completed response still in the partial list")
	}
	if !slices.Contains(e.listAll("status="+r.ResponseStatus, 1000), inProgress) {
		t.Fatal("completed response not in its list")
	}
	// A response of the future does not exist yet.
	g := e.sim.surveys[4574].gen
	future := g.baseGUID(g.n - 1)
	e.clk.Add(-49 * time.Hour)
	e.errorBody(e.get("/v1/surveys/4574/responses/"+future.String()), 404)
}

func TestDeterminism(t *testing.T) {
	run := func(seed int64) [][]byte {
		e := newEnv(t, func(o *Options) { o.Surveys[0].Seed = seed })
		var out [][]byte
		l := e.list("per_page=20&status=completed")
		out = append(out, bytes.ReplaceAll(e.get("/v1/surveys/4574/responses?per_page=20&status=partial").body, []byte(e.srv.URL), nil))
		for _, d := range l.Data {
			a := e.get("/v1/surveys/4574/responses/" + string(d.ResponseID))
			out = append(out, bytes.ReplaceAll(a.body, []byte(e.srv.URL), nil))
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	if d := gocmp.Diff(a, b); d != "" {
		t.Fatalf("same seed, different bytes:\n%s", d)
	}
	if bytes.Equal(a[1], c[1]) {
		t.Fatal("different seeds gave the same response")
	}
}

func TestGUIDEncodingRoundTrips(t *testing.T) {
	g, err := newSurveyGen(SurveySpec{ID: 1, Responses: 100000, Seed: 3}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < g.n; i += 37 {
		id := g.baseGUID(i)
		if id[6]>>4 != 4 || id[8]>>6 != 2 {
			t.Fatalf("%s is not a version-4 GUID", id)
		}
		j, ok := g.decodeBase(id)
		if !ok || j != i {
			t.Fatalf("decode(%s) = %d %v, want %d", id, j, ok, i)
		}
		id[12] ^= 1
		if _, ok := g.decodeBase(id); ok {
			t.Fatalf("a changed GUID still decodes")
		}
	}
	for _, x := range []uint64{0, 1, 42, 1 << 63, ^uint64(0)} {
		if unmix64(mix64(x)) != x {
			t.Fatalf("unmix64(mix64(%d)) != %d", x, x)
		}
	}
}

func TestTiesAreOrderedByID(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Surveys[0].Interval = 50 * time.Millisecond // many responses share a whole second
		o.Surveys[0].Start = newClock().Now().Add(-time.Hour)
		o.Surveys[0].Statuses = StatusMix{Completed: 0.5, Partial: 0.5}
	})
	for _, st := range []string{"completed", "partial"} {
		want := truthList(t, e.sim, 4574, st, nil)
		got := e.listAll("status="+st, 100)
		if d := gocmp.Diff(want, got); d != "" {
			t.Fatalf("%s: order with ties differs (-want +got):\n%s", st, d)
		}
		ties := 0
		var prev time.Time
		for _, id := range want {
			r, _ := e.sim.Response(4574, id)
			at := r.DateCreated.Time
			if st == "completed" {
				at = r.DateCompleted.Time
			}
			if at.Equal(prev) {
				ties++
			}
			prev = at
		}
		if ties == 0 {
			t.Fatalf("%s: no ties generated; the test tests nothing", st)
		}
	}
	// Overrides land at their place among ties too.
	ids := truthList(t, e.sim, 4574, "partial", nil)
	if _, err := e.sim.CompletePartial(4574, ids[len(ids)/2], ""); err != nil {
		t.Fatal(err)
	}
	r, _ := e.sim.Response(4574, ids[10])
	if _, err := e.sim.AddResponse(4574, survey.Response{ResponseStatus: "partial", DateCreated: r.DateCreated}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"completed", "partial"} {
		if d := gocmp.Diff(truthList(t, e.sim, 4574, st, nil), e.listAll("status="+st, 100)); d != "" {
			t.Fatalf("%s after overrides:\n%s", st, d)
		}
	}
}

// A closed window in the past does not change while the clock runs on:
// the property a poller's windows rely on.
func TestClosedWindowIsStableWhileClockAdvances(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Surveys[0].Start = newClock().Now().Add(-1000 * time.Minute) })
	to := e.clk.Now().Add(-time.Hour)
	from := to.Add(-6 * time.Hour)
	win := "start_completed_at=" + url.QueryEscape(survey.FormatTime(from)) + "&end_completed_at=" + url.QueryEscape(survey.FormatTime(to))
	want := e.listAll(win, 1000)
	var got []survey.GUID
	for page := 1; ; page++ {
		l := e.list(win + "&per_page=20&page=" + itoa(page))
		for _, d := range l.Data {
			got = append(got, d.ResponseID)
		}
		e.clk.Add(10 * time.Minute) // new responses keep arriving after the window
		if len(l.Data) < 20 {
			break
		}
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Fatalf("closed window changed while paging:\n%s", d)
	}
	if e.list("per_page=1").Total <= len(want) {
		t.Fatal("nothing arrived outside the window; the test tests nothing")
	}
}
