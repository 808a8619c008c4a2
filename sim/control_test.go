package sim

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/survey"
)

func TestContactsAndSends(t *testing.T) {
	e := newEnv(t, nil)
	email := DistributionID(4574, "email")
	base := "/v1/distributions/" + itoa(int(email))
	var created survey.CreatedContact
	e.envelope(e.do("POST", base+"/contacts", map[string]any{
		"email": "jan.novak@example.cz", "first_name": "Jan", "last_name": "Novák",
		"salutation_generate": true, "salutation_prefix_male": "Vážený pane", "user_field3": "VIP",
	}), 201, &created)
	if created.ID == 0 || !strings.HasPrefix(created.SurveyURL, "https://www.click4survey.cz/m4/4574/") || !created.CreatedAt.Equal(e.clk.Now()) {
		t.Fatalf("created %+v", created)
	}
	msg := e.errorBody(e.do("POST", base+"/contacts", map[string]any{"email": "x@example.cz", "salutation_generate": true, "first_name": "Jan"}), 405)
	if !strings.Contains(msg, "last_name") {
		t.Fatalf("405 message %q", msg)
	}
	// A given salutation makes the names unnecessary.
	e.envelope(e.do("POST", base+"/contacts", map[string]any{"email": "bounce@example.cz", "salutation_generate": true, "salutation": "Milá paní"}), 201, nil)
	e.errorBody(e.do("POST", base+"/contacts", map[string]any{"phone": "+420777123456"}), 405) // email channel needs an email
	e.errorBody(e.do("POST", "/v1/distributions/"+itoa(int(DistributionID(4574, "cati")))+"/contacts", map[string]any{"email": "a@b.cz"}), 405)
	e.envelope(e.do("POST", "/v1/distributions/"+itoa(int(DistributionID(4574, "cati")))+"/contacts", map[string]any{"phone": "+420777123456"}), 201, nil)
	e.errorBody(e.do("POST", base+"/contacts", "not an object"), 400)
	got := e.sim.Contacts(email)
	if len(got) != 2 || got[0].Contact.UserField3 != "VIP" || got[0].Salutation != "Vážený pane Nováku" || got[0].ID != created.ID {
		t.Fatalf("contacts %+v", got)
	}
	// Immediate send: everyone sent, the bouncing address counted.
	var res survey.SendResult
	e.envelope(e.do("POST", base+"/messages/77/send", map[string]any{}), 200, &res)
	if res.ContactsCount != (survey.ContactsCount{Pending: 0, Sent: 1, Bounces: 1}) {
		t.Fatalf("send %+v", res)
	}
	// A new contact and a scheduled send: pending until its time.
	e.envelope(e.do("POST", base+"/contacts", map[string]any{"email": "eva@example.cz"}), 201, nil)
	when := survey.FormatTime(e.clk.Now().Add(time.Hour))
	e.envelope(e.do("POST", base+"/messages/77/send", map[string]any{"scheduled_date": when}), 200, &res)
	if res.ContactsCount != (survey.ContactsCount{Pending: 1, Sent: 1, Bounces: 1}) {
		t.Fatalf("scheduled send %+v", res)
	}
	e.clk.Add(2 * time.Hour)
	e.envelope(e.do("POST", base+"/messages/77/send", nil), 200, &res)
	if res.ContactsCount != (survey.ContactsCount{Pending: 0, Sent: 2, Bounces: 1}) {
		t.Fatalf("after the scheduled time %+v", res)
	}
	// Another message starts from scratch.
	e.envelope(e.do("POST", base+"/messages/78/send", nil), 200, &res)
	if res.ContactsCount.Sent != 2 {
		t.Fatalf("message 78 %+v", res)
	}
	e.errorBody(e.do("POST", base+"/messages/78/send", map[string]any{"scheduled_date": "soon"}), 400)
	if s := e.sim.Sends(); len(s) != 4 || s[1].ScheduledDate == nil || s[0].MessageID != 77 {
		t.Fatalf("sends %+v", s)
	}
	// Unknown distributions are accepted unless asked otherwise.
	e.envelope(e.do("POST", "/v1/distributions/999999/contacts", map[string]any{"email": "a@b.cz"}), 201, nil)
	strict := newEnv(t, func(o *Options) { o.RejectUnknownDistributions = true })
	strict.errorBody(strict.do("POST", "/v1/distributions/999999/contacts", map[string]any{"email": "a@b.cz"}), 404)
	strict.errorBody(strict.do("POST", "/v1/distributions/999999/messages/1/send", nil), 404)
}

func TestControlLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	before := e.list("per_page=1").Total
	added, err := e.sim.AddResponse(4574, survey.Response{})
	if err != nil {
		t.Fatal(err)
	}
	if added.ResponseStatus != "completed" || added.DateCompleted == nil || len(added.Pages) == 0 || added.SurveyName == "" {
		t.Fatalf("added %+v", added)
	}
	if got := e.list("per_page=1").Total; got != before+1 {
		t.Fatalf("total %d after add, want %d", got, before+1)
	}
	var r survey.Response
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(added.ResponseID)), 200, &r)
	if d := gocmp.Diff(added, r); d != "" {
		t.Fatalf("detail of the added response:\n%s", d)
	}
	if _, err := e.sim.AddResponse(4574, survey.Response{ResponseID: added.ResponseID}); !errors.Is(err, ErrExists) {
		t.Fatalf("re-add: %v", err)
	}
	// A partial added, then completed.
	p, err := e.sim.AddResponse(4574, survey.Response{ResponseStatus: "partial"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(e.listAll("status=partial", 1000), p.ResponseID) {
		t.Fatal("added partial not listed")
	}
	e.clk.Add(time.Minute)
	done, err := e.sim.CompletePartial(4574, p.ResponseID, "disqualified")
	if err != nil || done.ResponseStatus != "disqualified" || done.TotalTime == nil || *done.TotalTime != 60 {
		t.Fatalf("complete: %+v %v", done, err)
	}
	if slices.Contains(e.listAll("status=partial", 1000), p.ResponseID) || !slices.Contains(e.listAll("status=disqualified", 1000), p.ResponseID) {
		t.Fatal("completed partial did not move lists")
	}
	if _, err := e.sim.CompletePartial(4574, p.ResponseID, ""); !errors.Is(err, ErrState) {
		t.Fatalf("completing twice: %v", err)
	}
	// A generated abandoned partial, completed: it gets all its answers.
	var gen survey.GUID
	for r := range e.sim.Responses(4574) {
		if r.ResponseStatus == "partial" && len(r.Pages[2].Questions[0].Answers) == 0 {
			gen = r.ResponseID
			break
		}
	}
	full, err := e.sim.CompletePartial(4574, gen, "")
	if err != nil || full.ResponseStatus != "completed" || len(full.Pages[2].Questions[0].Answers) == 0 {
		t.Fatalf("complete generated: %v %+v", err, full.Pages[2])
	}
	// Update a generated completed response.
	first := truthList(t, e.sim, 4574, "completed", nil)[0]
	cur, _ := e.sim.Response(4574, first)
	cur.IPAddress = "10.0.0.1"
	cur.Pages[0].Questions[1].Title = "Změněný nadpis"
	if _, err := e.sim.UpdateResponse(4574, cur); err != nil {
		t.Fatal(err)
	}
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(first)), 200, &r)
	if r.IPAddress != "10.0.0.1" || r.Pages[0].Questions[1].Title != "Změněný nadpis" {
		t.Fatal("update not visible")
	}
	if got := truthList(t, e.sim, 4574, "completed", nil)[0]; got != first {
		t.Fatal("update moved the response in the list")
	}
	if l := e.listAll("status=completed", 1000); l[0] != first {
		t.Fatal("updated response not first in the list anymore")
	}
	// Delete: detail says deleted, lists drop it. Purge: 404.
	total := e.list("per_page=1").Total
	if err := e.sim.DeleteResponse(4574, first); err != nil {
		t.Fatal(err)
	}
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(first)), 200, &r)
	if r.ResponseStatus != "deleted" || e.list("per_page=1").Total != total-1 {
		t.Fatalf("after delete: status %s, total %d (was %d)", r.ResponseStatus, e.list("per_page=1").Total, total)
	}
	found := false
	for x := range e.sim.Responses(4574) {
		found = found || (x.ResponseID == first && x.ResponseStatus == "deleted")
	}
	if !found {
		t.Fatal("deleted response missing from the truth")
	}
	if err := e.sim.PurgeResponse(4574, first); err != nil {
		t.Fatal(err)
	}
	e.errorBody(e.get("/v1/surveys/4574/responses/"+string(first)), 404)
	if _, ok := e.sim.Response(4574, first); ok {
		t.Fatal("purged response in the truth")
	}
	if err := e.sim.DeleteResponse(4574, first); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete purged: %v", err)
	}
	// The list still matches the truth after all this.
	for _, st := range []string{"completed", "disqualified", "partial"} {
		if d := gocmp.Diff(truthList(t, e.sim, 4574, st, nil), e.listAll("status="+st, 200)); d != "" {
			t.Fatalf("%s list differs from truth after overrides:\n%s", st, d)
		}
	}
	// Launch a new survey, add to it, end it.
	if err := e.sim.LaunchSurvey(9001, "Nový průzkum"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.AddResponse(9001, survey.Response{}); err != nil {
		t.Fatal(err)
	}
	var l survey.ResponseList
	e.envelope(e.get("/v1/surveys/9001/responses"), 200, &l)
	if l.Total != 1 {
		t.Fatalf("new survey total %d", l.Total)
	}
	if err := e.sim.EndSurvey(9001); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.AddResponse(1, survey.Response{}); !errors.Is(err, ErrUnknownSurvey) {
		t.Fatal(err)
	}
}

