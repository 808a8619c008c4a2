package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

// What a webhook event means, decided by the processor itself (no
// receiver, no binary): the emulator answers the API, the Parquet
// warehouse in a temporary folder holds the rows and the surveys table.

const (
	liveSurvey  = 4574 // responses keep coming: the newest are in progress
	quietSurvey = 4575 // every response ten days old: nothing in progress
)

// spyPoller records what the processor asks of the poller.
type spyPoller struct {
	mu           sync.Mutex
	added, ended []int64
}

func (p *spyPoller) AddSurvey(id int64) { p.mu.Lock(); p.added = append(p.added, id); p.mu.Unlock() }
func (p *spyPoller) EndSurvey(id int64) { p.mu.Lock(); p.ended = append(p.ended, id); p.mu.Unlock() }

func (p *spyPoller) state() (added, ended []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.added), slices.Clone(p.ended)
}

type processorEnv struct {
	sim    *sim.Sim
	proc   *webhookProcessor
	poller *spyPoller
	book   *surveyBook
	wh     warehouse.Warehouse
	now    time.Time // the test's clock: set it with setNow
	clock  *atomic.Pointer[time.Time]
}

// setNow moves the clock of the processor, the surveys table and the
// emulator.
func (e *processorEnv) setNow(t time.Time) { e.now = t; e.clock.Store(&t) }

