// Package webhooke2e measures the webhook path end to end: the emulator
// sends response_received on the service's (scaled) schedule, webhookrx
// spools it, a Processor hands it to the pipeline (fetch through surveyapi,
// flatten, batch, write to ClickHouse) while a backfill of another survey
// runs through the same pipeline, and the test polls responses_current until
// the row is visible. TestTwoDaemonsOneRowPerResponse puts two receivers
// with their own spools and pipelines behind one URL. Both need a ClickHouse server
// (SURVEYSYNC_TEST_CLICKHOUSE_ADDR) and skips without one.
//
//	SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000 go test -run WebhookToRow -v ./bench/webhooke2e
//
// E2E_LIVE (200) and E2E_BACKFILL (10 000) set the sizes, E2E_SEPARATE=1
// gives the webhooks their own pipeline (=2: and their own API client), E2E_STRICT=1 fails on missed
// latency targets (p50 < 1 s, p99 < 3 s) instead of logging them.
package webhooke2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/internal/testkit/faultproxy"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	backfillSurvey = 4574
	liveSurvey     = 4575
)

func TestWebhookToRowLatency(t *testing.T) {
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	if testing.Short() {
		t.Skip("end-to-end benchmark")
	}
	live, backfill := envInt("E2E_LIVE", 200), envInt("E2E_BACKFILL", 10000)
	interval := 50 * time.Millisecond // one live response every 50 ms: 20/s
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// ClickHouse, on a fresh database.
	var rb [6]byte
	rand.Read(rb[:])
	db := "test_webhooke2e_" + hex.EncodeToString(rb[:])
	sink, err := clickhouse.Open(ctx, clickhouse.Options{Addr: []string{addr}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sink.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
		sink.Close()
	}()
	wl := clickhouse.NewWebhookLog(sink)
	eventLog := wl

	// The pipeline, fed by the receiver's Processor and by the backfill.
	// pl carries the backfill; whpl the webhooks: the same pipeline, or with
	// E2E_SEPARATE=1 a second one on the same sink (a fast lane).
	var pl, whpl *pipeline.Pipeline
	var procMu sync.Mutex
	var procDur, recvLag []time.Duration
	proc := webhookrx.ProcessorFunc(func(ctx context.Context, ev webhookrx.Event) error {
		if ev.Kind() != webhookrx.KindResponseReceived {
			return nil
		}
		t0 := time.Now()
		defer func() {
			procMu.Lock()
			procDur = append(procDur, time.Since(t0))
			recvLag = append(recvLag, t0.Sub(ev.ReceivedAt))
			procMu.Unlock()
		}()
		done := make(chan error, 1)
		err := whpl.Submit(ctx, pipeline.Ref{SurveyID: ev.Parsed.SurveyID, ResponseID: ev.Parsed.ResponseID, Source: "webhook", Urgent: true, // as cmd/surveysync's processor
			Done: func(err error) { done <- err }})
		if err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	rx, err := webhookrx.New(webhookrx.Options{
		Listen: "127.0.0.1:0", Path: "/hooks/e2e-0123456789abcdef", SpoolDir: t.TempDir(),
	}, proc, eventLog)
	if err != nil {
		t.Fatal(err)
	}

	// The emulator: the survey being backfilled, and the live one.
	var s *sim.Sim
	rxCtx, rxStop := context.WithCancel(context.Background())
	rxDone := make(chan error, 1)
	go func() { rxDone <- rx.Run(rxCtx) }()
	for rx.Addr() == "" {
		time.Sleep(time.Millisecond)
	}
	s, err = sim.New(sim.Options{
		Surveys: []sim.SurveySpec{
			{ID: backfillSurvey, Responses: backfill, Interval: time.Second},
			{ID: liveSurvey, Responses: 0},
		},
		WebhookURL:      "http://" + rx.Addr() + "/hooks/e2e-0123456789abcdef",
		WebhookSchedule: []time.Duration{0, 30 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, 36 * time.Second, 864 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(s.Handler())
	client, err := surveyapi.New(surveyapi.Options{BaseURL: api.URL + "/v1", Token: "e2e", UserAgent: "surveysync-e2e (ops@example.com)", MaxConcurrency: 32})
	if err != nil {
		t.Fatal(err)
	}
	plReg := prometheus.NewRegistry()
	pl = pipeline.New(pipeline.Options{MaxDelay: 200 * time.Millisecond, Registerer: plReg}, client, sink)
	whpl = pl
	separate := os.Getenv("E2E_SEPARATE") != "" && os.Getenv("E2E_SEPARATE") != "0"
	if separate {
		whClient := client
		if os.Getenv("E2E_SEPARATE") == "2" { // its own API client too
			if whClient, err = surveyapi.New(surveyapi.Options{BaseURL: api.URL + "/v1", Token: "e2e", UserAgent: "surveysync-e2e (ops@example.com)"}); err != nil {
				t.Fatal(err)
			}
			defer whClient.Close()
		}
		whpl = pipeline.New(pipeline.Options{MaxDelay: 100 * time.Millisecond}, whClient, sink)
	}
	plCtx, plStop := context.WithCancel(context.Background())
	plDone := make(chan error, 2)
	go func() { plDone <- pl.Run(plCtx) }()
	if separate {
		go func() { plDone <- whpl.Run(plCtx) }()
	}
	defer func() {
		// Senders first, then the receiver (its in-flight Process calls
		// finish through the running pipeline), then the pipeline.
		s.Close()
		rxStop()
		if err := <-rxDone; err != nil {
			t.Errorf("receiver: %v", err)
		}
		pl.CloseInput()
		whpl.CloseInput()
		for range 1 + btoi(separate) {
			if err := <-plDone; err != nil {
				t.Errorf("pipeline: %v", err)
			}
		}
		plStop()
		client.Close()
		api.Close()
	}()

	// The backfill: every response of the first survey, as the poller would.
	var backfilled atomic.Int64
	var bfWG sync.WaitGroup
	bfWG.Add(1)
	go func() {
		defer bfWG.Done()
		for r := range s.Responses(backfillSurvey) {
			err := pl.Submit(ctx, pipeline.Ref{SurveyID: backfillSurvey, ResponseID: r.ResponseID, Source: "poll",
				Done: func(err error) {
					if err == nil {
						backfilled.Add(1)
					}
				}})
			if err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); bfWG.Wait() }()

	// Live responses, one per interval; the watcher polls responses_current.
	var mu sync.Mutex
	sent := map[string]time.Time{}
	seen := map[string]time.Duration{}
	var queryDur []time.Duration
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		q := fmt.Sprintf("SELECT toString(response_id) FROM %s.responses_current WHERE survey_id = %d", db, liveSurvey)
		for {
			q0 := time.Now()
			rows, err := sink.Conn().Query(ctx, q)
			if err != nil {
				t.Errorf("watch: %v", err)
				return
			}
			now := time.Now()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					t.Errorf("watch: %v", err)
				}
				mu.Lock()
				if at, ok := sent[id]; ok {
					if _, dup := seen[id]; !dup {
						seen[id] = now.Sub(at)
					}
				}
				mu.Unlock()
			}
			rows.Close()
			qd := time.Since(q0)
			mu.Lock()
			queryDur = append(queryDur, qd)
			mu.Unlock()
			mu.Lock()
			all := len(seen) == live
			mu.Unlock()
			if all || ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second) // let the backfill get going
	start := time.Now()
	for range live {
		mu.Lock()
		r, err := s.AddResponse(liveSurvey, survey.Response{})
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		sent[strings.ToLower(string(r.ResponseID))] = time.Now()
		mu.Unlock()
		time.Sleep(interval)
	}
	<-watchDone
	elapsed := time.Since(start)
	mu.Lock()
	lat := make([]time.Duration, 0, len(seen))
	for _, d := range seen {
		lat = append(lat, d)
	}
	mu.Unlock()
	if len(lat) != live {
		t.Fatalf("%d of %d live responses became visible", len(lat), live)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("separate webhook pipeline: %q", os.Getenv("E2E_SEPARATE"))
	t.Logf("webhook → row in responses_current: %d responses at %.0f/s during a backfill of %d (%d written meanwhile): p50 %s, p99 %s, max %s",
		live, float64(live)/elapsed.Seconds(), backfill, backfilled.Load(), p50.Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	pct := func(d []time.Duration) string {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		if len(d) == 0 {
			return "-"
		}
		return fmt.Sprintf("p50 %s p99 %s", d[len(d)/2].Round(time.Millisecond), d[len(d)*99/100].Round(time.Millisecond))
	}
	if mfs, err := plReg.Gather(); err == nil {
		for _, mf := range mfs {
			if strings.HasSuffix(mf.GetName(), "_seconds") && mf.GetMetric()[0].GetHistogram() != nil {
				h := mf.GetMetric()[0].GetHistogram()
				t.Logf("backfill pipeline %s: %d, mean %.3fs", mf.GetName(), h.GetSampleCount(), h.GetSampleSum()/float64(max(h.GetSampleCount(), 1)))
			}
		}
	}
	procMu.Lock()
	t.Logf("parts: Process (submit→durable) %s; receive→Process %s; watcher query %s", pct(procDur), pct(recvLag), pct(queryDur))
	procMu.Unlock()
	if p50 > time.Second || p99 > 3*time.Second {
		// Timing depends on the machine: fail only when asked to.
		report := t.Logf
		if os.Getenv("E2E_STRICT") == "1" {
			report = t.Errorf
		}
		report("targets missed: p50 %s (< 1s), p99 %s (< 3s)", p50, p99)
	}
	// Every live event is in the raw log once it is processed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n uint64
		row := sink.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.webhook_events WHERE survey_id = %d", db, liveSurvey))
		if err := row.Scan(&n); err != nil {
			t.Fatal(err)
		}
		if int(n) >= live || time.Now().After(deadline) {
			if int(n) < live {
				t.Errorf("webhook_events has %d rows for the live survey, want %d", n, live)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err == nil && v > 0 {
		return v
	}
	return def
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// daemon is the webhook half of one surveysync process: a receiver with
// its own spool, a pipeline and an API client, writing to the shared
// ClickHouse database.
type daemon struct {
	written atomic.Int64 // response_received events whose rows are durable
	rx      *webhookrx.Receiver
	pl      *pipeline.Pipeline
	client  *surveyapi.Client
	stop    func() error
}

func startDaemon(t *testing.T, apiURL string, sink *clickhouse.Sink) *daemon {
	t.Helper()
	client, err := surveyapi.New(surveyapi.Options{BaseURL: apiURL + "/v1", Token: "e2e", UserAgent: "surveysync-e2e (ops@example.com)"})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{client: client, pl: pipeline.New(pipeline.Options{MaxDelay: 100 * time.Millisecond}, client, sink)}
	proc := webhookrx.ProcessorFunc(func(ctx context.Context, ev webhookrx.Event) error {
		if ev.Kind() != webhookrx.KindResponseReceived {
			return nil
		}
		done := make(chan error, 1)
		if err := d.pl.Submit(ctx, pipeline.Ref{SurveyID: ev.Parsed.SurveyID, ResponseID: ev.Parsed.ResponseID, Source: "webhook", Urgent: true, // as cmd/surveysync's processor
			Done: func(err error) { done <- err }}); err != nil {
			return err
		}
		select {
		case err := <-done:
			if err == nil {
				d.written.Add(1)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	d.rx, err = webhookrx.New(webhookrx.Options{Path: "/hooks/e2e-0123456789abcdef", SpoolDir: t.TempDir()}, proc, nil)
	if err != nil {
		t.Fatal(err)
	}
	rxCtx, rxStop := context.WithCancel(context.Background())
	rxDone, plDone := make(chan error, 1), make(chan error, 1)
	go func() { rxDone <- d.rx.Run(rxCtx) }()
	go func() { plDone <- d.pl.Run(context.Background()) }()
	for d.rx.Ready() != nil {
		time.Sleep(time.Millisecond)
	}
	d.stop = func() error {
		rxStop()
		err := <-rxDone
		d.pl.CloseInput()
		if perr := <-plDone; err == nil {
			err = perr
		}
		client.Close()
		return err
	}
	return d
}

// balancer stands for a load balancer in front of two daemons that sends an
// event's first attempt to the first daemon and loses its answer, and the
// service's retry to the second: every event is kept and processed by
// both.
type balancer struct {
	backends [2]http.Handler
	mu       sync.Mutex
	seen     map[[32]byte]bool
}

func (lb *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	key := sha256.Sum256(body)
	lb.mu.Lock()
	first := !lb.seen[key]
	lb.seen[key] = true
	lb.mu.Unlock()
	if first {
		lb.backends[0].ServeHTTP(httptest.NewRecorder(), r) // kept, but the 200 is lost
		http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
		return
	}
	lb.backends[1].ServeHTTP(w, r)
}

// Two daemons behind one URL, each event delivered to both: still one row
// per response in responses_current.
func TestTwoDaemonsOneRowPerResponse(t *testing.T) {
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rb [6]byte
	rand.Read(rb[:])
	db := "test_webhooke2e_" + hex.EncodeToString(rb[:])
	sink, err := clickhouse.Open(ctx, clickhouse.Options{Addr: []string{addr}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sink.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
		sink.Close()
	}()

	lb := &balancer{seen: map[[32]byte]bool{}}
	front := httptest.NewServer(lb)
	defer front.Close()
	s, err := sim.New(sim.Options{
		Surveys:         []sim.SurveySpec{{ID: liveSurvey, Responses: 0}},
		WebhookURL:      front.URL + "/hooks/e2e-0123456789abcdef",
		WebhookSchedule: []time.Duration{0, 30 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, 36 * time.Second, 864 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(s.Handler())
	defer api.Close()
	a, b := startDaemon(t, api.URL, sink), startDaemon(t, api.URL, sink)
	lb.backends = [2]http.Handler{a.rx.Handler(), b.rx.Handler()}

	const n = 60
	for range n {
		if _, err := s.AddResponse(liveSurvey, survey.Response{}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(q string) (uint64, uint64) {
		var c, u uint64
		if err := sink.Conn().QueryRow(ctx, q).Scan(&c, &u); err != nil {
			t.Fatal(err)
		}
		return c, u
	}
	deadline := time.Now().Add(time.Minute)
	for a.written.Load()+b.written.Load() < 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("written %d + %d responses, want %d (each event processed by both daemons)", a.written.Load(), b.written.Load(), 2*n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Close()
	if err := a.stop(); err != nil {
		t.Error(err)
	}
	if err := b.stop(); err != nil {
		t.Error(err)
	}
	rows, ids := count(fmt.Sprintf("SELECT count(), uniqExact(response_id) FROM %s.responses_current WHERE survey_id = %d", db, liveSurvey))
	if rows != n || ids != n {
		t.Fatalf("responses_current: %d rows, %d distinct responses; want %d and %d", rows, ids, n, n)
	}
	for _, d := range s.WebhookDeliveries() {
		if d.GaveUp {
			t.Errorf("event %d given up", d.Event)
		}
	}
	t.Logf("%d events, processed %d times by daemon A and %d times by daemon B: %d rows in responses_current", n, a.written.Load(), b.written.Load(), rows)
}

// chProxy forwards TCP to ClickHouse and can be taken down: while down it
// cuts every open connection and refuses new ones, as a ClickHouse outage
// looks to the daemon.
// ClickHouse down: webhooks are still accepted and stay spooled; once it
// is back, every response is written and every event logged.
func TestClickHouseDownEventsSpooledThenWritten(t *testing.T) {
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proxy := faultproxyNew(t, addr)
	defer proxy.Close()
	var rb [6]byte
	rand.Read(rb[:])
	db := "test_webhooke2e_" + hex.EncodeToString(rb[:])
	sink, err := clickhouse.Open(ctx, clickhouse.Options{Addr: []string{proxy.Addr()}, Database: db, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := clickhouse.Open(ctx, clickhouse.Options{Addr: []string{addr}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := direct.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
		direct.Close()
		sink.Close()
	}()

	s, err := sim.New(sim.Options{Surveys: []sim.SurveySpec{{ID: liveSurvey, Responses: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := httptest.NewServer(s.Handler())
	defer api.Close()
	client, err := surveyapi.New(surveyapi.Options{BaseURL: api.URL + "/v1", Token: "e2e", UserAgent: "surveysync-e2e (ops@example.com)"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	pl := pipeline.New(pipeline.Options{MaxDelay: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond}, client, sink)
	plDone := make(chan error, 1)
	go func() { plDone <- pl.Run(context.Background()) }()
	proc := webhookrx.ProcessorFunc(func(ctx context.Context, ev webhookrx.Event) error {
		done := make(chan error, 1)
		if err := pl.Submit(ctx, pipeline.Ref{SurveyID: ev.Parsed.SurveyID, ResponseID: ev.Parsed.ResponseID, Source: "webhook", Urgent: true, // as cmd/surveysync's processor
			Done: func(err error) { done <- err }}); err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	reg := prometheus.NewRegistry()
	rx, err := webhookrx.New(webhookrx.Options{
		Listen: "127.0.0.1:0", Path: "/hooks/e2e-0123456789abcdef", SpoolDir: t.TempDir(), Registerer: reg,
		RetryMax: 200 * time.Millisecond, LogInterval: 50 * time.Millisecond,
	}, proc, clickhouse.NewWebhookLog(sink))
	if err != nil {
		t.Fatal(err)
	}
	rxCtx, rxStop := context.WithCancel(context.Background())
	rxDone := make(chan error, 1)
	go func() { rxDone <- rx.Run(rxCtx) }()
	defer func() {
		rxStop()
		if err := <-rxDone; err != nil {
			t.Error(err)
		}
		pl.CloseInput()
		<-plDone
	}()
	for rx.Addr() == "" {
		time.Sleep(time.Millisecond)
	}
	url := "http://" + rx.Addr() + "/hooks/e2e-0123456789abcdef"

	proxy.SetDown(true)
	const n = 30
	for range n {
		r, err := s.AddResponse(liveSurvey, survey.Response{})
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"event_name":"response_received","survey_id":%d,"response_id":"%s","completed":true}`,
			liveSurvey, strings.ToUpper(string(r.ResponseID)))
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("webhook while ClickHouse is down: %d, want 200 (spooled)", resp.StatusCode)
		}
	}
	time.Sleep(time.Second)
	if v := gaugeValue(t, reg, "surveysync_webhook_spool_events"); v != n {
		t.Fatalf("spool_events while ClickHouse is down = %v, want %d", v, n)
	}
	proxy.SetDown(false)
	count := func(q string) uint64 {
		var c uint64
		if err := direct.Conn().QueryRow(ctx, q).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(time.Minute)
	for {
		rows := count(fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE survey_id = %d", db, liveSurvey))
		logged := count(fmt.Sprintf("SELECT uniqExact(event_id) FROM %s.webhook_events WHERE survey_id = %d", db, liveSurvey))
		spooled := gaugeValue(t, reg, "surveysync_webhook_spool_events")
		if rows == n && logged == n && spooled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after ClickHouse came back: %d rows, %d logged events, %v still spooled; want %d, %d, 0", rows, logged, spooled, n, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gaugeValue reads the value of an unlabelled gauge from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func faultproxyNew(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
