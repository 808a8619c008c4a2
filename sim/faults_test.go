package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/survey"
)

func TestStatusFaults(t *testing.T) {
	e := newEnv(t, nil)
	id := truthList(t, e.sim, 4574, "completed", nil)[0]
	var fileRID, fileID survey.GUID
	for r := range e.sim.Responses(4574) {
		if a := r.Pages[3].Questions[0].Answers; len(a) > 0 {
			fileRID, fileID = r.ResponseID, survey.GUID(*a[0].Text)
			break
		}
	}
	paths := map[string]func() answer{
		OpListResponses: func() answer { return e.get("/v1/surveys/4574/responses") },
		OpGetResponse:   func() answer { return e.get("/v1/surveys/4574/responses/" + string(id)) },
		OpCreateContact: func() answer {
			return e.do("POST", "/v1/distributions/45742/contacts", map[string]string{"email": "a@example.cz"})
		},
		OpSendMessage: func() answer { return e.do("POST", "/v1/distributions/45742/messages/9/send", map[string]string{}) },
		OpDownloadFile: func() answer {
			return e.get("/v1/surveys/4574/responses/" + string(fileRID) + "/uploaded-files/" + string(fileID))
		},
	}
	for op, call := range paths {
		for _, kind := range []string{"429", "500", "502", "503", "402", "401", "403"} {
			e.sim.ClearFaults()
			if err := e.sim.InjectFault(Fault{Op: op, Kind: kind, Count: 1}); err != nil {
				t.Fatal(err)
			}
			a := call()
			want := map[string]int{"429": 429, "500": 500, "502": 502, "503": 503, "402": 402, "401": 401, "403": 403}[kind]
			e.errorBody(a, want)
			if a.header.Get("Retry-After") != "" {
				t.Fatalf("%s %s: Retry-After without the retry-after fault", op, kind)
			}
			// Count 1: the next call succeeds.
			if b := call(); b.status >= 400 {
				t.Fatalf("%s %s: second call %d: %s", op, kind, b.status, b.body)
			}
		}
	}
	e.sim.ClearFaults()
	e.sim.InjectFault(Fault{Op: OpAll, Kind: FaultRetryAfter, RetryAfter: 2500 * time.Millisecond, Count: 2})
	a := e.get("/v1/surveys/4574/responses")
	e.errorBody(a, 429)
	if a.header.Get("Retry-After") != "3" {
		t.Fatalf("Retry-After %q, want 3 (whole seconds, rounded up)", a.header.Get("Retry-After"))
	}
	e.errorBody(e.get("/v1/surveys/4574/responses/"+string(id)), 429)
	e.envelope(e.get("/v1/surveys/4574/responses"), 200, nil)
	if f := e.sim.Faults(); len(f) != 1 || f[0].Fired != 2 {
		t.Fatalf("faults %+v", f)
	}
	if err := e.sim.InjectFault(Fault{Op: "nope", Kind: "500"}); err == nil {
		t.Fatal("unknown op accepted")
	}
	if err := e.sim.InjectFault(Fault{Op: OpAll, Kind: "explode"}); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

func TestProbabilityFaultIsSeededAndProportional(t *testing.T) {
	count := func() (int, []int) {
		e := newEnv(t, nil)
		e.sim.InjectFault(Fault{Op: OpListResponses, Kind: "503", Probability: 0.3})
		n := 0
		var seq []int
		for range 400 {
			st := e.get("/v1/surveys/4574/responses?per_page=1").status
			if st == 503 {
				n++
			}
			seq = append(seq, st)
		}
		return n, seq
	}
	n1, s1 := count()
	n2, s2 := count()
	if n1 < 80 || n1 > 160 {
		t.Fatalf("probability 0.3 fired %d of 400 times", n1)
	}
	if n1 != n2 || !equalInts(s1, s2) {
		t.Fatal("the same seed gave a different fault sequence")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

func TestSlowFault(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultSlow, Delay: 150 * time.Millisecond, Count: 1})
	start := time.Now()
	e.envelope(e.get("/v1/surveys/4574/responses"), 200, nil)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("slow answer took %v", d)
	}
	// The delay ends early when the client gives up.
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultSlow, Delay: time.Hour, Count: 1})
	c := &http.Client{Timeout: 100 * time.Millisecond}
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/surveys/4574/responses", nil)
	req.Header.Set("X-API-TOKEN", testToken)
	if _, err := c.Do(req); err == nil {
		t.Fatal("want a timeout")
	}
	c.CloseIdleConnections()
}