// newProcessorEnv wires a processor as assemble does: the API client on
// the emulator (no retries: a 5xx comes back at once), the pipeline into a
// Parquet warehouse, the surveys table, the configured surveys.
func newProcessorEnv(t *testing.T) *processorEnv {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clock := &atomic.Pointer[time.Time]{}
	clock.Store(&now)
	nowFn := func() time.Time { return *clock.Load() }
	s, err := sim.New(sim.Options{Token: "test-token", Now: nowFn, Surveys: []sim.SurveySpec{
		{ID: liveSurvey, Responses: 40, Seed: 7},
		{ID: quietSurvey, Responses: 10, Seed: 8, Start: now.Add(-240 * time.Hour), LateCompletion: -1},
		{ID: forbiddenSurvey, Responses: 1, Seed: 9},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	client, err := surveyapi.New(surveyapi.Options{BaseURL: srv.URL + "/v1", Token: "test-token", UserAgent: "surveysync-test (test@example.cz)",
		MaxRetries: -1, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	cfg := config.Default()
	cfg.Parquet.Dir = t.TempDir()
	cfg.Sync.Batch.MaxDelay = 10 * time.Millisecond
	quiet := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	wh, err := openWarehouse(ctx, cfg, quiet, prometheus.NewRegistry(), true)
	if err != nil {
		t.Fatal(err)
	}
	book, err := newSurveyBook(ctx, wh, quiet)
	if err != nil {
		t.Fatal(err)
	}
	book.now = nowFn
	pipe := newPipeline(cfg, nil, nil, client, wh, quiet, prometheus.NewRegistry())
	done := make(chan struct{})
	go func() { defer close(done); _ = pipe.Run(ctx) }()
	t.Cleanup(func() {
		pipe.CloseInput()
		cancel()
		<-done
		wh.Close()
	})
	poller := &spyPoller{}
	checks := newWebhookChecks(client, nowFn)
	checks.setConfigured([]int64{liveSurvey, quietSurvey})
	proc := &webhookProcessor{pipe: pipe, poller: poller, surveys: book, api: client, inv: wh.Inventory(),
		now: nowFn, checks: checks}
	return &processorEnv{sim: s, proc: proc, poller: poller, book: book, wh: wh, now: now, clock: clock}
}

func (e *processorEnv) process(t *testing.T, name string, ev survey.WebhookEvent) error {
	t.Helper()
	ev.EventName = name
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.proc.Process(ctx, webhookrx.Event{ID: fmt.Sprintf("ev-%d-%s", ev.SurveyID, ev.ResponseID), Name: name, ReceivedAt: e.now, Parsed: ev})
}

func (e *processorEnv) calls(op string) int64 { return e.sim.Calls()[op] }

// wantPermanent fails unless err is an error the receiver ends the event
// with (recorded as rejected, never retried) and says want.
func wantPermanent(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !permanent.Is(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v (permanent: %v), want a permanent error saying %q", what, err, permanent.Is(err), want)
	}
}

// An event without the ids it needs ends at once; an event the daemon
// does not know is acknowledged without any call.
func TestProcessEventsWithoutIDsAndUnknownEvents(t *testing.T) {
	e := newProcessorEnv(t)
	wantPermanent(t, "no survey_id", e.process(t, survey.EventResponseReceived, survey.WebhookEvent{ResponseID: guid(1)}), "has no survey_id")
	wantPermanent(t, "no response_id", e.process(t, survey.EventResponseReceived, survey.WebhookEvent{SurveyID: liveSurvey}), "has no response_id")
	if err := e.process(t, "survey_paused", survey.WebhookEvent{SurveyID: liveSurvey}); err != nil {
		t.Fatalf("an unknown event: %v, want acknowledged", err)
	}
	if n := e.calls(sim.OpListResponses) + e.calls(sim.OpGetResponse); n != 0 {
		t.Fatalf("%d API calls for events without ids or unknown", n)
	}
	if added, ended := e.poller.state(); len(added)+len(ended) != 0 || len(e.book.active()) != 0 {
		t.Fatalf("polling changed: added %v, ended %v, surveys %v", added, ended, e.book.active())
	}
}

// survey_launched: a readable survey is saved with its launch date and
// polled; a second launch within readableTTL costs no call. A survey that
// does not exist (404) or the token may not read (403) is rejected, not
// saved, not polled, and its next event costs no call either; a 5xx is
// retried (not permanent).
func TestProcessSurveyLaunched(t *testing.T) {
	e := newProcessorEnv(t)
	launched := e.now.Add(-time.Hour)
	if err := e.process(t, survey.EventSurveyLaunched, survey.WebhookEvent{SurveyID: quietSurvey, LaunchedAt: &survey.Time{Time: launched}}); err != nil {
		t.Fatal(err)
	}
	lists := e.calls(sim.OpListResponses)
	if err := e.process(t, survey.EventSurveyLaunched, survey.WebhookEvent{SurveyID: quietSurvey}); err != nil {
		t.Fatal(err)
	}
	if n := e.calls(sim.OpListResponses); n != lists || lists != 1 {
		t.Fatalf("list calls: %d for the first launch, %d after the second, want 1 and 1", lists, n)
	}
	// The surveys table holds it (saved before Process returned): a new
	// book over the same warehouse reads it back, launched and not ended.
	rows, err := e.wh.LoadSurveys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].SurveyID != quietSurvey || rows[0].LaunchedAt == nil || rows[0].EndedAt != nil {
		t.Fatalf("surveys table after a launch: %+v", rows)
	}
	if added, _ := e.poller.state(); !slices.Equal(added, []int64{quietSurvey, quietSurvey}) {
		t.Fatalf("surveys added to polling: %v", added)
	}

	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpListResponses, Kind: "403", Survey: forbiddenSurvey}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   int64
		code string
	}{{999, "404"}, {forbiddenSurvey, "403"}} {
		wantPermanent(t, fmt.Sprint("launch of ", c.id), e.process(t, survey.EventSurveyLaunched, survey.WebhookEvent{SurveyID: c.id}), "cannot read")
		before := e.calls(sim.OpListResponses)
		err := e.process(t, survey.EventSurveyLaunched, survey.WebhookEvent{SurveyID: c.id})
		wantPermanent(t, fmt.Sprint("second launch of ", c.id), err, "not asked again")
		if !strings.Contains(err.Error(), c.code) || e.calls(sim.OpListResponses) != before {
			t.Fatalf("second launch of %d: %v after %d calls, want its %s named and no call", c.id, err, e.calls(sim.OpListResponses)-before, c.code)
		}
		if e.book.has(c.id) {
			t.Fatalf("survey %d saved in the surveys table", c.id)
		}
	}
	if added, _ := e.poller.state(); len(added) != 2 {
		t.Fatalf("an unreadable survey was added to polling: %v", added)
	}

	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpListResponses, Kind: "503", Survey: liveSurvey}); err != nil {
		t.Fatal(err)
	}
	err = e.process(t, survey.EventSurveyLaunched, survey.WebhookEvent{SurveyID: liveSurvey})
	if err == nil || permanent.Is(err) {
		t.Fatalf("a launch answered 503: %v, want an error the receiver retries", err)
	}
	if e.book.has(liveSurvey) {
		t.Fatal("a launch answered 503 saved the survey")
	}
}

