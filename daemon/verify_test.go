package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/survey"
)

// fakeService is what the verification loop's comparisons find, pass
// after pass: a script of findings per call of compare, and the contents
// that still differ at the second look. It records the repairs.
type fakeService struct {
	mu       sync.Mutex
	script   []finding // one per compare call; the last repeats
	calls    int
	samples  []int
	still    []survey.GUID // content differences a second read confirms
	err      error         // compare fails
	rereads  [][]survey.GUID
	listed   [][]string
	compared []time.Time
}

func (s *fakeService) compare(_ context.Context, _ int64, sample int) (finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sample)
	s.compared = append(s.compared, time.Now())
	if s.err != nil {
		return finding{Calls: 1}, s.err
	}
	f := s.script[min(s.calls, len(s.script)-1)]
	s.calls++
	// A copy: the loop narrows the finding in place.
	out := finding{Calls: f.Calls, Sampled: f.Sampled}
	for _, st := range f.Streams {
		st.Missing, st.Extra, st.Content = slices.Clone(st.Missing), slices.Clone(st.Extra), slices.Clone(st.Content)
		out.Streams = append(out.Streams, st)
	}
	return out, nil
}

// n is the number of comparisons so far.
func (s *fakeService) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.compared)
}

func (s *fakeService) recheck(_ context.Context, _ int64, ids []survey.GUID) ([]survey.GUID, int64, error) {
	var out []survey.GUID
	for _, id := range ids {
		if slices.Contains(s.still, id) {
			out = append(out, id)
		}
	}
	return out, int64(len(ids)), nil
}

func (s *fakeService) reread(_ context.Context, _ int64, ids []survey.GUID, listed []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rereads = append(s.rereads, ids)
	s.listed = append(s.listed, listed)
	return nil
}

func clean(service int64) finding {
	return finding{Calls: 2, Sampled: 3, Streams: []streamFinding{
		{Stream: "completed", Service: service, Warehouse: service}, {Stream: "partial", Service: 1, Warehouse: 1}}}
}

func gid(n int) survey.GUID { return survey.GUID(fmt.Sprintf("00000000-0000-0000-0000-%012d", n)) }

// loopHarness runs the verification loop on a fake service and a real
// history (a Parquet warehouse's _state/verify_runs.jsonl).
type loopHarness struct {
	svc   *fakeService
	v     *verifier
	reg   *prometheus.Registry
	wh    warehouse.Warehouse
	ready chan struct{}

	mu      sync.Mutex
	stretch float64
}

func (h *loopHarness) setStretch(f float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stretch = f
}

func newLoopHarness(t *testing.T, svc *fakeService, repair bool) *loopHarness {
	t.Helper()
	wh, err := parquet.OpenWarehouse(parquet.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wh.Close() })
	h := &loopHarness{svc: svc, reg: prometheus.NewRegistry(), wh: wh, ready: make(chan struct{}), stretch: 1}
	h.v = newVerifierLoop(verifierOptions{Interval: time.Hour, Sample: 10, Repair: repair, Recheck: 30 * time.Second,
		Streams: []string{"completed", "partial"}}, verifierDeps{
		compare: svc.compare, recheckContent: svc.recheck, reread: svc.reread,
		surveys: func() []int64 { return []int64{4574} },
		stretch: func() float64 { h.mu.Lock(); defer h.mu.Unlock(); return h.stretch },
		ready:   h.ready, history: wh.VerifyLog(),
	}, h.reg)
	return h
}

func (h *loopHarness) drift(stream, kind string) float64 {
	return testutil.ToFloat64(h.v.m.drift.WithLabelValues("4574", stream, kind))
}

func (h *loopHarness) passes(result string) float64 {
	return testutil.ToFloat64(h.v.m.passes.WithLabelValues(result))
}

