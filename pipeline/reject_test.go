package pipeline

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

// memRejects is a RejectStore in memory; failures makes the first writes
// fail (transiently), refuse makes every write fail permanently.
type memRejects struct {
	mu       sync.Mutex
	recs     []Reject
	failures int
	refuse   bool
	calls    int
}

func (m *memRejects) WriteRejects(ctx context.Context, rs []Reject) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.refuse {
		return permanent.Errorf("test", "reject store refuses")
	}
	if m.failures > 0 {
		m.failures--
		return errors.New("reject store down")
	}
	m.recs = append(m.recs, rs...)
	return nil
}

func (m *memRejects) all() []Reject {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.recs)
}

// poisonSink refuses, permanently, every batch holding a poison response,
// and fails the first `transient` writes transiently.
type poisonSink struct {
	memSink
	poison    map[string]bool
	refuseAll int // the first refuseAll writes are refused permanently, whatever they hold
	transient int
	refusals  atomic.Int64 // permanent refusals
	sizes     []int        // responses per refused batch, in order
}

func (s *poisonSink) Write(ctx context.Context, b *flatten.Batch) error {
	s.mu.Lock()
	if s.transient > 0 {
		s.transient--
		s.mu.Unlock()
		return errors.New("clickhouse: connection reset")
	}
	if s.refuseAll > 0 {
		s.refuseAll--
		s.refusals.Add(1)
		s.mu.Unlock()
		return permanent.Errorf("insert_rejected", "clickhouse: code 53: type mismatch for column text")
	}
	ids := b.Responses.Column(0).(*array.String)
	for i := 0; i < ids.Len(); i++ {
		if s.poison[ids.Value(i)] {
			s.refusals.Add(1)
			s.sizes = append(s.sizes, ids.Len())
			s.mu.Unlock()
			return permanent.Errorf("bad_value", "clickhouse: append column text: value out of range")
		}
	}
	s.mu.Unlock()
	return s.memSink.Write(ctx, b)
}

type ackLog struct {
	mu   sync.Mutex
	errs map[survey.GUID]error
}

func (a *ackLog) ref(i int, src string) Ref {
	rid := id(i)
	return Ref{SurveyID: 1, ResponseID: rid, Source: src, Done: func(err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.errs == nil {
			a.errs = map[survey.GUID]error{}
		}
		if _, dup := a.errs[rid]; dup {
			panic("Done called twice for " + string(rid))
		}
		a.errs[rid] = err
	}}
}

func (a *ackLog) check(t *testing.T, n int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) != n {
		t.Fatalf("%d refs heard back, want %d", len(a.errs), n)
	}
	for rid, err := range a.errs {
		if err != nil {
			t.Errorf("ref %s acknowledged with %v, want nil", rid, err)
		}
	}
}

// badFetcher answers some responses with a permanent decode error and some
// with a detail completed in 2200.
type badFetcher struct {
	fakeFetcher
	undecodable map[survey.GUID]bool
	future      map[survey.GUID]bool
	calls       atomic.Int64
}