func TestResetFault(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultReset, Count: 1})
	id := truthList(t, e.sim, 4574, "completed", nil)[0]
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/surveys/4574/responses/"+string(id), nil)
	req.Header.Set("X-API-TOKEN", testToken)
	if resp, err := e.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("want a connection error, got %d", resp.StatusCode)
	}
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(id)), 200, nil)
}

func TestVariantSpellingFault(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.InjectFault(Fault{Op: OpAll, Kind: FaultVariantSpelling})
	seen := map[string]bool{}
	for range 8 {
		a := e.get("/v1/surveys/4574/responses?per_page=1")
		var body struct {
			Meta map[string]any `json:"meta"`
		}
		json.Unmarshal(a.body, &body)
		for k := range body.Meta {
			seen[k] = true
		}
		e.envelope(a, 200, nil)
	}
	for _, k := range []string{"request_id", "requestId", "http_status", "status_code"} {
		if !seen[k] {
			t.Errorf("spelling %s never seen: %v", k, seen)
		}
	}
	e.sim.ClearFaults()
	a := e.get("/v1/surveys/4574/responses?per_page=1")
	if !strings.Contains(string(a.body), `"meta":{"request_id":`) || !strings.Contains(string(a.body), `"http_status":200`) {
		t.Fatalf("default spelling: %s", a.body)
	}
}

func TestUppercaseGUIDAndNoTitleFaults(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.InjectFault(Fault{Op: OpAll, Kind: FaultUppercaseGUID})
	e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultNoTitle})
	l := e.get("/v1/surveys/4574/responses?per_page=5")
	var list survey.ResponseList
	e.envelope(l, 200, &list)
	if !strings.Contains(string(l.body), strings.ToUpper(string(list.Data[0].ResponseID))) {
		t.Fatalf("list ids not upper case: %s", l.body)
	}
	// Find a response with files to check upload answers too.
	var withFile survey.GUID
	for r := range e.sim.Responses(4574) {
		if r.ResponseStatus == "completed" && len(r.Pages[3].Questions[0].Answers) > 0 {
			withFile = r.ResponseID
			break
		}
	}
	a := e.get("/v1/surveys/4574/responses/" + string(withFile))
	body := string(a.body)
	if strings.Contains(body, `"title"`) {
		t.Fatal("no_title fault left titles")
	}
	if !strings.Contains(body, strings.ToUpper(string(withFile))) {
		t.Fatal("detail id not upper case")
	}
	var r survey.Response
	e.envelope(a, 200, &r)
	want, _ := e.sim.Response(4574, withFile)
	if r.ResponseID != want.ResponseID {
		t.Fatal("upper-case id does not normalise to the truth")
	}
	text := *r.Pages[3].Questions[0].Answers[0].Text
	if text != strings.ToUpper(text) {
		t.Fatalf("file id in text not upper case: %s", text)
	}
}

func TestShiftFault(t *testing.T) {
	e := newEnv(t, nil)
	p1 := e.list("per_page=50&page=1")
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultShift, Count: 1})
	p2 := e.list("per_page=50&page=2")
	if p2.Total != p1.Total+1 {
		t.Fatalf("total %d after shift, want %d", p2.Total, p1.Total+1)
	}
	if p2.Data[0].ResponseID != p1.Data[49].ResponseID {
		t.Fatalf("page 2 does not start with the last item of page 1: the page did not shift")
	}
	// The newcomer sits on page 1 now, which the client already read.
	again := e.list("per_page=50&page=1")
	var fresh survey.GUID
	for _, d := range again.Data {
		found := false
		for _, o := range p1.Data {
			found = found || o.ResponseID == d.ResponseID
		}
		if !found {
			fresh = d.ResponseID
		}
	}
	if fresh == "" {
		t.Fatal("no new response on page 1")
	}
	if _, ok := e.sim.Response(4574, fresh); !ok {
		t.Fatal("the inserted response has no detail")
	}
}