// The loop waits for the poller's first pass, verifies every survey, then
// sleeps verify.interval stretched by the API budget; it stops with its
// context and leaves no goroutine.
func TestVerifyLoopSchedule(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		svc := &fakeService{script: []finding{clean(5)}}
		h := newLoopHarness(t, svc, true)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- h.v.run(ctx) }()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if svc.n() != 0 {
			t.Fatalf("verified %d times before the poller's first pass", svc.n())
		}
		close(h.ready)
		synctest.Wait()
		start := time.Now()
		time.Sleep(time.Hour - time.Second) // interval 1h: no pass yet
		synctest.Wait()
		if svc.n() != 0 {
			t.Fatalf("%d passes in the first hour, want 0 (the first comes an interval after the poller's first pass)", svc.n())
		}
		h.setStretch(2) // the budget stretches every interval from now
		time.Sleep(time.Second)
		synctest.Wait()
		if svc.n() != 1 {
			t.Fatalf("%d passes after an hour, want 1", svc.n())
		}
		time.Sleep(2*time.Hour - time.Second)
		synctest.Wait()
		if svc.n() != 1 {
			t.Fatalf("%d passes, want still 1 (the next comes 2h after the first)", svc.n())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if svc.n() != 2 || !svc.compared[1].Equal(start.Add(3*time.Hour)) {
			t.Fatalf("passes at %v, want the second 3h after the poller's first pass", svc.compared)
		}
		if svc.samples[0] != 10 {
			t.Errorf("sample %d, want verify.sample", svc.samples[0])
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if h.passes("clean") != 2 || h.passes("drift") != 0 {
			t.Errorf("passes clean %v drift %v", h.passes("clean"), h.passes("drift"))
		}
		if v := testutil.ToFloat64(h.v.m.lastClean.WithLabelValues("4574")); v != float64(start.Add(3*time.Hour).Unix()) {
			t.Errorf("last clean %v, want the second pass's end", v)
		}
		if v := testutil.ToFloat64(h.v.m.calls); v != 4 {
			t.Errorf("api calls %v, want 2 per pass", v)
		}
	})
}

// A difference that the second look a poll interval later no longer finds
// (a response completing while the pass ran) is no drift: nothing is
// repaired, the pass is clean.
func TestVerifyTransientDifferenceIsNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		moving := clean(5)
		moving.Streams[0].Missing = []survey.GUID{gid(1)}
		moving.Streams[0].Warehouse = 4
		moving.Streams[1].Content = []survey.GUID{gid(2)}
		svc := &fakeService{script: []finding{moving, clean(5)}}
		h := newLoopHarness(t, svc, true)
		start := time.Now()
		h.v.pass(context.Background(), 4574)
		if len(svc.compared) != 2 || svc.compared[1].Sub(start) != 30*time.Second || svc.samples[1] != 0 {
			t.Fatalf("compared at %v with samples %v, want a second look 30s (the poll interval) later without a sample", svc.compared, svc.samples)
		}
		if len(svc.rereads) != 0 || h.passes("clean") != 1 || h.passes("drift") != 0 || h.drift("completed", "missing") != 0 || h.drift("partial", "content") != 0 {
			t.Fatalf("rereads %v, clean %v, drift %v", svc.rereads, h.passes("clean"), h.passes("drift"))
		}
	})
}