func (f *badFetcher) GetResponse(ctx context.Context, sid int64, rid survey.GUID) (*survey.Response, error) {
	f.calls.Add(1)
	if f.undecodable[rid] {
		return nil, permanent.Errorf("decode", "surveyapi: get_response: decode: date_completed: invalid timestamp \"yesterday\"")
	}
	r, err := f.fakeFetcher.GetResponse(ctx, sid, rid)
	if err == nil && f.future[rid] {
		r.DateCompleted = survey.TimeOf(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	return r, err
}

func TestPermanentFetchAndFlattenErrorsAreRejectedAndAcked(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	reg := prometheus.NewRegistry()
	rej := &memRejects{failures: 2} // the reject store is down at first: retried
	sink := &memSink{}
	f := &badFetcher{undecodable: map[survey.GUID]bool{id(3): true}, future: map[survey.GUID]bool{id(5): true}}
	p := New(Options{Allocator: mem, MaxDelay: 5 * time.Millisecond, RetryInitial: time.Millisecond, Rejects: rej, Registerer: reg}, f, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	for i := range 10 {
		if err := p.Submit(context.Background(), acks.ref(i, "poll")); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 10)
	if len(sink.rows) != 8 {
		t.Errorf("sink has %d responses, want 8", len(sink.rows))
	}
	if _, ok := sink.rows[string(id(3))]; ok {
		t.Error("the undecodable response was written")
	}
	if _, ok := sink.rows[string(id(5))]; ok {
		t.Error("the response completed in 2200 was written")
	}
	recs := rej.all()
	slices.SortFunc(recs, func(a, b Reject) int { return strings.Compare(string(a.ResponseID), string(b.ResponseID)) })
	if len(recs) != 2 {
		t.Fatalf("rejects %+v, want 2", recs)
	}
	if r := recs[0]; r.ResponseID != id(3) || r.Stage != StageFetch || r.Reason != "decode" || r.SurveyID != 1 || r.Source != "poll" || r.Error == "" || r.RejectedAt.IsZero() {
		t.Errorf("fetch reject = %+v", r)
	}
	if r := recs[1]; r.ResponseID != id(5) || r.Stage != StageFlatten || r.Reason != flatten.ReasonDateOutOfRange {
		t.Errorf("flatten reject = %+v", r)
	}
	if got := testutil.ToFloat64(p.m.rejected.WithLabelValues(StageFetch, "decode")); got != 1 {
		t.Errorf("surveysync_rejected_total{stage=fetch,reason=decode} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(p.m.rejected.WithLabelValues(StageFlatten, flatten.ReasonDateOutOfRange)); got != 1 {
		t.Errorf("surveysync_rejected_total{stage=flatten,reason=date_out_of_range} = %v, want 1", got)
	}
}

// A batch the sink refuses permanently because of one response: the other
// responses are written, only the poison one is rejected, every ref is
// acknowledged, and no permanently refused batch is sent again as it was.
func TestPoisonResponseIsIsolatedFromItsBatch(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rej := &memRejects{}
	sink := &poisonSink{poison: map[string]bool{string(id(13)): true, string(id(70)): true}, transient: 2}
	p := New(Options{Allocator: mem, MaxRows: 1_000_000, MaxDelay: time.Second, RetryInitial: time.Millisecond, Rejects: rej}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	for i := range 100 {
		if err := p.Submit(context.Background(), acks.ref(i, "webhook")); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput() // one batch of 100 (drain)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 100)
	if len(sink.rows) != 98 || sink.answers != 98*2 {
		t.Errorf("sink has %d responses and %d answers, want 98 and 196", len(sink.rows), sink.answers)
	}
	recs := rej.all()
	if len(recs) != 2 {
		t.Fatalf("rejects %+v, want 2", recs)
	}
	for _, r := range recs {
		if (r.ResponseID != id(13) && r.ResponseID != id(70)) || r.Stage != StageWrite || r.Reason != "bad_value" {
			t.Errorf("reject %+v, want id 13 or 70 at stage write for bad_value", r)
		}
	}
	// Halving: each refused batch is smaller than the one before it that
	// held the same poison; a handful of refusals, not one per response.
	if n := sink.refusals.Load(); n > 16 {
		t.Errorf("%d permanent refusals for 100 responses, want O(log n)", n)
	}
	if sink.sizes[0] != 100 || slices.Contains(sink.sizes[1:], 100) {
		t.Errorf("refused batch sizes %v: the full batch was sent again after a permanent error", sink.sizes)
	}
	if got := testutil.ToFloat64(p.m.rejected.WithLabelValues(StageWrite, "bad_value")); got != 2 {
		t.Errorf("surveysync_rejected_total{stage=write,reason=bad_value} = %v, want 2", got)
	}
}

// A permanent write error is never retried: one attempt, then the reject.
func TestPermanentWriteErrorIsNotRetried(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rej := &memRejects{}
	sink := &poisonSink{poison: map[string]bool{string(id(1)): true}}
	p := New(Options{Allocator: mem, MaxDelay: time.Millisecond, RetryInitial: time.Millisecond, Rejects: rej}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	if err := p.Submit(context.Background(), acks.ref(1, "poll")); err != nil {
		t.Fatal(err)
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 1)
	if n := sink.refusals.Load(); n != 1 {
		t.Errorf("the sink was asked %d times, want once", n)
	}
	if len(rej.all()) != 1 {
		t.Errorf("rejects %+v, want 1", rej.all())
	}
}

// Transient write errors are retried with backoff until they pass; nothing
// is rejected.
func TestTransientWriteErrorIsRetried(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rej := &memRejects{}
	sink := &poisonSink{transient: 5}
	p := New(Options{Allocator: mem, MaxDelay: time.Millisecond, RetryInitial: time.Millisecond, Rejects: rej}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	for i := range 3 {
		if err := p.Submit(context.Background(), acks.ref(i, "poll")); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 3)
	if len(sink.rows) != 3 || len(rej.all()) != 0 || sink.transient != 0 {
		t.Errorf("sink %d rows, rejects %v, transient failures left %d", len(sink.rows), rej.all(), sink.transient)
	}
}

// Without a reject store, or when the store refuses the records, a
// permanent failure is reported to the ref: it is read again later.
func TestRejectWithoutDurableRecordIsNotAcked(t *testing.T) {
	for name, rej := range map[string]RejectStore{"no store": nil, "store refuses": &memRejects{refuse: true}} {
		t.Run(name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			f := &badFetcher{undecodable: map[survey.GUID]bool{id(1): true}}
			p := New(Options{Allocator: mem, MaxDelay: time.Millisecond, RetryInitial: time.Millisecond, Rejects: rej}, f, &memSink{})
			done := run(t, p, context.Background())
			got := make(chan error, 1)
			if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(1), Done: func(err error) { got <- err }}); err != nil {
				t.Fatal(err)
			}
			p.CloseInput()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := <-got; err == nil || !permanent.Is(err) {
				t.Fatalf("ack %v, want the permanent error", err)
			}
		})
	}
}

// A re-read (SkipUnchanged) that fails the same way is acknowledged
// without a second record; a webhook's ref is recorded again.
func TestRereadOfRejectedResponseIsNotRecordedTwice(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rej := &memRejects{}
	f := &badFetcher{undecodable: map[survey.GUID]bool{id(1): true}, future: map[survey.GUID]bool{id(2): true}}
	p := New(Options{Allocator: mem, MaxDelay: time.Millisecond, RetryInitial: time.Millisecond, Rejects: rej}, f, &memSink{})
	done := run(t, p, context.Background())
	for range 3 {
		for _, i := range []int{1, 2} {
			acked := make(chan error, 1)
			rejected := false
			if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(i), Source: "poll", SkipUnchanged: true,
				OnReject: func() { rejected = true }, Done: func(err error) { acked <- err }}); err != nil {
				t.Fatal(err)
			}
			if err := <-acked; err != nil {
				t.Fatal(err)
			}
			if !rejected {
				t.Fatalf("response %d: OnReject not called before Done (a reject, or a re-read of one)", i)
			}
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(rej.all()); n != 2 {
		t.Fatalf("%d reject records for 2 responses read 3 times each, want 2: %+v", n, rej.all())
	}
}

// A sink that refuses every response of a batch one by one (the table's
// schema, not the data) makes the batch wait and try again: nothing is
// rejected, everything is written once the table accepts it.
func TestTableRefusingEveryResponseIsNotRejection(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rej := &memRejects{}
	// 4 responses: the batch, its halves and quarters = 7 refusals, then a
	// second round of 7 before the table is fixed.
	sink := &poisonSink{refuseAll: 14}
	p := New(Options{Allocator: mem, MaxRows: 1_000_000, MaxDelay: time.Second, RetryInitial: time.Millisecond, Rejects: rej}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	for i := range 4 {
		if err := p.Submit(context.Background(), acks.ref(i, "poll")); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 4)
	if len(rej.all()) != 0 || len(sink.rows) != 4 || sink.refuseAll != 0 {
		t.Fatalf("rejects %v, %d rows written (want 0 rejects, 4 rows), refusals left %d", rej.all(), len(sink.rows), sink.refuseAll)
	}
}
