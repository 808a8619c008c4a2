package webhookrx

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/permanent"
)

func surveyResponseBody(survey, i int) string {
	return fmt.Sprintf(`{"event_name":"response_received","survey_id":%d,"response_id":"DA453B67-791E-4D4D-9009-%012X","completed_at":"2022-08-21T10:30:00Z"}`, survey, i)
}

// surveyProc fails every event of the surveys in fail (transiently, or
// permanently when perm) and records the others.
type surveyProc struct {
	mu     sync.Mutex
	fail   map[int64]bool
	perm   bool
	calls  map[int64]int
	okAt   map[int64][]time.Time
	inProc atomic.Int64
	maxIn  atomic.Int64
	delay  time.Duration
}

func (p *surveyProc) Process(ctx context.Context, ev Event) error {
	n := p.inProc.Add(1)
	defer p.inProc.Add(-1)
	for {
		m := p.maxIn.Load()
		if n <= m || p.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	if p.delay > 0 {
		time.Sleep(p.delay)
	}
	id := ev.Parsed.SurveyID
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[id]++
	if p.fail[id] {
		err := fmt.Errorf("get response of survey %d: HTTP 503", id)
		if p.perm {
			return permanent.New("forbidden", errors.New("HTTP 403 Forbidden"))
		}
		return err
	}
	p.okAt[id] = append(p.okAt[id], time.Now())
	return nil
}

func (p *surveyProc) set(id int64, fail bool) { p.mu.Lock(); p.fail[id] = fail; p.mu.Unlock() }
func (p *surveyProc) ok(id int64) int         { p.mu.Lock(); defer p.mu.Unlock(); return len(p.okAt[id]) }
func (p *surveyProc) callsOf(id int64) int    { p.mu.Lock(); defer p.mu.Unlock(); return p.calls[id] }

// 300 events of a survey whose processing fails transiently, then events of
// another survey: the other survey's events are processed at once (the
// failing ones do not hold the workers), the failing survey is probed with
// one event per backoff (not 300 calls per round), and all its events go
// through once it recovers.
func TestFailingSurveyDoesNotHoldWorkers(t *testing.T) {
	o := testOptions(t, "")
	o.ProcessConcurrency = 8
	o.RetryInitial, o.RetryMax = 100*time.Millisecond, 400*time.Millisecond
	p := &surveyProc{fail: map[int64]bool{1: true}, calls: map[int64]int{}, okAt: map[int64][]time.Time{}}
	log := &memLog{}
	rx := start(t, o, p, log)
	for i := range 300 {
		if code, body, _ := post(t, rx.url, surveyResponseBody(1, i), nil); code != 200 {
			t.Fatalf("post %d: %d %s", i, code, body)
		}
	}
	t0 := time.Now()
	for i := range 20 {
		if code, _, _ := post(t, rx.url, surveyResponseBody(2, 1000+i), nil); code != 200 {
			t.Fatalf("post survey 2: %d", code)
		}
	}
	waitFor(t, "survey 2's events", func() bool { return p.ok(2) == 20 })
	took := time.Since(t0)
	if took > 2*time.Second {
		t.Errorf("survey 2's 20 events took %v behind survey 1's failing ones", took)
	}
	// Survey 1 is gated: a second of backoff costs a few probes, not 300
	// calls per round.
	before := p.callsOf(1)
	time.Sleep(time.Second)
	if probes := p.callsOf(1) - before; probes > 6 {
		t.Errorf("%d calls for survey 1 in 1 s while it fails: not one probe per backoff", probes)
	}
	p.set(1, false)
	waitFor(t, "survey 1's events after recovery", func() bool { return p.ok(1) == 300 })
	waitFor(t, "the log", func() bool { return len(log.all()) == 320 })
	retried := 0
	for _, e := range log.all() {
		if e.Outcome != OutcomeProcessed {
			t.Fatalf("outcome %+v", e)
		}
		if e.SurveyID == 1 && e.Attempts > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Error("no survey 1 event logged with more than one attempt")
	}
	waitFor(t, "empty spool", func() bool { return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 })
	t.Logf("survey 2 processed in %v behind 300 failing events; %d survey 1 calls in all", took.Round(time.Millisecond), p.callsOf(1))
}

// Permanent failures (a 403: the token cannot read that survey) end their
// events at once, logged as rejected with the error; the other survey's
// events flow.
func TestPermanentFailuresAreRejected(t *testing.T) {
	o := testOptions(t, "")
	o.ProcessConcurrency = 4
	p := &surveyProc{fail: map[int64]bool{1: true}, perm: true, calls: map[int64]int{}, okAt: map[int64][]time.Time{}}
	log := &memLog{}
	rx := start(t, o, p, log)
	for i := range 300 {
		post(t, rx.url, surveyResponseBody(1, i), nil)
	}
	for i := range 10 {
		post(t, rx.url, surveyResponseBody(2, 1000+i), nil)
	}
	waitFor(t, "all logged", func() bool { return len(log.all()) == 310 })
	rejected := 0
	for _, e := range log.all() {
		if e.SurveyID == 1 {
			if e.Outcome != OutcomeRejected || e.Attempts != 1 || e.Error == "" {
				t.Fatalf("survey 1 entry %+v", e)
			}
			rejected++
		}
	}
	if rejected != 300 || p.ok(2) != 10 || p.callsOf(1) != 300 {
		t.Fatalf("rejected %d, survey 2 processed %d, survey 1 calls %d", rejected, p.ok(2), p.callsOf(1))
	}
	if n := counter(t, rx.reg, "surveysync_webhook_events_total", "event", KindResponseReceived, "outcome", OutcomeRejected); n != 300 {
		t.Errorf("rejected counter %v", n)
	}
}

// The spool keeps only a window of events in memory: 5 000 events of ~1 KiB
// spooled while processing is stopped, with a 64 KiB memory window, hold at
// most the window (plus the events in the workers); the heap does not grow
// with them; after a restart they are read back from the files on demand and
// all processed once, in order.
func TestSpoolMemoryIsBounded(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.ProcessConcurrency = 1
	o.SpoolMemoryBytes = 64 << 10
	o.SegmentBytes = 256 << 10
	block := make(chan struct{})
	rec := newRecorder()
	rec.block = block
	rx := start(t, o, rec, nil)
	pad := fmt.Sprintf(`,"pad":"%0800d"}`, 0)
	const n = 5000
	bodies := make([]string, n)
	for i := range n {
		b := surveyResponseBody(4574, i)
		bodies[i] = b[:len(b)-1] + pad
	}
	var heapBefore runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapBefore)
	for i := range n {
		if code, body, _ := post(t, rx.url, bodies[i], nil); code != 200 {
			t.Fatalf("post %d: %d %s", i, code, body)
		}
	}
	mem := counter(t, rx.reg, "surveysync_webhook_spool_memory_bytes")
	spooledBytes := counter(t, rx.reg, "surveysync_webhook_spool_bytes")
	if mem > float64(o.SpoolMemoryBytes)+2<<10 || spooledBytes < 4<<20 {
		t.Fatalf("in memory %v bytes of %v spooled (window %d)", mem, spooledBytes, o.SpoolMemoryBytes)
	}
	var heapAfter runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapAfter)
	t.Logf("%d events, %.1f MiB spooled, %.0f KiB in memory; heap %+.1f MiB",
		n, spooledBytes/(1<<20), mem/1024, (float64(heapAfter.HeapAlloc)-float64(heapBefore.HeapAlloc))/(1<<20))
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}

	rec2 := newRecorder()
	rx2 := start(t, o, rec2, nil)
	waitFor(t, "all replayed events processed", func() bool { return len(rec2.processed()) == n })
	got := rec2.processed()
	// The first one may have been processed (and not marked) before the stop: compare bodies from the start.
	for i, ev := range got {
		if string(ev.Body) != bodies[i] {
			t.Fatalf("event %d out of order or altered", i)
		}
	}
	if m := counter(t, rx2.reg, "surveysync_webhook_spool_memory_bytes"); m > float64(o.SpoolMemoryBytes)+2<<10 {
		t.Errorf("memory %v after replay", m)
	}
	close(block)
}

