package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// Which surveys are polled, and the surveys table behind it, tested on
// a Parquet warehouse in a temporary folder.

func openParquet(t *testing.T, dir string) warehouse.Warehouse {
	t.Helper()
	cfg := config.Default()
	cfg.Parquet.Dir = dir
	wh, err := openWarehouse(context.Background(), cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), true)
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

// The polling set is the configured surveys, then those the surveys table
// knows and has not seen end, less surveys_exclude, each once; the table
// is read back after a restart.
func TestPollingSetAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wh := openParquet(t, dir)
	book, err := newSurveyBook(ctx, wh, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range []int64{3, 10, 2} { // configured, learned, excluded
		if err := book.update(ctx, id, func(s *pipeline.SurveyInfo) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := book.update(ctx, 11, func(s *pipeline.SurveyInfo) { s.EndedAt = &ended }); err != nil {
		t.Fatal(err)
	}
	book.seen(12, "Spokojenost") // saved at the next flush only
	cfg := &config.Config{Surveys: []int64{1, 2, 3}, SurveysExclude: []int64{2}}
	if got := pollingSet(cfg, book); !slices.Equal(got, []int64{1, 3, 10, 12}) && !slices.Equal(got, []int64{1, 3, 12, 10}) {
		t.Fatalf("polling set %v, want 1 3 then 10 and 12", got)
	}
	if err := wh.Close(); err != nil {
		t.Fatal(err)
	}

	wh = openParquet(t, dir)
	defer wh.Close()
	again, err := newSurveyBook(ctx, wh, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := pollingSet(cfg, again); !slices.Equal(got, []int64{1, 3, 10}) {
		t.Fatalf("polling set after a restart %v, want [1 3 10] (12 was never flushed)", got)
	}
	if got := again.ended(); !slices.Equal(got, []int64{11}) {
		t.Fatalf("ended surveys after a restart: %v", got)
	}
	if !again.has(2) || !again.has(11) || again.has(12) {
		t.Fatal("the surveys table read back knows the wrong surveys")
	}
}

// flakyStore fails SaveSurveys while fail is set: a warehouse that stops
// answering mid-write is hard to provoke on a Parquet folder run as root.
type flakyStore struct {
	pipeline.SurveyStore
	fail bool
}

func (f *flakyStore) SaveSurveys(ctx context.Context, rows []pipeline.SurveyInfo) error {
	if f.fail {
		return errors.New("disk full")
	}
	return f.SurveyStore.SaveSurveys(ctx, rows)
}

// A webhook's change is saved before update returns, or the error names
// the survey; what failed to save (and what seen learned) is saved by
// the next flush, and once more when run stops.
func TestSurveyBookSavesWhatFailed(t *testing.T) {
	ctx := context.Background()
	wh := openParquet(t, t.TempDir())
	defer wh.Close()
	store := &flakyStore{SurveyStore: wh, fail: true}
	book, err := newSurveyBook(ctx, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = book.update(ctx, 5, func(s *pipeline.SurveyInfo) {})
	if err == nil || !strings.Contains(err.Error(), "save survey 5: disk full") {
		t.Fatalf("update while the store fails: %v", err)
	}
	if err := book.flush(ctx); err == nil {
		t.Fatal("flush while the store fails reported no error")
	}
	store.fail = false
	book.seen(6, "Nábor")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- book.run(runCtx, time.Hour) }() // only the stop flushes
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, err := wh.LoadSurveys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[int64]string{}
	for _, r := range rows {
		names[r.SurveyID] = r.Name
	}
	if _, ok := names[5]; !ok || names[6] != "Nábor" || len(names) != 2 {
		t.Fatalf("surveys saved: %v, want 5 and 6 (Nábor)", names)
	}
}

// A reload adds the surveys that join the polling set (newly configured,
// or no longer excluded), excludes what surveys_exclude names (webhooks
// of it are dropped from then on), and tells the webhook checks the
// configured surveys (never rate-limited as unknown).
func TestReloadAppliesSurveys(t *testing.T) {
	ctx := context.Background()
	wh := openParquet(t, t.TempDir())
	defer wh.Close()
	book, err := newSurveyBook(ctx, wh, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{3, 4} {
		if err := book.update(ctx, id, func(*pipeline.SurveyInfo) {}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	d := &parts{book: book, poller: poll.New(poll.Options{Logger: slog.New(slog.DiscardHandler)}, nil, nil, wh, nil),
		exclude: newExcludeList([]int64{3}, slog.New(slog.DiscardHandler), reg), hooks: newWebhookChecks(&listStub{}, time.Now)}
	cur := &config.Config{Surveys: []int64{1, 2}, SurveysExclude: []int64{3}}
	next := &config.Config{Surveys: []int64{1, 5}, SurveysExclude: []int64{4}}
	if got := d.applySurveys(cur, next); !slices.Equal(got, []int64{5, 3}) {
		t.Fatalf("surveys added by the reload: %v, want [5 3]", got)
	}
	if d.exclude.has(3) || !d.exclude.has(4) {
		t.Fatal("surveys_exclude not replaced")
	}
	if !d.exclude.drop(4, "response_received", "ev-1") || d.exclude.drop(3, "response_received", "ev-2") {
		t.Fatal("webhooks of the wrong survey dropped")
	}
	if v := testutil.ToFloat64(d.exclude.dropped.WithLabelValues("response_received")); v != 1 {
		t.Fatalf("surveysync_webhook_events_excluded_total = %v, want 1", v)
	}
	for range 2 * unknownBurst {
		if err := d.hooks.admit(5, false); err != nil {
			t.Fatalf("a survey configured by the reload rate-limited as unknown: %v", err)
		}
	}
}

// A survey the token cannot read is named with the status it answered,
// one per line of the one-shot run's error, in order, with the fix; any
// other error does not make a survey unreadable.
func TestUnreadableSurveysAreNamed(t *testing.T) {
	s, err := sim.New(sim.Options{Token: "test-token", Surveys: []sim.SurveySpec{{ID: 666, Responses: 1, Seed: 1}, {ID: 667, Responses: 1, Seed: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c, err := surveyapi.New(surveyapi.Options{BaseURL: srv.URL + "/v1", Token: "test-token", UserAgent: "surveysync-test (test@example.cz)",
		MaxRetries: -1, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, f := range []sim.Fault{{Op: sim.OpListResponses, Kind: "403", Survey: 666}, {Op: sim.OpListResponses, Kind: "503", Survey: 667}} {
		if err := s.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}
	list := func(id int64) error {
		_, err := c.ListResponses(context.Background(), id, survey.ListQuery{Page: 1, PerPage: 1})
		return err
	}
	forbidden, missing, down := list(666), list(999), list(667)
	if !surveyUnreadable(forbidden) || !surveyUnreadable(missing) || surveyUnreadable(down) || surveyUnreadable(nil) {
		t.Fatalf("unreadable: 403 %v, 404 %v, 503 %v", surveyUnreadable(forbidden), surveyUnreadable(missing), surveyUnreadable(down))
	}
	got := errUnreadableSurveys(map[int64]error{999: missing, 666: forbidden}).Error()
	want := "survey 666: forbidden (the token's account may not read it) (HTTP 403); survey 999: not found (HTTP 404): check the ids in surveys and the token's account"
	if got != want {
		t.Fatalf("one-shot error:\n%s\nwant\n%s", got, want)
	}
	if got := describeUnreadable(errors.New("eof")); got != "cannot be read" {
		t.Fatalf("an error without a status: %q", got)
	}
}