func TestDownloadFileAndReset(t *testing.T) {
	e := newEnv(t, nil)
	var rid, fid survey.GUID
	for r := range e.sim.Responses(4574) {
		if a := r.Pages[3].Questions[0].Answers; r.ResponseStatus == "completed" && len(a) > 0 {
			rid, fid = r.ResponseID, survey.GUID(*a[0].Text)
			break
		}
	}
	path := "/v1/surveys/4574/responses/" + string(rid) + "/uploaded-files/" + string(fid)
	a := e.get(path)
	if a.status != 200 || len(a.body) != 10_000 || a.header.Get("Content-Length") != "10000" {
		t.Fatalf("download: %d, %d bytes, length %q", a.status, len(a.body), a.header.Get("Content-Length"))
	}
	info, open, ok := e.sim.File(4574, rid, fid)
	if !ok {
		t.Fatal("File() does not know the file")
	}
	want, _ := io.ReadAll(open())
	if string(want) != string(a.body) {
		t.Fatal("download differs from File()")
	}
	if again := e.get(path); string(again.body) != string(a.body) {
		t.Fatal("file content is not deterministic")
	}
	if a.header.Get("Content-Type") != info.ContentType {
		t.Fatalf("content type %q", a.header.Get("Content-Type"))
	}
	cd := a.header.Get("Content-Disposition")
	if !strings.Contains(cd, "filename*=UTF-8''") || !strings.HasPrefix(cd, "attachment;") {
		t.Fatalf("content disposition %q", cd)
	}
	if !strings.Contains(cd, "%C5%") && !strings.Contains(cd, "%C3%") {
		t.Fatalf("non-ASCII name not percent-encoded: %q", cd)
	}
	// Upper-case ids in the path work; unknown files and other responses' files do not.
	if up := e.get("/v1/surveys/4574/responses/" + strings.ToUpper(string(rid)) + "/uploaded-files/" + strings.ToUpper(string(fid))); up.status != 200 {
		t.Fatalf("upper-case ids: %d", up.status)
	}
	e.errorBody(e.get("/v1/surveys/4574/responses/"+string(rid)+"/uploaded-files/00000000-0000-4000-8000-000000000001"), 404)
	other := truthList(t, e.sim, 4574, "completed", nil)[0]
	if other != rid {
		e.errorBody(e.get("/v1/surveys/4574/responses/"+string(other)+"/uploaded-files/"+string(fid)), 404)
	}
	// Reset: the body stops half way.
	e.sim.InjectFault(Fault{Op: OpDownloadFile, Kind: FaultReset, Count: 1})
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("X-API-TOKEN", testToken)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want unexpected EOF, got %v after %d bytes", err, len(b))
	}
	if len(b) >= 10_000 {
		t.Fatalf("got %d bytes despite the reset", len(b))
	}
}

func TestHundredMegabyteFileStreamsWithFlatMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 100 MB")
	}
	e := newEnv(t, func(o *Options) { o.Surveys[0].FileSize = 100 << 20 })
	var rid, fid survey.GUID
	for r := range e.sim.Responses(4574) {
		if a := r.Pages[3].Questions[0].Answers; len(a) > 0 {
			rid, fid = r.ResponseID, survey.GUID(*a[0].Text)
			break
		}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/surveys/4574/responses/"+string(rid)+"/uploaded-files/"+string(fid), nil)
	req.Header.Set("X-API-TOKEN", testToken)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 100<<20 || resp.ContentLength != 100<<20 {
		t.Fatalf("read %d bytes (length %d): %v", n, resp.ContentLength, err)
	}
	runtime.ReadMemStats(&m1)
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("serving a 100 MB file allocated %d MB", alloc>>20)
	}
}