// One event that keeps failing transiently neither holds its survey's
// other events nor is called in a loop: it waits for its own backoff.
func TestOneFailingEventDoesNotHoldItsSurvey(t *testing.T) {
	o := testOptions(t, "")
	o.ProcessConcurrency = 4
	o.RetryInitial, o.RetryMax = 50*time.Millisecond, 400*time.Millisecond
	var poisonCalls, okCalls atomic.Int64
	poison := fmt.Sprintf("%012x", 0)
	p := ProcessorFunc(func(ctx context.Context, ev Event) error {
		if strings.HasSuffix(string(ev.Parsed.ResponseID), poison) {
			poisonCalls.Add(1)
			return errors.New("HTTP 500")
		}
		okCalls.Add(1)
		return nil
	})
	rx := start(t, o, p, nil)
	post(t, rx.url, surveyResponseBody(1, 0), nil)
	waitFor(t, "the poison event's first call", func() bool { return poisonCalls.Load() == 1 })
	t0 := time.Now()
	for i := 1; i <= 50; i++ {
		post(t, rx.url, surveyResponseBody(1, i), nil)
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, "survey 1's other events", func() bool { return okCalls.Load() == 50 })
	took := time.Since(t0)
	time.Sleep(time.Second)
	// Backoff from 50 ms doubling to 400 ms: well under 15 calls in ~2 s.
	if n := poisonCalls.Load(); n > 15 {
		t.Errorf("the failing event was called %d times", n)
	}
	t.Logf("50 events behind a failing one of the same survey done %v after the first was posted; the failing one called %d times", took.Round(time.Millisecond), poisonCalls.Load())
	if counter(t, rx.reg, "surveysync_webhook_spool_events") != 1 {
		t.Error("the failing event should still be spooled")
	}
}

