package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

const (
	readableSurvey  = 4574
	forbiddenSurvey = 666
	missingSurvey   = 999
)

// stubAPI answers like the service for three surveys: 4574 is readable,
// the token gets 403 on 666, and 999 does not exist. Response details of
// 4574 whose id ends in ...DEAD answer 404.
func stubAPI(t *testing.T) (*httptest.Server, *sync.Map) {
	// Registered first, so it runs after every other cleanup: nothing the
	// receiver, the pipeline or the client started is left running.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
	var calls sync.Map // path → count
	errBody := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"meta": {"requestId": "req-%d", "http_status": %d, "errors": [{"error_message": %q}]}}`, status, status, msg)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1 surveys {id} responses [{rid}]
		if len(parts) < 4 || parts[1] != "surveys" || parts[3] != "responses" {
			errBody(w, 404, "Not found")
			return
		}
		switch parts[2] {
		case fmt.Sprint(forbiddenSurvey):
			errBody(w, 403, "Nemáte oprávnění k těmto datům")
			return
		case fmt.Sprint(missingSurvey):
			errBody(w, 404, "Survey not found")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if len(parts) == 4 {
			fmt.Fprint(w, `{"meta": {"requestId": "req-l", "http_status": 200}, "result": {"per_page": 1, "page": 1, "total": 0, "data": []}}`)
			return
		}
		rid := parts[4]
		if strings.HasSuffix(strings.ToLower(rid), "dead") {
			errBody(w, 404, "Response not found")
			return
		}
		fmt.Fprintf(w, `{"meta": {"requestId": "req-d", "http_status": 200}, "result": {"response_id": %q, "survey_id": %d,
			"survey_name": "Spokojenost", "date_created": "2026-11-02T09:14:33Z", "date_completed": "2026-11-02T09:21:05Z",
			"response_status": "completed", "pages": [{"id": 1, "questions": [{"id": 10, "type": "single", "title": "Q", "variable": "Q1",
			"answers": [{"choice_id": 101, "choice_label": "Ano", "value": 1}]}]}]}}`, rid, readableSurvey)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

type memEventLog struct {
	mu      sync.Mutex
	entries []webhookrx.LogEntry
}

func (l *memEventLog) LogEvents(_ context.Context, es []webhookrx.LogEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, es...)
	return nil
}

func (l *memEventLog) all() []webhookrx.LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]webhookrx.LogEntry(nil), l.entries...)
}

type webhookEnv struct {
	url    string
	book   *surveyBook
	log    *memEventLog
	dir    string
	poller *recordingPoller
}

// recordingPoller remembers the surveys the processor added to polling.
type recordingPoller struct {
	*poll.Poller
	mu    sync.Mutex
	added []int64
}

func (r *recordingPoller) AddSurvey(id int64) {
	r.mu.Lock()
	r.added = append(r.added, id)
	r.mu.Unlock()
	r.Poller.AddSurvey(id)
}

func (r *recordingPoller) addedSurveys() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.added...)
}

// startWebhooks wires the receiver, the processor, a pipeline into a
// Parquet sink and the API client against the stub, as the daemon does.
func startWebhooks(t *testing.T, apiURL string, inv ...warehouse.Inventory) *webhookEnv {
	t.Helper()
	return startWebhooksExcluding(t, apiURL, nil, inv...)
}

// startWebhooksExcluding is startWebhooks with surveys_exclude.
func startWebhooksExcluding(t *testing.T, apiURL string, exclude *excludeList, inv ...warehouse.Inventory) *webhookEnv {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := surveyapi.New(surveyapi.Options{BaseURL: apiURL + "/v1", Token: "test-token", UserAgent: "surveysync-test (test@example.cz)",
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxConcurrency: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	dir := t.TempDir()
	st, err := parquet.Open(parquet.Options{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	book, err := newSurveyBook(ctx, st, quiet)
	if err != nil {
		t.Fatal(err)
	}
	pipe := pipeline.New(pipeline.Options{MaxDelay: 20 * time.Millisecond, Logger: quiet}, client, st)
	// The readable survey was read lately, as a daemon that syncs it has:
	// its webhooks are fetched at once. (The stub lists nothing, so an
	// unknown survey's webhooks, checked against its listing first, would
	// all be absent.)
	checks := newWebhookChecks(client, time.Now)
	checks.markReadable(readableSurvey)
	poller := &recordingPoller{Poller: poll.New(poll.Options{Logger: quiet}, client, pipe, st, nil)}
	elog := &memEventLog{}
	rx, err := webhookrx.New(webhookrx.Options{Listen: "127.0.0.1:0", Path: "/hooks/0123456789abcdef", SpoolDir: t.TempDir(),
		ProcessConcurrency: 16, LogInterval: 10 * time.Millisecond, Logger: quiet},
		&webhookProcessor{pipe: pipe, poller: poller, surveys: book, api: client, inv: firstInv(inv), now: time.Now, exclude: exclude, checks: checks}, elog)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = pipe.Run(ctx) }()
	rxDone := make(chan struct{})
	go func() { defer wg.Done(); defer close(rxDone); _ = rx.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-rxDone
		pipe.CloseInput()
		wg.Wait()
	})
	for rx.Addr() == "" {
		time.Sleep(time.Millisecond)
	}
	return &webhookEnv{url: "http://" + rx.Addr() + "/hooks/0123456789abcdef", book: book, log: elog, dir: dir, poller: poller}
}

func (e *webhookEnv) post(t *testing.T, body string) {
	t.Helper()
	res, err := http.Post(e.url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("webhook answered %d", res.StatusCode)
	}
}

func responseEvent(surveyID int64, i int, suffix string) string {
	return fmt.Sprintf(`{"event_name": "response_received", "survey_id": %d, "response_id": "DA453B67-791E-4D4D-9009-%08X%s", "completed": true}`, surveyID, i, suffix)
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// 300 events for a survey the token cannot read (403) must not stop the
// other surveys' events (issue 12 part 4: they stopped all webhook
// processing): they end at once, recorded as rejected with the 403, and the
// readable survey's events are processed promptly.
func TestForbiddenSurveyEventsDoNotStopOthers(t *testing.T) {
	api, _ := stubAPI(t)
	e := startWebhooks(t, api.URL)
	for i := range 300 {
		e.post(t, responseEvent(forbiddenSurvey, i, "0000"))
	}
	t0 := time.Now()
	for i := range 20 {
		e.post(t, responseEvent(readableSurvey, i, "0000"))
	}
	count := func(survey int64, outcome string) int {
		n := 0
		for _, le := range e.log.all() {
			if le.SurveyID == survey && le.Outcome == outcome {
				n++
			}
		}
		return n
	}
	waitUntil(t, "the readable survey's events", 10*time.Second, func() bool { return count(readableSurvey, webhookrx.OutcomeProcessed) == 20 })
	took := time.Since(t0)
	waitUntil(t, "the forbidden survey's events", 10*time.Second, func() bool { return count(forbiddenSurvey, webhookrx.OutcomeRejected) == 300 })
	if took > 3*time.Second {
		t.Errorf("20 events of a readable survey took %v behind 300 forbidden ones", took)
	}
	for _, le := range e.log.all() {
		if le.SurveyID == forbiddenSurvey && (le.Attempts != 1 || !strings.Contains(le.Error, "403")) {
			t.Fatalf("forbidden event logged as %+v", le)
		}
	}
	for _, id := range e.book.active() {
		if id == forbiddenSurvey {
			t.Error("the forbidden survey joined the polling set")
		}
	}
	t.Logf("20 readable events processed %v after 300 forbidden ones were spooled", took.Round(time.Millisecond))
}

// survey_launched joins the polling set only for a survey the token can
// read; a response_received whose detail answers 404 for a response never
// synced writes no deletion (Parquet has no inventory).
func TestLaunchedUnreadableSurveyAndUnseen404(t *testing.T) {
	api, calls := stubAPI(t)
	e := startWebhooks(t, api.URL)
	for _, id := range []int64{readableSurvey, forbiddenSurvey, missingSurvey} {
		e.post(t, fmt.Sprintf(`{"event_name": "survey_launched", "survey_id": %d, "launched_at": "2022-08-21T10:30:00Z"}`, id))
	}
	e.post(t, responseEvent(readableSurvey, 1, "DEAD"))
	waitUntil(t, "the events", 10*time.Second, func() bool { return len(e.log.all()) == 4 })
	outcome := map[string]webhookrx.LogEntry{}
	for _, le := range e.log.all() {
		outcome[fmt.Sprint(le.EventName, le.SurveyID)] = le
	}
	if le := outcome[fmt.Sprint("survey_launched", readableSurvey)]; le.Outcome != webhookrx.OutcomeProcessed {
		t.Errorf("readable launch: %+v", le)
	}
	for _, id := range []int64{forbiddenSurvey, missingSurvey} {
		if le := outcome[fmt.Sprint("survey_launched", id)]; le.Outcome != webhookrx.OutcomeRejected || !strings.Contains(le.Error, "cannot read") {
			t.Errorf("launch of %d: %+v", id, le)
		}
	}
	active := map[int64]bool{}
	for _, id := range e.book.active() {
		active[id] = true
	}
	if !active[readableSurvey] || active[forbiddenSurvey] || active[missingSurvey] {
		t.Errorf("polling set from the surveys table: %v", active)
	}
	if n, ok := calls.Load(fmt.Sprintf("/v1/surveys/%d/responses", forbiddenSurvey)); !ok || n.(*atomic.Int64).Load() != 1 {
		t.Errorf("readability check calls for the forbidden survey: %v", n)
	}
	le := outcome[fmt.Sprint("response_received", readableSurvey)]
	if le.Outcome != webhookrx.OutcomeRejected || !strings.Contains(le.Error, "no deletion written") {
		t.Errorf("404 of an unseen response: %+v", le)
	}
	files := func() []string {
		var written []string
		filepath.Walk(e.dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".parquet") {
				written = append(written, p)
			}
			return nil
		})
		return written
	}
	if w := files(); len(w) != 0 {
		t.Errorf("a deletion was written for a response never seen: %v", w)
	}
	// The check above can fail: a readable response does write files.
	e.post(t, responseEvent(readableSurvey, 2, "0000"))
	waitUntil(t, "a written response", 10*time.Second, func() bool { return len(files()) > 0 })
}

func firstInv(inv []warehouse.Inventory) warehouse.Inventory {
	if len(inv) == 0 {
		return nil
	}
	return inv[0]
}

// fakeInventory knows one response of the readable survey.
type fakeInventory struct{ known survey.GUID }

func (f fakeInventory) CurrentResponses(_ context.Context, surveyID int64) (map[survey.GUID]string, error) {
	if surveyID != readableSurvey {
		return nil, nil
	}
	return map[survey.GUID]string{f.known: "completed"}, nil
}

func (f fakeInventory) HasResponse(_ context.Context, surveyID int64, id survey.GUID) (bool, error) {
	return surveyID == readableSurvey && id == f.known, nil
}

// With an inventory, a webhook 404 for a response the warehouse has is a
// deletion: it is written; one for a response it never had is not.
func TestWebhook404DeletesOnlyKnownResponses(t *testing.T) {
	api, _ := stubAPI(t)
	known := survey.GUID(strings.ToLower(fmt.Sprintf("DA453B67-791E-4D4D-9009-%08X%s", 7, "DEAD")))
	e := startWebhooks(t, api.URL, fakeInventory{known: known})
	e.post(t, responseEvent(readableSurvey, 8, "DEAD")) // never seen
	waitUntil(t, "the unseen 404", 10*time.Second, func() bool { return len(e.log.all()) == 1 })
	if le := e.log.all()[0]; le.Outcome != webhookrx.OutcomeRejected || !strings.Contains(le.Error, "no deletion written") {
		t.Fatalf("unseen 404: %+v", le)
	}
	// The detail may only lag the webhook: the readable survey is polled,
	// so the response is written once the service lists it.
	if got := e.poller.addedSurveys(); len(got) != 1 || got[0] != readableSurvey {
		t.Fatalf("surveys added to polling after an unseen 404: %v, want [%d]", got, readableSurvey)
	}
	e.post(t, responseEvent(readableSurvey, 7, "DEAD")) // in the inventory
	waitUntil(t, "the known 404", 10*time.Second, func() bool { return len(e.log.all()) == 2 })
	if le := e.log.all()[1]; le.Outcome != webhookrx.OutcomeProcessed {
		t.Fatalf("known 404: %+v", le)
	}
	var written []string
	filepath.Walk(e.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".parquet") {
			written = append(written, p)
		}
		return nil
	})
	if len(written) == 0 {
		t.Fatal("the deletion of a known response was not written")
	}
}

// Events of a survey in surveys_exclude are acknowledged and dropped: no
// API call, no polling, no row, counted in the metric; the others go on.
func TestExcludedSurveyEventsAreDropped(t *testing.T) {
	api, calls := stubAPI(t)
	reg := prometheus.NewRegistry()
	x := newExcludeList([]int64{readableSurvey}, slog.New(slog.DiscardHandler), reg)
	e := startWebhooksExcluding(t, api.URL, x)
	e.post(t, fmt.Sprintf(`{"event_name": "survey_launched", "survey_id": %d, "launched_at": "2022-08-21T10:30:00Z"}`, readableSurvey))
	for i := range 3 {
		e.post(t, responseEvent(readableSurvey, i, "0000"))
	}
	waitUntil(t, "the events", 10*time.Second, func() bool { return len(e.log.all()) == 4 })
	for _, le := range e.log.all() {
		if le.Outcome != webhookrx.OutcomeProcessed {
			t.Errorf("an excluded survey's event ended as %+v: want acknowledged", le)
		}
	}
	if got := e.poller.addedSurveys(); len(got) != 0 {
		t.Errorf("excluded survey added to polling: %v", got)
	}
	if len(e.book.active()) != 0 {
		t.Errorf("excluded survey in the surveys table: %v", e.book.active())
	}
	n := 0
	calls.Range(func(_, _ any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d API paths called for an excluded survey", n)
	}
	if v := testutil.ToFloat64(x.dropped.WithLabelValues(webhookrx.KindResponseReceived)); v != 3 {
		t.Errorf("surveysync_webhook_events_excluded_total{event=response_received} = %v, want 3", v)
	}
	// A reload that takes it out of the list lets its events in again.
	x.set(nil)
	e.post(t, fmt.Sprintf(`{"event_name": "survey_launched", "survey_id": %d, "launched_at": "2022-08-22T10:30:00Z"}`, readableSurvey))
	waitUntil(t, "the survey added", 10*time.Second, func() bool { return len(e.poller.addedSurveys()) == 1 })
}