func TestQuotaFullAsDisqualifiedFault(t *testing.T) {
	e := newEnv(t, nil)
	var qf survey.GUID
	for r := range e.sim.Responses(4574) {
		if r.ResponseStatus == survey.StatusQuotaFull {
			qf = r.ResponseID
			break
		}
	}
	if qf == "" {
		t.Skip("no quota-full response generated")
	}
	var r survey.Response
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(qf)), 200, &r)
	if r.ResponseStatus != survey.StatusQuotaFull {
		t.Fatalf("without the fault: %q", r.ResponseStatus)
	}
	if err := e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultQuotaFullAsDisqualified}); err != nil {
		t.Fatal(err)
	}
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(qf)), 200, &r)
	if r.ResponseStatus != survey.StatusDisqualified {
		t.Fatalf("with the fault: %q, want disqualified", r.ResponseStatus)
	}
	var list survey.ResponseList
	e.envelope(e.get("/v1/surveys/4574/responses?status=quotafull&per_page=1000"), 200, &list)
	found := false
	for _, it := range list.Data {
		found = found || it.ResponseID == qf
	}
	if !found {
		t.Fatal("the list no longer finds it under quotafull")
	}
}

func TestBrokenDateFaults(t *testing.T) {
	e := newEnv(t, nil)
	var completed, partial survey.GUID
	for r := range e.sim.Responses(4574) {
		switch {
		case completed == "" && r.DateCompleted != nil:
			completed = r.ResponseID
		case partial == "" && r.DateCompleted == nil && r.ResponseStatus == survey.StatusPartial:
			partial = r.ResponseID
		}
	}
	if completed == "" || partial == "" {
		t.Fatal("no completed or no partial response to fault")
	}
	if err := e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultFutureDate, Count: 2}); err != nil {
		t.Fatal(err)
	}
	// The list is not affected.
	if l := e.get("/v1/surveys/4574/responses?per_page=5"); strings.Contains(string(l.body), "2200-") {
		t.Fatal("future_date changed a list page")
	}
	a := string(e.get("/v1/surveys/4574/responses/" + string(completed)).body)
	if !strings.Contains(a, `"date_completed":"2200-01-01T00:00:00Z"`) || strings.Contains(a, `"date_created":"2200`) {
		t.Fatalf("future_date on a completed response: %s", a)
	}
	p := string(e.get("/v1/surveys/4574/responses/" + string(partial)).body)
	if !strings.Contains(p, `"date_created":"2200-01-01T00:00:00Z"`) {
		t.Fatalf("future_date on a partial response: %s", p)
	}
	// Count 2: the third read is clean.
	if a := string(e.get("/v1/surveys/4574/responses/" + string(completed)).body); strings.Contains(a, "2200-") {
		t.Fatal("future_date fired more than Count times")
	}
	if err := e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultInvalidDate, Count: 1}); err != nil {
		t.Fatal(err)
	}
	res := e.get("/v1/surveys/4574/responses/" + string(completed))
	if !strings.Contains(string(res.body), `"date_completed":"not a date"`) {
		t.Fatalf("invalid_date: %s", res.body)
	}
	var r survey.Response
	if err := json.Unmarshal(res.body, &struct{ Result *survey.Response }{&r}); err == nil {
		t.Fatal("an invalid date decoded")
	}
}

// A fault limited to one response breaks that response's detail only;
// lists and other responses' details are as they are. The control API
// takes the response too.
func TestFaultOfOneResponse(t *testing.T) {
	e := newEnv(t, nil)
	var ids []survey.GUID
	for r := range e.sim.Responses(4574) {
		if r.DateCompleted != nil {
			ids = append(ids, r.ResponseID)
		}
		if len(ids) == 2 {
			break
		}
	}
	if len(ids) < 2 {
		t.Fatal("fewer than two completed responses")
	}
	// Any case matches.
	if err := e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultInvalidDate, Survey: 4574, Response: strings.ToUpper(string(ids[0]))}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a := string(e.get("/v1/surveys/4574/responses/" + string(ids[0])).body); !strings.Contains(a, `"not a date"`) {
			t.Fatalf("the faulted response: %s", a)
		}
		if b := string(e.get("/v1/surveys/4574/responses/" + string(ids[1])).body); strings.Contains(b, `"not a date"`) {
			t.Fatalf("another response was faulted: %s", b)
		}
	}
	if l := e.get("/v1/surveys/4574/responses?per_page=5"); strings.Contains(string(l.body), "not a date") {
		t.Fatal("the fault changed a list page")
	}
	fs := e.sim.Faults()
	if len(fs) != 1 || fs[0].Fired != 2 {
		t.Fatalf("faults: %+v", fs)
	}
	var back FaultStatus
	raw, err := json.Marshal(fs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &back); err != nil || back.Response != fs[0].Response {
		t.Fatalf("round trip of %s: %+v, %v", raw, back, err)
	}
}