// survey_ended is checked against the service before a survey goes to
// the ended cadence: an end in the future costs no call; a survey that
// lists responses started since the claimed end is live (rejected, and an
// earlier claim costs no call); one that lists none is saved as ended at
// the claimed time and leaves the normal cadence. Without ended_at,
// completed_at dates the end.
func TestProcessSurveyEnded(t *testing.T) {
	e := newProcessorEnv(t)
	future := e.now.Add(endSkew + time.Minute)
	wantPermanent(t, "an end in the future", e.process(t, survey.EventSurveyEnded, survey.WebhookEvent{SurveyID: quietSurvey, EndedAt: &survey.Time{Time: future}}), "in the future")
	if n := e.calls(sim.OpListResponses); n != 0 {
		t.Fatalf("%d list calls for an end in the future", n)
	}

	claimed := e.now.Add(-30 * time.Minute)
	wantPermanent(t, "a live survey's end", e.process(t, survey.EventSurveyEnded, survey.WebhookEvent{SurveyID: liveSurvey, EndedAt: &survey.Time{Time: claimed}}), "the survey is live")
	lists := e.calls(sim.OpListResponses)
	wantPermanent(t, "an earlier end of a live survey", e.process(t, survey.EventSurveyEnded, survey.WebhookEvent{SurveyID: liveSurvey, EndedAt: &survey.Time{Time: claimed.Add(-time.Hour)}}), "the survey is live")
	if n := e.calls(sim.OpListResponses); n != lists || lists != 1 {
		t.Fatalf("list calls: %d for the first claim, %d after an earlier one, want 1 and 1", lists, n)
	}
	if e.book.has(liveSurvey) {
		t.Fatal("a live survey saved as ended")
	}

	end := e.now.Add(-time.Hour)
	if err := e.process(t, survey.EventSurveyEnded, survey.WebhookEvent{SurveyID: quietSurvey, CompletedAt: &survey.Time{Time: end}}); err != nil {
		t.Fatalf("the end of a survey that lists nothing since: %v", err)
	}
	if got := e.book.ended(); !slices.Equal(got, []int64{quietSurvey}) {
		t.Fatalf("ended surveys: %v", got)
	}
	rows, err := e.wh.LoadSurveys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EndedAt == nil || !rows[0].EndedAt.Equal(end) {
		t.Fatalf("surveys table after an end: %+v", rows)
	}
	if _, ended := e.poller.state(); !slices.Equal(ended, []int64{quietSurvey}) {
		t.Fatalf("surveys ended in the poller: %v", ended)
	}
}