// An event's failed attempts are counted across a restart (retries.log).
func TestAttemptsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	var calls atomic.Int64
	failing := ProcessorFunc(func(ctx context.Context, ev Event) error {
		calls.Add(1)
		return errors.New("HTTP 503")
	})
	rx := start(t, o, failing, nil)
	post(t, rx.url, surveyResponseBody(1, 1), nil)
	waitFor(t, "three failed attempts", func() bool { return calls.Load() >= 3 })
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	failed := calls.Load()
	log := &memLog{}
	start(t, o, ProcessorFunc(func(context.Context, Event) error { return nil }), log)
	waitFor(t, "the event logged", func() bool { return len(log.all()) == 1 })
	if got := log.all()[0].Attempts; got != int(failed)+1 {
		t.Fatalf("attempts %d after %d failures before the restart", got, failed)
	}
}

// An event that failed before a restart waits, after it, for the next
// attempt time it was given (its own backoff survives the restart).
func TestFailedEventWaitsItsTimeAfterRestart(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.RetryInitial, o.RetryMax = 2*time.Second, 4*time.Second // the first wait: 1–2 s
	var calls atomic.Int64
	rx := start(t, o, ProcessorFunc(func(context.Context, Event) error {
		calls.Add(1)
		return errors.New("HTTP 503")
	}), nil)
	post(t, rx.url, surveyResponseBody(1, 1), nil)
	waitFor(t, "one failed attempt", func() bool { return calls.Load() == 1 })
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	var at atomic.Int64
	start(t, o, ProcessorFunc(func(context.Context, Event) error {
		at.CompareAndSwap(0, int64(time.Since(restarted)))
		return nil
	}), nil)
	waitFor(t, "the event processed", func() bool { return at.Load() != 0 })
	if d := time.Duration(at.Load()); d < 500*time.Millisecond {
		t.Fatalf("processed %v after the restart, before its next attempt time (≥ 1 s after the failure)", d)
	}
}