// The hostile list answers of issue 19, each limited to one survey.
func TestHostileListFaults(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Surveys = append(o.Surveys, SurveySpec{ID: 4575, Responses: 300, Seed: 8})
	})
	p1 := e.list("per_page=50&page=1")
	ids := func(l *survey.ResponseList) map[survey.GUID]bool {
		m := map[survey.GUID]bool{}
		for _, d := range l.Data {
			m[d.ResponseID] = true
		}
		return m
	}
	if err := e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultImplausibleTotal, Survey: 4574, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if l := e.list("per_page=50&page=1"); l.Total != hostileTotal || len(l.Data) != 50 || l.Data[0].ResponseID != p1.Data[0].ResponseID {
		t.Fatalf("implausible_total: total %d, %d items", l.Total, len(l.Data))
	}
	// Another survey is not affected by a fault naming 4574.
	e.sim.ClearFaults()
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultImplausibleTotal, Survey: 4574})
	var other survey.ResponseList
	e.envelope(e.get("/v1/surveys/4575/responses?per_page=10"), 200, &other)
	if other.Total == hostileTotal {
		t.Fatal("a fault of survey 4574 hit survey 4575")
	}
	// repeat_page: page 5 of a narrow window is the first page, full.
	e.sim.ClearFaults()
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultRepeatPage})
	l := e.list("per_page=50&page=5&start_completed_at=2000-01-01&end_completed_at=2000-01-02")
	if l.Total != hostileTotal || len(l.Data) != 50 || l.Data[0].ResponseID != p1.Data[0].ResponseID || len(ids(&l)) != 50 {
		t.Fatalf("repeat_page: total %d, %d items, %d distinct", l.Total, len(l.Data), len(ids(&l)))
	}
	// unstable_total: two calls, two totals.
	e.sim.ClearFaults()
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultUnstableTotal})
	a, b := e.list("per_page=50&page=1"), e.list("per_page=50&page=1")
	if a.Total == b.Total || a.Total <= p1.Total {
		t.Fatalf("unstable_total: %d then %d (true %d)", a.Total, b.Total, p1.Total)
	}
	// endless_pages: page 1000 is full and brings the 1000th id.
	e.sim.ClearFaults()
	e.sim.InjectFault(Fault{Op: OpListResponses, Kind: FaultEndlessPages})
	far := e.list("per_page=50&page=1000")
	if len(far.Data) != 50 || far.Total != 1001*50 {
		t.Fatalf("endless_pages: %d items, total %d", len(far.Data), far.Total)
	}
	all := truthList(t, e.sim, 4574, "completed", nil)
	if far.Data[0].ResponseID != all[999%len(all)] || far.Data[1].ResponseID != all[0] {
		t.Fatalf("endless_pages: page 1000 starts %s %s", far.Data[0].ResponseID, far.Data[1].ResponseID)
	}
	// The JSON form names the survey.
	var f Fault
	if err := json.Unmarshal([]byte(`{"op":"list_responses","kind":"repeat_page","survey":4574}`), &f); err != nil || f.Survey != 4574 {
		t.Fatalf("%+v %v", f, err)
	}
	if err := e.sim.InjectFault(Fault{Op: OpGetResponse, Kind: FaultRepeatPage, Survey: -1}); err == nil {
		t.Fatal("a negative survey was accepted")
	}
}
