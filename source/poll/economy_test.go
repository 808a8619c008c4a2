package poll

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// Overlap re-reads of responses written at the same status fetch nothing:
// one detail per new response.
func TestOverlapRereadsSkipHeldResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
		api := &fakeAPI{resps: gen(5, now.Add(-5*time.Minute), survey.StatusCompleted)} // all inside the overlap
		sub := &fakeSub{}
		p := New(Options{Statuses: []string{"completed"}, SettleLag: -1, Now: func() time.Time { return now }}, api, sub, &memStates{}, nil)
		found, err := p.cycle(context.Background(), 1, "completed")
		if err != nil || found != 5 {
			t.Fatalf("first cycle: found %d, %v; want 5", found, err)
		}
		waitAcked(t, p, 1, api.resps)
		api.mu.Lock()
		api.resps = append(api.resps, fakeResp{id: "00000000-0000-4000-8000-00000000abcd", status: "completed",
			created: now.Add(-time.Minute), completed: now.Add(30 * time.Second)})
		api.mu.Unlock()
		now = now.Add(time.Minute)
		found, err = p.cycle(context.Background(), 1, "completed")
		if err != nil || found != 1 {
			t.Fatalf("second cycle: found %d, %v; want the 1 new", found, err)
		}
		for _, r := range api.resps {
			if sub.got[r.id] != 1 {
				t.Fatalf("response %s submitted %d times, want once", r.id, sub.got[r.id])
			}
		}
	})
}