// What persists is drift: the gauges show what the pass found (before the
// repair), the responses are read again (missing and changed ones with the
// stream that lists them, extra ones with none), the history records it;
// the next pass, clean, brings the gauges back to 0.
func TestVerifyDriftIsRepairedAndShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		drifted := clean(5)
		drifted.Streams[0].Missing = []survey.GUID{gid(1), gid(3)}
		drifted.Streams[0].Extra = []survey.GUID{gid(4)}
		drifted.Streams[0].Content = []survey.GUID{gid(5), gid(6)}
		second := clean(5)
		second.Streams[0].Missing = []survey.GUID{gid(1), gid(7)} // gid(3) resolved itself; gid(7) is new: counted at the next pass if it stays
		second.Streams[0].Extra = []survey.GUID{gid(4)}
		svc := &fakeService{script: []finding{drifted, second, clean(5)}, still: []survey.GUID{gid(5)}}
		h := newLoopHarness(t, svc, true)
		h.v.pass(context.Background(), 4574)
		if h.drift("completed", "missing") != 1 || h.drift("completed", "extra") != 1 || h.drift("completed", "content") != 1 || h.drift("partial", "missing") != 0 {
			t.Fatalf("drift missing %v extra %v content %v", h.drift("completed", "missing"), h.drift("completed", "extra"), h.drift("completed", "content"))
		}
		if h.passes("drift") != 1 {
			t.Fatalf("drift passes %v", h.passes("drift"))
		}
		wantIDs := []survey.GUID{gid(1), gid(5), gid(4)}
		wantListed := []string{"completed", "completed", ""}
		if len(svc.rereads) != 1 || !slices.Equal(svc.rereads[0], wantIDs) || !slices.Equal(svc.listed[0], wantListed) {
			t.Fatalf("rereads %v %v, want %v %v", svc.rereads, svc.listed, wantIDs, wantListed)
		}
		// 2 + 2 list calls, 2 detail calls of the second look, 3 re-reads.
		if v := testutil.ToFloat64(h.v.m.calls); v != 9 {
			t.Errorf("api calls %v, want 9", v)
		}
		sts, err := h.wh.VerifyLog().VerifyStates(context.Background())
		if err != nil || len(sts) != 1 || sts[0].Result != warehouse.VerifyDrift || !sts[0].LastClean.IsZero() {
			t.Fatalf("history: %+v, %v", sts, err)
		}
		c := sts[0].Latest[0]
		if c.Stream != "completed" || c.Missing != 1 || c.Extra != 1 || c.Content != 1 || c.Repaired != 3 || c.Method != warehouse.VerifyCounts || c.APICalls != 9 || c.Sampled != 3 {
			t.Errorf("completed row: %+v", c)
		}
		h.v.pass(context.Background(), 4574)
		if h.drift("completed", "missing") != 0 || h.drift("completed", "extra") != 0 || h.drift("completed", "content") != 0 || h.passes("clean") != 1 {
			t.Fatalf("after a clean pass: drift %v %v %v, clean %v", h.drift("completed", "missing"), h.drift("completed", "extra"), h.drift("completed", "content"), h.passes("clean"))
		}
		if testutil.ToFloat64(h.v.m.lastClean.WithLabelValues("4574")) != float64(time.Now().Unix()) {
			t.Error("last clean not set by the clean pass")
		}
	})
}

// verify.repair false measures only; a pass that cannot compare counts as
// an error and leaves the gauges as they were.
func TestVerifyWithoutRepairAndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		drifted := clean(5)
		drifted.Streams[1].Extra = []survey.GUID{gid(9)}
		svc := &fakeService{script: []finding{drifted}}
		h := newLoopHarness(t, svc, false)
		h.v.pass(context.Background(), 4574)
		if len(svc.rereads) != 0 || h.drift("partial", "extra") != 1 || h.passes("drift") != 1 {
			t.Fatalf("without repair: rereads %v, drift %v", svc.rereads, h.drift("partial", "extra"))
		}
		svc.err = errors.New("list completed: HTTP 503")
		h.v.pass(context.Background(), 4574)
		if h.passes("error") != 1 || h.drift("partial", "extra") != 1 {
			t.Fatalf("after an error: error passes %v, drift %v (unchanged)", h.passes("error"), h.drift("partial", "extra"))
		}
		sts, _ := h.wh.VerifyLog().VerifyStates(context.Background())
		if len(sts) != 1 || sts[0].Result != warehouse.VerifyError || sts[0].Latest[0].Error != "list completed: HTTP 503" || sts[0].Latest[0].Service != -1 {
			t.Fatalf("history after an error: %+v", sts)
		}
	})
}