// response_received, the 404 and the flood, through the processor: a
// response the service has is fetched, written and its survey polled; an
// id whose detail answers 404 and the warehouse never had writes no
// deletion (the survey is polled); after missThreshold of them the survey
// is flooded: an absent id costs no detail call (one listing answers it),
// and a listed response is still fetched and written without another
// listing.
func TestProcessResponseReceivedAbsentAndFlooded(t *testing.T) {
	e := newProcessorEnv(t)
	var real []survey.Response
	for r := range e.sim.Responses(liveSurvey) {
		if r.ResponseStatus == survey.StatusCompleted && r.DateCompleted != nil && !r.DateCompleted.After(e.now) {
			real = append(real, r)
		}
	}
	if len(real) < 2 {
		t.Fatalf("the emulator has %d completed responses", len(real))
	}
	yes := true
	received := func(r survey.Response) survey.WebhookEvent {
		return survey.WebhookEvent{SurveyID: liveSurvey, ResponseID: r.ResponseID, Completed: &yes, CompletedAt: r.DateCompleted}
	}
	has := func(id survey.GUID) bool {
		ok, err := e.wh.Inventory().HasResponse(context.Background(), liveSurvey, id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := e.process(t, survey.EventResponseReceived, received(real[0])); err != nil {
		t.Fatal(err)
	}
	if !has(real[0].ResponseID) {
		t.Fatal("a fetched response is not in the warehouse")
	}

	absent := func(i int) survey.WebhookEvent {
		return survey.WebhookEvent{SurveyID: liveSurvey, ResponseID: guid(900 + i), Completed: &yes}
	}
	for i := range missThreshold {
		wantPermanent(t, "an absent response", e.process(t, survey.EventResponseReceived, absent(i)), "not found (404) and never synced: no deletion written")
	}
	if gets := e.calls(sim.OpGetResponse); gets != 1+missThreshold {
		t.Fatalf("%d detail calls, want %d", gets, 1+missThreshold)
	}
	gets, lists := e.calls(sim.OpGetResponse), e.calls(sim.OpListResponses)
	wantPermanent(t, "an absent response of a flooded survey", e.process(t, survey.EventResponseReceived, absent(missThreshold)), "not listed by the service")
	if n := e.calls(sim.OpGetResponse); n != gets {
		t.Fatalf("a flooded survey's absent response cost %d detail calls", n-gets)
	}
	if n := e.calls(sim.OpListResponses); n != lists+1 {
		t.Fatalf("a flooded survey's event cost %d list calls, want 1 (its flags name one status)", n-lists)
	}
	if err := e.process(t, survey.EventResponseReceived, received(real[1])); err != nil {
		t.Fatalf("a listed response of a flooded survey: %v", err)
	}
	if !has(real[1].ResponseID) || e.calls(sim.OpListResponses) != lists+1 || e.calls(sim.OpGetResponse) != gets+1 {
		t.Fatalf("a listed response of a flooded survey: written %v, %d more list calls, %d more detail calls; want written, 0, 1",
			has(real[1].ResponseID), e.calls(sim.OpListResponses)-lists-1, e.calls(sim.OpGetResponse)-gets)
	}
	for i := range missThreshold + 1 {
		if has(guid(900 + i)) {
			t.Fatal("a row (a deletion) written for an absent response")
		}
	}
	added, _ := e.poller.state()
	if len(added) == 0 || slices.ContainsFunc(added, func(id int64) bool { return id != liveSurvey }) {
		t.Fatalf("surveys added to polling: %v", added)
	}
	// An id once absent is not fetched again without the check, even once
	// the survey is quiet again.
	e.setNow(e.now.Add(missWindow))
	gets = e.calls(sim.OpGetResponse)
	wantPermanent(t, "an id known absent", e.process(t, survey.EventResponseReceived, absent(0)), "not listed")
	if n := e.calls(sim.OpGetResponse); n != gets {
		t.Fatalf("an id known absent cost %d detail calls", n-gets)
	}
}

// A response the warehouse has whose detail now answers 404 (deleted at
// the service) is a deletion: written, the event processed; the same
// 404 for an id the warehouse never had writes nothing (the flood test).
func TestProcessResponseDeletedAtTheService(t *testing.T) {
	e := newProcessorEnv(t)
	var r survey.Response
	for r = range e.sim.Responses(liveSurvey) {
		if r.ResponseStatus == survey.StatusCompleted && r.DateCompleted != nil && !r.DateCompleted.After(e.now) {
			break
		}
	}
	yes := true
	ev := survey.WebhookEvent{SurveyID: liveSurvey, ResponseID: r.ResponseID, Completed: &yes, CompletedAt: r.DateCompleted}
	if err := e.process(t, survey.EventResponseReceived, ev); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.wh.Inventory().HasResponse(context.Background(), liveSurvey, r.ResponseID); err != nil || !ok {
		t.Fatalf("the response is not current after its webhook (%v, %v)", ok, err)
	}
	if err := e.sim.DeleteResponse(liveSurvey, r.ResponseID); err != nil {
		t.Fatal(err)
	}
	if err := e.process(t, survey.EventResponseReceived, ev); err != nil {
		t.Fatalf("a 404 for a response the warehouse has: %v, want its deletion written", err)
	}
	if ok, err := e.wh.Inventory().HasResponse(context.Background(), liveSurvey, r.ResponseID); err != nil || ok {
		t.Fatalf("the response deleted at the service is still current (%v, %v)", ok, err)
	}
}