func TestEndSurveyStopsNewResponses(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Surveys[0].Start = newClock().Now().Add(-1000 * time.Minute) })
	e.sim.EndSurvey(4574)
	n := 0
	for range e.sim.Responses(4574) {
		n++
	}
	e.clk.Add(10 * time.Hour)
	m := 0
	for range e.sim.Responses(4574) {
		m++
	}
	if m != n {
		t.Fatalf("responses grew after the end: %d -> %d", n, m)
	}
}

func TestControlHTTP(t *testing.T) {
	e := newEnv(t, nil)
	ctl := func(method, path string, body any, want int, out any) {
		t.Helper()
		a := e.do(method, path, body)
		if a.status != want {
			t.Fatalf("%s %s: %d %s", method, path, a.status, a.body)
		}
		if out != nil {
			if err := json.Unmarshal(a.body, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	var r survey.Response
	ctl("POST", "/_sim/surveys/4574/responses", map[string]any{"response_status": "partial"}, 201, &r)
	id := string(r.ResponseID)
	ctl("GET", "/_sim/surveys/4574/responses/"+id, nil, 200, &r)
	ctl("POST", "/_sim/surveys/4574/responses/"+id+"/complete", map[string]string{"status": "quotafull"}, 200, &r)
	if r.ResponseStatus != "quotafull" {
		t.Fatal(r.ResponseStatus)
	}
	r.IPAddress = "192.0.2.1"
	ctl("PUT", "/_sim/surveys/4574/responses/"+id, r, 200, &r)
	ctl("DELETE", "/_sim/surveys/4574/responses/"+id, nil, 200, nil)
	ctl("GET", "/_sim/surveys/4574/responses/"+id, nil, 200, &r)
	if r.ResponseStatus != "deleted" || r.IPAddress != "192.0.2.1" {
		t.Fatalf("%+v", r)
	}
	ctl("DELETE", "/_sim/surveys/4574/responses/"+id+"?purge=true", nil, 200, nil)
	ctl("GET", "/_sim/surveys/4574/responses/"+id, nil, 404, nil)
	ctl("POST", "/_sim/surveys/4574/responses/"+id+"/complete", nil, 404, nil)
	ctl("POST", "/_sim/surveys/77/launch", map[string]string{"name": "Anketa"}, 200, nil)
	ctl("POST", "/_sim/surveys/77/end", nil, 200, nil)
	ctl("POST", "/_sim/surveys/78/end", nil, 404, nil)
	var surveys []SurveyInfo
	ctl("GET", "/_sim/surveys", nil, 200, &surveys)
	if len(surveys) != 2 || surveys[0].Name != "Anketa" || surveys[0].EndedAt == nil {
		t.Fatalf("%+v", surveys)
	}
	ctl("POST", "/_sim/faults", map[string]any{"op": "get_response", "kind": "503", "count": 1, "delay": "10ms"}, 201, nil)
	ctl("POST", "/_sim/faults", map[string]any{"op": "bad", "kind": "503"}, 400, nil)
	var faults []FaultStatus
	ctl("GET", "/_sim/faults", nil, 200, &faults)
	if len(faults) != 1 || faults[0].Delay != 10*time.Millisecond {
		t.Fatalf("%+v", faults)
	}
	e.errorBody(e.get("/v1/surveys/4574/responses/"+string(truthList(t, e.sim, 4574, "completed", nil)[0])), 503)
	ctl("GET", "/_sim/faults", nil, 200, &faults)
	if faults[0].Fired != 1 {
		t.Fatalf("fired %d", faults[0].Fired)
	}
	ctl("DELETE", "/_sim/faults", nil, 200, nil)
	e.do("POST", "/v1/distributions/45742/contacts", map[string]string{"email": "a@b.cz"})
	var contacts []ReceivedContact
	ctl("GET", "/_sim/contacts?distribution_id=45742", nil, 200, &contacts)
	if len(contacts) != 1 || contacts[0].Contact.Email != "a@b.cz" {
		t.Fatalf("%+v", contacts)
	}
	var calls map[string]int64
	ctl("GET", "/_sim/calls", nil, 200, &calls)
	if calls[OpCreateContact] != 1 || calls[OpGetResponse] != 1 {
		t.Fatalf("%v", calls)
	}
	ctl("GET", "/_sim/sends", nil, 200, nil)
	ctl("GET", "/_sim/webhooks", nil, 200, nil)
	ctl("GET", "/_sim/nope", nil, 404, nil)
	before := e.list("per_page=1").Total
	var clk map[string]string
	ctl("POST", "/_sim/clock", map[string]string{"advance": "48h"}, 200, &clk)
	if clk["now"] != survey.FormatTime(e.clk.Now().Add(48*time.Hour)) {
		t.Fatalf("clock %v", clk)
	}
	if after := e.list("per_page=1").Total; after <= before {
		t.Fatalf("advancing the clock brought nothing: %d -> %d", before, after)
	}
	ctl("POST", "/_sim/clock", map[string]string{"advance": "soon"}, 400, nil)
	ctl("GET", "/_sim/clock", nil, 200, nil)
	a := e.get("/_sim/surveys/4574/responses")
	lines := strings.Split(strings.TrimSpace(string(a.body)), "\n")
	n := 0
	for range e.sim.Responses(4574) {
		n++
	}
	if len(lines) != n {
		t.Fatalf("truth stream has %d lines, want %d", len(lines), n)
	}
}

// receiver is a webhook endpoint that fails the first failures attempts of
// each event.
type receiver struct {
	mu       sync.Mutex
	failures int
	seen     map[string]int
	bodies   []map[string]any
	times    map[string][]time.Time
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	key, _ := json.Marshal(body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.seen[string(key)]++
	rc.times[string(key)] = append(rc.times[string(key)], time.Now())
	if rc.seen[string(key)] <= rc.failures {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rc.bodies = append(rc.bodies, body)
	w.WriteHeader(http.StatusNoContent)
}

func TestWebhooksRetryOnScaledSchedule(t *testing.T) {
	rc := &receiver{failures: 2, seen: map[string]int{}, times: map[string][]time.Time{}}
	rx := httptest.NewServer(rc)
	defer rx.Close()
	schedule := []time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond, 80 * time.Millisecond, 100 * time.Millisecond}
	e := newEnv(t, func(o *Options) {
		o.WebhookURL = rx.URL + "/hooks/secret"
		o.WebhookSchedule = schedule
	})
	if err := e.sim.LaunchSurvey(4574, ""); err != nil {
		t.Fatal(err)
	}
	r, _ := e.sim.AddResponse(4574, survey.Response{DistributionID: ptr(DistributionID(4574, "email")), ContactID: ptr(int64(4998745)), ResponseStatus: "disqualified"})
	e.sim.EndSurvey(4574)
	waitFor(t, func() bool { return e.sim.WebhooksPending() == 0 && len(e.sim.WebhookDeliveries()) == 9 })
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bodies) != 3 {
		t.Fatalf("delivered %d events, want 3", len(rc.bodies))
	}
	byName := map[string]map[string]any{}
	for _, b := range rc.bodies {
		byName[b["event_name"].(string)] = b
	}
	rr := byName["response_received"]
	if rr["response_id"] != strings.ToUpper(string(r.ResponseID)) || rr["distribution_type"] != "email" || rr["contact_id"] != float64(4998745) ||
		rr["completed"] != true || rr["disqualified"] != true || rr["quota_full"] != false || rr["survey_id"] != float64(4574) || rr["completed_at"] == nil {
		t.Fatalf("response_received %v", rr)
	}
	if byName["survey_launched"]["launched_at"] == nil || byName["survey_ended"]["ended_at"] == nil {
		t.Fatalf("%v", byName)
	}
	for key, times := range rc.times {
		if len(times) != 3 {
			t.Fatalf("%s: %d attempts", key, len(times))
		}
		if gap := times[1].Sub(times[0]); gap < schedule[1] {
			t.Fatalf("second attempt after %v, want >= %v", gap, schedule[1])
		}
		if gap := times[2].Sub(times[1]); gap < schedule[2] {
			t.Fatalf("third attempt after %v, want >= %v", gap, schedule[2])
		}
	}
	for _, d := range e.sim.WebhookDeliveries() {
		if d.GaveUp || (d.Attempt < 3) == d.Delivered {
			t.Fatalf("delivery %+v", d)
		}
		if strings.Contains(d.Err, "secret") {
			t.Fatal("webhook URL leaked into the record")
		}
	}
}

func TestWebhooksGiveUpAfterSixAttempts(t *testing.T) {
	rc := &receiver{failures: 100, seen: map[string]int{}, times: map[string][]time.Time{}}
	rx := httptest.NewServer(rc)
	defer rx.Close()
	e := newEnv(t, func(o *Options) {
		o.WebhookURL = rx.URL
		o.WebhookSchedule = []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond}
	})
	e.sim.LaunchSurvey(4574, "")
	waitFor(t, func() bool { return e.sim.WebhooksPending() == 0 && len(e.sim.WebhookDeliveries()) == 6 })
	d := e.sim.WebhookDeliveries()
	if !d[5].GaveUp || d[5].Attempt != 6 || d[0].StatusCode != 503 {
		t.Fatalf("%+v", d[5])
	}
	time.Sleep(20 * time.Millisecond)
	if n := len(e.sim.WebhookDeliveries()); n != 6 {
		t.Fatalf("%d attempts after giving up", n)
	}
}

func TestWebhooksStopOnClose(t *testing.T) {
	rc := &receiver{failures: 100, seen: map[string]int{}, times: map[string][]time.Time{}}
	rx := httptest.NewServer(rc)
	defer rx.Close()
	s, err := New(Options{Token: "x", WebhookURL: rx.URL, Surveys: []SurveySpec{{ID: 1, Responses: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		s.AddResponse(1, survey.Response{})
	}
	s.Close() // the default schedule would retry for a day: Close must not wait
	s.Close()
}

func TestLiveWebhooks(t *testing.T) {
	rc := &receiver{seen: map[string]int{}, times: map[string][]time.Time{}}
	rx := httptest.NewServer(rc)
	defer rx.Close()
	clk := newClock()
	s, err := New(Options{Token: "x", Now: clk.Now, WebhookURL: rx.URL, WebhookLive: true, LiveTick: 5 * time.Millisecond,
		Surveys: []SurveySpec{{ID: 1, Responses: 100, Start: clk.Now()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(20 * time.Millisecond)
	clk.Add(3 * time.Hour)
	waitFor(t, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return len(rc.bodies) > 50
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
