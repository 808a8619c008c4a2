// Package apicalls measures what the poller and pipeline cost in API calls
// (issue 12): the daemon's poller, pipeline and API client run in this
// process against the emulator (sim) on a compressed clock (one
// simulated day in two minutes by default), with three idle surveys and
// three active ones that share one new response every 10 s, with webhooks
// on or off. It counts every call the emulator answers, per survey and
// operation, and reports API calls per survey per day, detail calls per new
// response, and freshness (completion → written), in simulated time.
//
//	APICALLS=1 go test -run APICalls -v -timeout 30m ./bench/apicalls/
//	APICALLS=1 APICALLS_WEBHOOKS=1 go test -run APICalls -v -timeout 30m ./bench/apicalls/
//
// Knobs: APICALLS_SCALE (720: simulated seconds per real second),
// APICALLS_HOURS (24: simulated hours measured, after APICALLS_WARMUP_MIN =
// 60 simulated minutes), APICALLS_BUDGET (api.monthly_budget; 0).
//
// The same file runs against the code before issue 12 with
// -tags apicalls_base (adapter_base_test.go: the old poller sleeps on the real
// clock, so its poll interval is given in real time, divided by the scale).
package apicalls

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// clock is simulated time running scale× faster than the real clock.
type clock struct {
	realStart, virtStart time.Time
	scale                float64
}

func (c *clock) now() time.Time {
	return c.virtStart.Add(time.Duration(float64(time.Since(c.realStart)) * c.scale))
}

func (c *clock) real(d time.Duration) time.Duration { return time.Duration(float64(d) / c.scale) }

func (c *clock) after(d time.Duration) <-chan time.Time { return time.After(c.real(d)) }

// counter counts the emulator's answered calls by survey and operation.
type counter struct {
	mu     sync.Mutex
	list   map[int64]int64
	detail map[int64]int64
	total  atomic.Int64
}

func (c *counter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /v1/surveys/{id}/responses[/{rid}]
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) >= 4 && parts[1] == "surveys" && parts[3] == "responses" {
			id, _ := strconv.ParseInt(parts[2], 10, 64)
			c.mu.Lock()
			if len(parts) == 4 {
				c.list[id]++
			} else {
				c.detail[id]++
			}
			c.mu.Unlock()
		}
		c.total.Add(1)
		h.ServeHTTP(w, r)
	})
}

func (c *counter) snapshot() (list, detail map[int64]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list, detail = map[int64]int64{}, map[int64]int64{}
	for k, v := range c.list {
		list[k] = v
	}
	for k, v := range c.detail {
		detail[k] = v
	}
	return
}

// store is the sink: writes succeed at once; it keeps the checkpoints and
// an inventory (like ClickHouse's responses_current) for reconcile.
type store struct {
	mu     sync.Mutex
	states map[string]pipeline.StreamState
	inv    map[int64]map[survey.GUID]string
	first  map[survey.GUID]time.Time // first write, simulated time
	writes map[survey.GUID]int
}

func (s *store) Write(context.Context, *flatten.Batch) error { return nil }

func (s *store) LoadStates(context.Context) ([]pipeline.StreamState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pipeline.StreamState
	for _, v := range s.states {
		out = append(out, v)
	}
	return out, nil
}

func (s *store) SaveStates(_ context.Context, st []pipeline.StreamState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range st {
		s.states[fmt.Sprint(v.SurveyID, v.Stream)] = v
	}
	return nil
}

func (s *store) CurrentResponses(_ context.Context, surveyID int64) (map[survey.GUID]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[survey.GUID]string, len(s.inv[surveyID]))
	for k, v := range s.inv[surveyID] {
		out[k] = v
	}
	return out, nil
}

func (s *store) written(surveyID int64, id survey.GUID, r *survey.Response, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inv[surveyID] == nil {
		s.inv[surveyID] = map[survey.GUID]string{}
	}
	if r == nil || r.ResponseStatus == survey.StatusDeleted {
		delete(s.inv[surveyID], id)
	} else {
		s.inv[surveyID][id] = r.ResponseStatus
	}
	if _, ok := s.first[id]; !ok {
		s.first[id] = at
	}
	s.writes[id]++
}