// Reconcile, the full id comparison, reports into the same figures.
func TestReconcileReportsIntoVerifyFigures(t *testing.T) {
	h := newLoopHarness(t, &fakeService{script: []finding{clean(1)}}, true)
	t0 := time.Now().Add(-time.Minute)
	h.v.reconciled(poll.ReconcileReport{SurveyID: 4574, Started: t0, Finished: time.Now(), Calls: 7, Reread: 3,
		Streams: []poll.ReconcileStream{{Stream: "completed", Service: 10, Warehouse: 9, Missing: 2, Extra: 1}, {Stream: "partial", Service: 3, Warehouse: 3}}})
	if h.drift("completed", "missing") != 2 || h.drift("completed", "extra") != 1 || h.passes("drift") != 1 || testutil.ToFloat64(h.v.m.calls) != 7 {
		t.Fatalf("drift %v %v, passes %v", h.drift("completed", "missing"), h.drift("completed", "extra"), h.passes("drift"))
	}
	sts, err := h.wh.VerifyLog().VerifyStates(context.Background())
	if err != nil || len(sts) != 1 || sts[0].Latest[0].Method != warehouse.VerifyReconcile || sts[0].Latest[0].Repaired != 3 || sts[0].Latest[0].Service != 10 {
		t.Fatalf("history: %+v, %v", sts, err)
	}
	h.v.reconciled(poll.ReconcileReport{SurveyID: 4574, Started: t0, Calls: 2, Err: errors.New("list partial: HTTP 500"),
		Streams: []poll.ReconcileStream{{Stream: "completed", Service: -1, Warehouse: -1}, {Stream: "partial", Service: -1, Warehouse: -1}}})
	if h.passes("error") != 1 || h.drift("completed", "missing") != 2 {
		t.Fatalf("a failed reconcile: error passes %v, drift %v (unchanged)", h.passes("error"), h.drift("completed", "missing"))
	}
}

// After a restart the gauges start from the history: the last clean pass
// and what the latest pass found.
func TestVerifyGaugesSeededFromHistory(t *testing.T) {
	h := newLoopHarness(t, &fakeService{script: []finding{clean(1)}}, true)
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	runs := []warehouse.VerifyRun{
		{SurveyID: 4574, Stream: "completed", Method: warehouse.VerifyCounts, FinishedAt: t0, Result: warehouse.VerifyClean, PassResult: warehouse.VerifyClean},
		{SurveyID: 4574, Stream: "completed", Method: warehouse.VerifyCounts, FinishedAt: t0.Add(time.Hour), Missing: 4, Result: warehouse.VerifyDrift, PassResult: warehouse.VerifyDrift},
		{SurveyID: 99, Stream: "completed", Method: warehouse.VerifyCounts, FinishedAt: t0, Missing: 1, Result: warehouse.VerifyDrift, PassResult: warehouse.VerifyDrift},
	}
	if err := h.wh.VerifyLog().RecordVerifyRuns(context.Background(), runs); err != nil {
		t.Fatal(err)
	}
	h.v.seed(context.Background())
	if testutil.ToFloat64(h.v.m.lastClean.WithLabelValues("4574")) != float64(t0.Unix()) || h.drift("completed", "missing") != 4 {
		t.Fatalf("seeded: last clean %v, drift %v", testutil.ToFloat64(h.v.m.lastClean.WithLabelValues("4574")), h.drift("completed", "missing"))
	}
	if n := testutil.CollectAndCount(h.v.m.drift); n != 3 {
		t.Errorf("%d drift series, want 3 (survey 99 is not polled)", n)
	}
	// A survey no longer polled (a reload's surveys_exclude) loses its
	// gauges at the next pass.
	h.v.forget([]int64{77})
	if n := testutil.CollectAndCount(h.v.m.drift) + testutil.CollectAndCount(h.v.m.lastClean); n != 0 {
		t.Errorf("%d series left of a survey no longer polled", n)
	}
}