func waitAcked(t *testing.T, p *Poller, surveyID int64, rs []fakeResp) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, r := range rs {
		for p.held.get(surveyID, r.id) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("response %s never acknowledged", r.id)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// The service lists a quota-full response as quotafull and details it as
// disqualified: neither a poll cycle nor reconcile treats that as a change.
func TestQuotaFullQuirkIsNotAChange(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(4, now.Add(-3*time.Minute), survey.StatusQuotaFull)
	api := &fakeAPI{resps: resps}
	have := inv{}
	for _, r := range resps {
		have[r.id] = survey.StatusDisqualified // what the detail said, and the warehouse holds
	}
	sub := &fakeSub{}
	p := New(Options{Statuses: []string{"quotafull"}, Now: func() time.Time { return now }}, api, sub, &memStates{}, have)
	if err := p.reconcile(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if len(sub.got) != 0 {
		t.Fatalf("reconcile re-read %v; a quota-full response detailed as disqualified is unchanged", sub.got)
	}
	// A webhook wrote them (Observe from the pipeline): the poll skips them.
	p2 := New(Options{Statuses: []string{"quotafull"}, Now: func() time.Time { return now }}, api, sub, &memStates{}, nil)
	for _, r := range resps {
		p2.Observe(1, r.id, survey.StatusDisqualified)
	}
	if found, err := p2.cycle(context.Background(), 1, "quotafull"); err != nil || found != 0 || len(sub.got) != 0 {
		t.Fatalf("cycle found %d (%v), submitted %v; want nothing", found, err, sub.got)
	}
	// A real change is still one: a response held as partial listed as completed.
	api.resps = append(api.resps, fakeResp{id: "00000000-0000-4000-8000-00000000beef", status: "completed", completed: now.Add(-time.Minute)})
	p3 := New(Options{Statuses: []string{"completed"}, Now: func() time.Time { return now }}, api, sub, &memStates{}, nil)
	p3.Observe(1, "00000000-0000-4000-8000-00000000beef", survey.StatusPartial)
	if found, err := p3.cycle(context.Background(), 1, "completed"); err != nil || found != 1 {
		t.Fatalf("partial → completed: found %d (%v), want 1", found, err)
	}
}

// A partial rescan re-reads held partial responses (they can still
// change); ordinary partial cycles do not.
func TestPartialRescanRereadsOnlyPartials(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(3, now.Add(-5*time.Hour), survey.StatusPartial)
	api := &fakeAPI{resps: resps}
	sub := &fakeSub{}
	p := New(Options{Statuses: []string{"partial"}, Now: func() time.Time { return now }}, api, sub, &memStates{}, nil)
	if _, err := p.cycle(context.Background(), 1, "partial"); err != nil { // backfill
		t.Fatal(err)
	}
	waitAcked(t, p, 1, resps)
	now = now.Add(time.Minute)
	if _, err := p.cycle(context.Background(), 1, "partial"); err != nil { // the lookback was read a minute ago: overlap only
		t.Fatal(err)
	}
	for _, r := range resps {
		if sub.got[r.id] != 1 {
			t.Fatalf("ordinary partial cycle: %s submitted %d times, want once", r.id, sub.got[r.id])
		}
	}
	now = now.Add(11 * time.Minute)
	if found, err := p.cycle(context.Background(), 1, "partial"); err != nil || found != 0 { // a rescan
		t.Fatalf("rescan: found %d (%v); re-reads of held partials are not new", found, err)
	}
	for _, r := range resps {
		if sub.got[r.id] != 2 {
			t.Fatalf("rescan: %s submitted %d times, want twice", r.id, sub.got[r.id])
		}
	}
}

func TestScheduleBacksOffWhenIdleAndResetsOnNew(t *testing.T) {
	p := New(Options{PollInterval: 30 * time.Second}, nil, nil, nil, nil)
	t0 := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	s := &sched{}
	run := func(p *Poller, stream string, at time.Time, lastNew time.Time, ended bool) {
		s.t0, s.t1 = at, at
		p.reschedule(s, 1, stream, ended, lastNew)
	}
	run(p, "completed", t0, t0, false)
	if s.interval != 30*time.Second {
		t.Fatalf("active: %v", s.interval)
	}
	// Idle for less than IdleAfter (10 min): stays at the poll interval.
	run(p, "completed", t0.Add(5*time.Minute), t0, false)
	if s.interval != 30*time.Second {
		t.Fatalf("briefly idle: %v", s.interval)
	}
	at := t0.Add(10 * time.Minute)
	var got []time.Duration
	for range 8 {
		run(p, "completed", at, t0, false)
		got = append(got, s.interval)
		at = s.next
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("idle backoff %v, want %v", got, want)
	}
	// Another stream of the survey found something: this one comes back.
	s.next = at.Add(30 * time.Minute)
	p.activate(s, "completed", false, at)
	if s.interval != 30*time.Second || !s.next.Equal(at.Add(30*time.Second)) {
		t.Fatalf("after a new response: %v next %v", s.interval, s.next)
	}
	// Webhooks: the safety net, coarser for the other streams; ended: rare.
	pw := New(Options{Webhooks: true}, nil, nil, nil, nil)
	run(pw, "completed", at, at, false)
	if s.interval != 30*time.Minute {
		t.Fatalf("webhooks, completed: %v", s.interval)
	}
	run(pw, "partial", at, at, false)
	if s.interval != time.Hour {
		t.Fatalf("webhooks, partial: %v", s.interval)
	}
	run(p, "completed", at, at, true)
	if s.interval != 6*time.Hour {
		t.Fatalf("ended: %v", s.interval)
	}
}

// The budget stretches intervals when the projected monthly calls exceed
// it, warns, and exports the projection.
func TestBudgetStretchesAndWarns(t *testing.T) {
	t0 := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	now := t0
	var calls atomic.Int64
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	p := New(Options{MonthlyBudget: 100_000, CallCount: calls.Load, Now: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg}, nil, nil, nil, nil)
	// 54,700 calls a day: about 1.64 M a month, 16× the budget.
	perMinute := int64(54_700 / (24 * 60))
	for range 31 {
		p.budget.tick()
		now = now.Add(time.Minute)
		calls.Add(perMinute)
	}
	proj, stretch := p.Projection()
	if proj < 1.5e6 || proj > 1.8e6 {
		t.Fatalf("projected %v, want about 1.64 M", proj)
	}
	if stretch != 4 {
		t.Fatalf("stretch %v after one window, want the ×4 step", stretch)
	}
	if got := testutil.ToFloat64(p.m.projected); got != proj {
		t.Fatalf("gauge %v, want %v", got, proj)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "monthly_budget=100000") {
		t.Fatalf("no warning logged:\n%s", logs.String())
	}
	if got := p.stretched(30 * time.Second); got != 2*time.Minute {
		t.Fatalf("stretched 30s = %v", got)
	}
	// The pace drops under the budget: the stretch comes back down, not below 1.
	for range 200 {
		p.budget.tick()
		now = now.Add(time.Minute)
		calls.Add(1)
	}
	if _, stretch := p.Projection(); stretch != 1 {
		t.Fatalf("stretch %v at a low pace, want 1", stretch)
	}
}

// stub serves list pages from a function, through the real client.
func stub(t *testing.T, page func(q url2) (total int, ids []string)) (*surveyapi.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		q := r.URL.Query()
		pg, _ := strconv.Atoi(q.Get("page"))
		pp, _ := strconv.Atoi(q.Get("per_page"))
		total, ids := page(url2{page: pg, perPage: pp, from: q.Get("start_completed_at"), to: q.Get("end_completed_at")})
		var b strings.Builder
		fmt.Fprintf(&b, `{"result":{"per_page":%d,"page":%d,"total":%d,"data":[`, pp, pg, total)
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"response_id":%q,"href":"x"}`, id)
		}
		b.WriteString(`]},"meta":{"request_id":"00000000-0000-0000-0000-000000000000","http_status":200}}`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(b.String()))
	}))
	t.Cleanup(srv.Close)
	c, err := surveyapi.New(surveyapi.Options{BaseURL: srv.URL + "/v1", Token: "t", UserAgent: "test (t@example.invalid)", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, &n
}

type url2 struct {
	page, perPage int
	from, to      string
}

func guidN(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// A list claiming 10^9 responses and serving fresh ids forever: no
// allocation follows the claim, the window does not split into pieces, and
// paging stops at the page cap with an error (the watermark stays).
func TestHostileTotalAndEndlessPages(t *testing.T) {
	c, calls := stub(t, func(q url2) (int, []string) {
		ids := make([]string, q.perPage)
		for i := range ids {
			ids[i] = guidN(q.page*q.perPage + i + len(q.from)*7919)
		}
		return 1_000_000_000, ids
	})
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	sub := &fakeSub{}
	st := &memStates{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 100, Now: func() time.Time { return now }}, c, sub, st, nil)
	before := heapAlloc()
	_, err := p.cycle(context.Background(), 1, "completed")
	allocated := heapAlloc() - before
	if err == nil || !strings.Contains(err.Error(), "page cap") {
		t.Fatalf("cycle: %v, want a page cap error", err)
	}
	// 3 first pages (the window and its halves, found implausible), then
	// the cap: 4×20 000/100 + 10 = 810 pages.
	if n := calls.Load(); n > 815 {
		t.Fatalf("%d list calls; the cap is 810 pages", n)
	}
	// Cumulative allocation of ~810 pages through the client (~0.4 MiB a
	// page under -race); anything sized by the claim would be gigabytes.
	if allocated > 1<<30 {
		t.Fatalf("allocated %d MiB for a window claiming 10^9 responses", allocated>>20)
	}
	if got := testutil.ToFloat64(p.m.hostile.WithLabelValues("implausible_total")); got != 1 {
		t.Fatalf("implausible_total = %v", got)
	}
	if s := st.m[streamKey{1, "completed"}]; !s.Watermark.IsZero() {
		t.Fatalf("watermark moved to %v past a window that never ended", s.Watermark)
	}
}

// A service that repeats its last page forever (a total it never reaches):
// paging stops at the first page adding nothing new, and the window counts
// as read.
func TestRepeatedPageStopsPaging(t *testing.T) {
	c, calls := stub(t, func(q url2) (int, []string) {
		p := min(q.page, 3)
		ids := make([]string, q.perPage)
		for i := range ids {
			ids[i] = guidN(p*q.perPage + i)
		}
		return 1_000_000_000, ids
	})
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	sub := &fakeSub{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 100, MaxWindowResponses: 2_000_000_000, Now: func() time.Time { return now }}, c, sub, &memStates{}, nil)
	if _, err := p.cycle(context.Background(), 1, "completed"); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d list calls, want 4 (pages 1–3, then the repeat)", n)
	}
	if len(sub.got) != 300 {
		t.Fatalf("%d responses submitted, want 300", len(sub.got))
	}
}

// Reconcile: a claim of 10^9 responses is refused before any id set grows;
// a repeating page stops.
func TestReconcileHostileLists(t *testing.T) {
	c, calls := stub(t, func(q url2) (int, []string) { return 1_000_000_000, []string{guidN(q.page)} })
	p := New(Options{Statuses: []string{"completed"}, PerPage: 1}, c, &fakeSub{}, &memStates{}, inv{})
	if err := p.reconcile(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("reconcile: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls", calls.Load())
	}
	c2, calls2 := stub(t, func(q url2) (int, []string) { return 50, []string{guidN(1)} })
	p2 := New(Options{Statuses: []string{"completed"}, PerPage: 1}, c2, &fakeSub{}, &memStates{}, inv{})
	if err := p2.reconcile(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if calls2.Load() != 2 {
		t.Fatalf("%d calls, want 2 (the second page repeats the first)", calls2.Load())
	}
}

// With webhooks on, a response_received of a polled survey does not wake
// its poll (the ref went to the pipeline); without them AddSurvey wakes it.
// EndSurvey runs a final sync and keeps the survey at the ended cadence.
func TestWebhooksDoNotWakeAKnownSurvey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, webhooks := range []bool{true, false} {
			now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
			api := &fakeAPI{resps: gen(3, now.Add(-time.Hour), survey.StatusCompleted)}
			ctx, cancel := context.WithCancel(context.Background())
			p := New(Options{Surveys: []int64{1}, Statuses: []string{"completed"}, Webhooks: webhooks, PollInterval: time.Hour,
				ReconcileInterval: -1, Now: func() time.Time { return now }}, api, &fakeSub{}, &memStates{}, nil)
			done := make(chan error)
			go func() { done <- p.Run(ctx) }()
			<-p.FirstPassDone()
			calls := func() int { api.mu.Lock(); defer api.mu.Unlock(); return api.calls }
			before := calls()
			p.AddSurvey(1)
			time.Sleep(200 * time.Millisecond)
			woke := calls() > before
			if woke == webhooks {
				t.Errorf("webhooks %v: AddSurvey of a known survey woke it: %v", webhooks, woke)
			}
			before = calls()
			p.EndSurvey(1)
			deadline := time.Now().Add(5 * time.Second)
			for calls() == before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if calls() == before {
				t.Errorf("webhooks %v: EndSurvey ran no final sync", webhooks)
			}
			ended := false
			for deadline := time.Now().Add(5 * time.Second); !ended && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				p.mu.Lock()
				r := p.surveys[1]
				ended = r != nil && r.ended
				p.mu.Unlock()
			}
			if !ended {
				t.Errorf("webhooks %v: after the final sync the survey is not at the ended cadence", webhooks)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Reconcile keeps its own interval while the streams are backed off (here:
// the webhook safety net).
func TestReconcileKeepsItsIntervalWhileStreamsBackOff(t *testing.T) {
	api := &fakeAPI{resps: gen(3, time.Now().Add(-time.Hour), survey.StatusCompleted)}
	ctx, cancel := context.WithCancel(context.Background())
	p := New(Options{Surveys: []int64{1}, Statuses: []string{"completed"}, Webhooks: true, PollInterval: time.Second,
		ReconcileInterval: 50 * time.Millisecond}, api, &fakeSub{}, &memStates{}, inv{})
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(p.m.reconciles.WithLabelValues("ok")) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(p.m.reconciles.WithLabelValues("ok")); n < 3 {
		t.Fatalf("%v reconcile passes in 5 s at a 50 ms interval", n)
	}
	if n := testutil.ToFloat64(p.m.cycles.WithLabelValues("completed", "ok")); n != 1 {
		t.Fatalf("%v poll cycles; the safety net is 30 min away", n)
	}
}

// A window whose total changes during every one of its passes (responses
// landing on pages already read) is not acknowledged: the watermark stays
// before it and the next cycle reads it again, instead of moving on after
// the third pass with a response possibly unread.
func TestUnstableWindowIsNotAcknowledged(t *testing.T) {
	var n atomic.Int64
	c, _ := stub(t, func(q url2) (int, []string) {
		// Two pages (two ids, then one); every call claims one more.
		if q.page > 1 {
			return 3 + int(n.Add(1)), []string{guidN(3)}
		}
		return 3 + int(n.Add(1)), []string{guidN(1), guidN(2)}
	})
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	st := &memStates{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 2, Now: func() time.Time { return now }}, c, &fakeSub{}, st, nil)
	if _, err := p.cycle(context.Background(), 1, "completed"); err == nil || !strings.Contains(err.Error(), "total changed") {
		t.Fatalf("cycle: %v, want a 'total changed' error", err)
	}
	if s := st.m[streamKey{1, "completed"}]; !s.Watermark.IsZero() {
		t.Fatalf("watermark moved to %v past a window whose total never settled", s.Watermark)
	}
}

// A storm of new surveys (more than any buffer) all join the polling set:
// AddSurvey used to fall back to Wake when its channel was full, which
// wakes only surveys already polled.
func TestAddSurveyStormAddsEverySurvey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
		api := &fakeAPI{}
		p := New(Options{Statuses: []string{"completed"}, PollInterval: time.Hour, ReconcileInterval: -1,
			Now: func() time.Time { return now }}, api, &fakeSub{}, &memStates{}, nil)
		for id := int64(1); id <= 500; id++ {
			p.AddSurvey(id) // before Run: nothing drains yet
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		n := 0
		for deadline := time.Now().Add(5 * time.Second); n < 500 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			p.mu.Lock()
			n = len(p.surveys)
			p.mu.Unlock()
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n != 500 {
			t.Fatalf("%d of 500 added surveys are polled", n)
		}
	})
}

// A stream whose list answers are not believed backs off exponentially up
// to the safety-net interval, whatever the survey's activity, spends at
// most DistrustCallsPerDay list calls a day, and comes back with the
// first believed pass.
func TestDistrustBacksOffAndResets(t *testing.T) {
	var logs strings.Builder
	p := New(Options{PollInterval: 30 * time.Second, SettleLag: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil, nil, nil, nil)
	t0 := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	s := &sched{}
	at := t0
	passOf := func(calls int64, kind int) *pass {
		c := &pass{}
		c.calls.Store(calls)
		if kind >= 0 {
			p.anomaly(c, kind)
		}
		return c
	}
	var got []time.Duration
	for range 9 {
		s.t0, s.t1, s.pass = at, at, passOf(1, anPageAddsNothing)
		p.reschedule(s, 1, "completed", false, at) // active: found something just now
		p.distrusted(1, "completed", s)
		got = append(got, s.next.Sub(at))
		at = s.next
	}
	want := []time.Duration{50 * time.Second, 100 * time.Second, 200 * time.Second, 400 * time.Second, 800 * time.Second,
		1600 * time.Second, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("back-off %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), NotBelieved); n != 9 {
		t.Fatalf("%d warnings for 9 passes, want one per back-off step:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "passes_in_a_row=9") || !strings.Contains(logs.String(), "anomalies=page_adds_nothing×1") {
		t.Fatalf("the warning does not count:\n%s", logs.String())
	}
	// Another stream's find does not bring a distrusted stream back.
	next := s.next
	p.activate(s, "completed", false, at)
	if !s.next.Equal(next) {
		t.Fatalf("activate moved a distrusted stream to %v", s.next)
	}
	// An expensive pass (the page cap: 90 calls) waits for its calls to fit
	// 90 a day: 90 × 16 min, less the 1 h burst.
	s.t0, s.t1, s.pass = at, at, passOf(90, anPageCap)
	p.reschedule(s, 1, "completed", false, at)
	p.distrusted(1, "completed", s)
	if d := s.next.Sub(at); d < 19*time.Hour {
		t.Fatalf("a 90-call distrusted pass is followed after %v", d)
	}
	// A believed pass resets.
	at = s.next
	s.t0, s.t1, s.pass = at, at, passOf(1, -1)
	p.reschedule(s, 1, "completed", false, at)
	if s.distrust != 0 || s.next.Sub(at) != 25*time.Second {
		t.Fatalf("after a believed pass: distrust %d, next in %v", s.distrust, s.next.Sub(at))
	}
	if !strings.Contains(logs.String(), "believed again") {
		t.Fatal("no line when the stream is believed again")
	}
	if got := testutil.ToFloat64(p.m.distrustCalls); got != 9+90 {
		t.Fatalf("distrusted list calls %v, want %d", got, 9+90)
	}
}

// rejectingSub rejects every ref (its reject record is durable): OnReject,
// then Done(nil), as the pipeline does.
type rejectingSub struct{ fakeSub }

func (s *rejectingSub) Submit(ctx context.Context, r pipeline.Ref) error {
	s.mu.Lock()
	if s.got == nil {
		s.got = map[survey.GUID]int{}
	}
	s.got[r.ResponseID]++
	s.mu.Unlock()
	go func() {
		if r.OnReject != nil {
			r.OnReject()
		}
		r.Done(nil)
	}()
	return nil
}

// A rejected response is not in the warehouse: reconcile used to read it
// again at every pass (and add a rejects row each time). Unchanged — listed
// at the status it was rejected at — it is not read again; listed at
// another status it is.
func TestReconcileDoesNotRereadUnchangedRejects(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(3, now.Add(-10*time.Hour), survey.StatusPartial)
	api := &fakeAPI{resps: resps}
	sub := &rejectingSub{}
	p := New(Options{Statuses: []string{"completed", "partial"}, Now: func() time.Time { return now }}, api, sub, &memStates{}, inv{})
	for range 3 {
		if err := p.reconcile(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range resps {
		if sub.got[r.id] != 1 {
			t.Fatalf("rejected response %s read %d times by 3 reconciles, want once", r.id, sub.got[r.id])
		}
	}
	if got := testutil.ToFloat64(p.m.reconciled.WithLabelValues("rejected_unchanged")); got != 6 {
		t.Fatalf("rejected_unchanged %v, want 6", got)
	}
	// One completes: listed at another status, it is tried again.
	api.mu.Lock()
	api.resps[0].status = "completed"
	api.resps[0].completed = now.Add(-time.Hour)
	api.mu.Unlock()
	if err := p.reconcile(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if sub.got[resps[0].id] != 2 || sub.got[resps[1].id] != 1 {
		t.Fatalf("after a change: read %d and %d times, want 2 and 1", sub.got[resps[0].id], sub.got[resps[1].id])
	}
	// A poll cycle does not read them either.
	if found, err := p.cycle(context.Background(), 1, "partial"); err != nil || found != 0 {
		t.Fatalf("cycle found %d (%v)", found, err)
	}
}

// rejInv is an inventory that also knows the rejected responses not
// written since (what the sinks' RejectedResponses read back).
type rejInv struct {
	inv
	rejected map[survey.GUID]string
}

func (i rejInv) RejectedResponses(context.Context, int64) (map[survey.GUID]string, error) {
	return i.rejected, nil
}

// After a restart the held set is empty: the responses rejected before it
// come back from the reject records with the status they were listed at.
// Listed so again — by the first cycle or by reconcile — they are not read
// again; listed at another status (changed since), they are; one rejected
// and then written is as written.
func TestRejectsSurviveARestart(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(5, now.Add(-2*time.Hour), survey.StatusCompleted)
	resps[3].status = survey.StatusDisqualified // rejected when listed as completed; changed since
	api := &fakeAPI{resps: resps}
	sub := &rejectingSub{}
	store := rejInv{
		inv: inv{resps[4].id: survey.StatusCompleted}, // rejected once, written since: not among the rejected
		rejected: map[survey.GUID]string{
			resps[0].id: survey.StatusCompleted, resps[1].id: survey.StatusCompleted, resps[3].id: survey.StatusCompleted,
		},
	}
	p := New(Options{Statuses: []string{"completed", "disqualified"}, Now: func() time.Time { return now }}, api, sub, &memStates{}, store)
	ctx := context.Background()
	if !p.preloadHeld(ctx, 1) {
		t.Fatal("preloadHeld")
	}
	for _, st := range []string{"completed", "disqualified"} {
		if _, err := p.cycle(ctx, 1, st); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := p.reconcile(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i, want := range []int{0, 0, 1, 1, 0} {
		if sub.got[resps[i].id] != want {
			t.Errorf("response %d read %d times, want %d", i, sub.got[resps[i].id], want)
		}
	}
	// Without a held set, reconcile still reads the records.
	sub2 := &rejectingSub{}
	p = New(Options{Statuses: []string{"completed", "disqualified"}, HeldMax: -1, Now: func() time.Time { return now }}, api, sub2, &memStates{}, store)
	if err := p.reconcile(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if sub2.got[resps[0].id] != 0 || sub2.got[resps[3].id] != 1 {
		t.Errorf("without a held set: read %v", sub2.got)
	}
}