const (
	idleBase   = 1001 // 1001–1003: no new responses
	activeBase = 1004 // 1004–1006: one new response every 10 s among them
)

func TestAPICalls(t *testing.T) {
	if os.Getenv("APICALLS") == "" {
		t.Skip("set APICALLS=1 to run the API-economy benchmark")
	}
	webhooks := os.Getenv("APICALLS_WEBHOOKS") == "1"
	ck := &clock{realStart: time.Now(), virtStart: time.Now().UTC(), scale: float64(envInt("APICALLS_SCALE", 720))}
	warmup := time.Duration(envInt("APICALLS_WARMUP_MIN", 60)) * time.Minute
	measure := time.Duration(envInt("APICALLS_HOURS", 24)) * time.Hour
	budget := int64(envInt("APICALLS_BUDGET", 0))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The webhook receiver: as the daemon's processor, without the spool.
	var pipe *pipeline.Pipeline
	var poller *poll.Poller
	ready := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-ready
		var ev struct {
			EventName  string `json:"event_name"`
			SurveyID   int64  `json:"survey_id"`
			ResponseID string `json:"response_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if ev.EventName == "response_received" {
			id, err := survey.ParseGUID(strings.ToLower(ev.ResponseID))
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			poller.AddSurvey(ev.SurveyID)
			done := make(chan error, 1)
			if err := pipe.Submit(r.Context(), pipeline.Ref{SurveyID: ev.SurveyID, ResponseID: id, Source: "webhook", Urgent: true,
				Done: func(err error) { done <- err }}); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if err := <-done; err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	var specs []sim.SurveySpec
	for i := range 6 {
		specs = append(specs, sim.SurveySpec{ID: int64(idleBase + i), Responses: 200, Seed: int64(i + 1),
			Start: ck.virtStart.Add(-30 * 24 * time.Hour), Interval: time.Hour})
	}
	so := sim.Options{Token: "bench", Surveys: specs, Now: ck.now, Seed: 7}
	if webhooks {
		so.WebhookURL = hook.URL + "/hooks/bench"
	}
	em, err := sim.New(so)
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	// The real service details a quota-full response as disqualified.
	if err := em.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultQuotaFullAsDisqualified}); err != nil {
		t.Fatal(err)
	}
	cnt := &counter{list: map[int64]int64{}, detail: map[int64]int64{}}
	srv := httptest.NewServer(cnt.wrap(em.Handler()))
	defer srv.Close()

	client, err := surveyapi.New(surveyapi.Options{BaseURL: srv.URL + "/v1", Token: "bench", UserAgent: "apicalls (bench@example.invalid)",
		MaxConcurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	st := &store{states: map[string]pipeline.StreamState{}, inv: map[int64]map[survey.GUID]string{},
		first: map[survey.GUID]time.Time{}, writes: map[survey.GUID]int{}}
	pipe = pipeline.New(pipeline.Options{
		FetchConcurrency: 8, MaxDelay: 2 * time.Millisecond, UrgentDelay: time.Millisecond, Now: ck.now,
		OnResponse: func(_ context.Context, surveyID int64, id survey.GUID, r *survey.Response) {
			st.written(surveyID, id, r, ck.now())
			status := survey.StatusDeleted
			if r != nil {
				status = r.ResponseStatus
			}
			observe(poller, surveyID, id, status)
		},
	}, client, st)
	ids := make([]int64, 6)
	for i := range ids {
		ids[i] = int64(idleBase + i)
	}
	poller = poll.New(pollOptions(poll.Options{Surveys: ids, Now: ck.now}, ck, webhooks, budget, cnt.total.Load), client, pipe, st, st)
	close(ready)

	pipeDone := make(chan error, 1)
	go func() { pipeDone <- pipe.Run(ctx) }()
	pollCtx, stopPoll := context.WithCancel(ctx)
	pollDone := make(chan error, 1)
	go func() { pollDone <- poller.Run(pollCtx) }()

	// New responses: one every 10 simulated seconds, round robin over the
	// active surveys; 88 % completed, 8 % disqualified, 4 % quota-full.
	type added struct {
		survey    int64
		id        survey.GUID
		completed time.Time
		measured  bool
	}
	var addMu sync.Mutex
	var adds []added
	var measuring atomic.Bool
	addCtx, stopAdding := context.WithCancel(ctx)
	addDone := make(chan struct{})
	go func() {
		defer close(addDone)
		for n := 0; ; n++ {
			select {
			case <-ck.after(10 * time.Second):
			case <-addCtx.Done():
				return
			}
			status := survey.StatusCompleted
			switch n % 25 {
			case 3, 15:
				status = survey.StatusDisqualified
			case 9:
				status = survey.StatusQuotaFull
			}
			sid := int64(activeBase + n%3)
			now := ck.now()
			r, err := em.AddResponse(sid, survey.Response{ResponseStatus: status,
				DateCreated: survey.Time{Time: now.Add(-5 * time.Minute)}, DateCompleted: survey.TimeOf(now)})
			if err != nil {
				t.Error(err)
				return
			}
			addMu.Lock()
			adds = append(adds, added{sid, r.ResponseID, r.DateCompleted.Time, measuring.Load()})
			addMu.Unlock()
		}
	}()

	select {
	case <-poller.FirstPassDone():
	case <-time.After(2 * time.Minute):
		t.Fatal("backfill did not finish")
	}
	time.Sleep(ck.real(warmup))
	list0, detail0 := cnt.snapshot()
	measuring.Store(true)
	t0 := ck.now()
	time.Sleep(ck.real(measure))
	measuring.Store(false)
	list1, detail1 := cnt.snapshot()
	span := ck.now().Sub(t0)
	stopAdding()
	<-addDone
	// Let the last responses land (a poll interval, or the safety net).
	time.Sleep(ck.real(2 * time.Minute))
	stopPoll()
	<-pollDone
	pipe.CloseInput()
	if err := <-pipeDone; err != nil {
		t.Fatal(err)
	}

	perDay := 24 * time.Hour.Seconds() / span.Seconds()
	var newN, missing int
	var fresh []time.Duration
	addMu.Lock()
	st.mu.Lock()
	for _, a := range adds {
		if !a.measured {
			continue
		}
		newN++
		at, ok := st.first[a.id]
		if !ok {
			missing++
			continue
		}
		fresh = append(fresh, at.Sub(a.completed))
	}
	st.mu.Unlock()
	addMu.Unlock()
	slices.Sort(fresh)
	pct := func(p float64) time.Duration {
		if len(fresh) == 0 {
			return 0
		}
		return fresh[min(len(fresh)-1, int(p*float64(len(fresh))))].Round(100 * time.Millisecond)
	}
	group := func(base int64) (list, detail float64) {
		for i := range int64(3) {
			list += float64(list1[base+i] - list0[base+i])
			detail += float64(detail1[base+i] - detail0[base+i])
		}
		return list / 3 * perDay, detail / 3 * perDay
	}
	il, id := group(idleBase)
	al, ad := group(activeBase)
	var activeDetail int64
	for i := range int64(3) {
		activeDetail += detail1[activeBase+i] - detail0[activeBase+i]
	}
	perNew := float64(activeDetail) / float64(max(newN, 1))
	proj, stretch := projection(poller)
	mode := "webhooks off"
	if webhooks {
		mode = "webhooks on"
	}
	t.Logf("%s, %s simulated (scale %.0f×, after %s warm-up), budget %d", mode, span.Round(time.Minute), ck.scale, warmup, budget)
	t.Logf("idle survey:   %7.0f list + %6.0f detail = %7.0f calls/day", il, id, il+id)
	t.Logf("active survey: %7.0f list + %6.0f detail = %7.0f calls/day", al, ad, al+ad)
	t.Logf("all 6 surveys: %7.0f calls/day", 3*(il+id+al+ad))
	t.Logf("new responses: %d (%.0f/day), detail calls per new response %.2f, missing %d", newN, float64(newN)*perDay, perNew, missing)
	t.Logf("freshness (completed → written, simulated): p50 %v p95 %v max %v", pct(0.5), pct(0.95), pct(1))
	if proj >= 0 {
		t.Logf("projected monthly calls %.0f (measured %.0f), stretch ×%.2f", proj, 3*(il+id+al+ad)*30, stretch)
	}
	if missing > 0 {
		t.Errorf("%d new responses never written", missing)
	}
}
