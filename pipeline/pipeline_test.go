package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func id(i int) survey.GUID { return survey.GUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)) }

type fakeFetcher struct {
	delay   time.Duration
	missing map[survey.GUID]bool
	fail    map[survey.GUID]error
}

func (f *fakeFetcher) GetResponse(ctx context.Context, surveyID int64, rid survey.GUID) (*survey.Response, error) {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.missing[rid] {
		return nil, fmt.Errorf("get %s: %w", rid, survey.ErrNotFound)
	}
	if err := f.fail[rid]; err != nil {
		return nil, err
	}
	return &survey.Response{
		ResponseID: rid, SurveyID: surveyID, ResponseStatus: survey.StatusCompleted,
		DateCreated: survey.Time{Time: time.Unix(1_700_000_000, 0)}, DateCompleted: survey.TimeOf(time.Unix(1_700_000_600, 0)),
		Pages: []survey.Page{{ID: 1, Questions: []survey.Question{{ID: 10, Type: "single", Title: "Q", Answers: []survey.Answer{
			{ChoiceID: survey.Int(1), ChoiceLabel: survey.Str("Ano")}, {ChoiceID: survey.Int(2), ChoiceLabel: survey.Str("Ne")},
		}}}}},
	}, nil
}

type memSink struct {
	mu       sync.Mutex
	rows     map[string]uint8 // response_id → is_deleted
	answers  int64
	failures int // fail this many writes first
	block    chan struct{}
	writes   int
}

func (s *memSink) Write(ctx context.Context, b *flatten.Batch) error {
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.failures > 0 {
		s.failures--
		return errors.New("sink down")
	}
	if s.rows == nil {
		s.rows = map[string]uint8{}
	}
	ids := b.Responses.Column(0).(*array.String)
	del := b.Responses.Column(flatten.ResponsesSchema.FieldIndices("is_deleted")[0]).(*array.Uint8)
	for i := 0; i < ids.Len(); i++ {
		s.rows[ids.Value(i)] = del.Value(i)
	}
	s.answers += b.Answers.NumRows()
	return nil
}

func run(t *testing.T, p *Pipeline, ctx context.Context) chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return done
}

func TestWritesEveryResponseThenAcks(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sink := &memSink{failures: 2}
	f := &fakeFetcher{missing: map[survey.GUID]bool{id(7): true}}
	p := New(Options{Allocator: mem, MaxRows: 50, MaxDelay: 20 * time.Millisecond, RetryInitial: time.Millisecond}, f, sink)
	done := run(t, p, context.Background())
	var acked, failed atomic.Int64
	for i := range 1000 {
		err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(i), Source: "poll", Done: func(err error) {
			if err != nil {
				failed.Add(1)
			} else {
				acked.Add(1)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if acked.Load() != 1000 || failed.Load() != 0 {
		t.Fatalf("acked %d failed %d, want 1000 and 0", acked.Load(), failed.Load())
	}
	if len(sink.rows) != 1000 || sink.answers != 999*2 {
		t.Fatalf("sink has %d responses and %d answers", len(sink.rows), sink.answers)
	}
	if sink.rows[string(id(7))] != 1 {
		t.Fatal("a 404 detail was not written as a deletion")
	}
	if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after close: %v", err)
	}
}

func TestFetchFailureIsReportedNotWritten(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sink := &memSink{}
	boom := errors.New("503 after retries")
	p := New(Options{Allocator: mem, MaxDelay: time.Millisecond}, &fakeFetcher{fail: map[survey.GUID]error{id(1): boom}}, sink)
	done := run(t, p, context.Background())
	got := make(chan error, 2)
	for i := range 2 {
		if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(i), Done: func(err error) { got <- err }}); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e1, e2 := <-got, <-got
	if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, boom) || errors.Is(e2, boom)) {
		t.Fatalf("acks %v, %v: want one nil and one %v", e1, e2, boom)
	}
}

// A sink that does not answer makes Submit block (bounded memory), and a hard
// stop reports every taken ref with an error: nothing is silently dropped.
func TestBackpressureAndHardStop(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sink := &memSink{block: make(chan struct{})}
	p := New(Options{Allocator: mem, FetchConcurrency: 2, MaxRows: 2, MaxDelay: time.Millisecond}, &fakeFetcher{}, sink)
	ctx, cancel := context.WithCancel(context.Background())
	done := run(t, p, ctx)
	var taken, heard atomic.Int64
	subCtx, subCancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer subCancel()
	for i := 0; ; i++ {
		err := p.Submit(subCtx, Ref{SurveyID: 1, ResponseID: id(i), Done: func(err error) {
			if err == nil {
				t.Error("ack without a write")
			}
			heard.Add(1)
		}})
		if err != nil {
			break
		}
		taken.Add(1)
		if i > 10_000 {
			t.Fatal("Submit never blocked while the sink was stuck")
		}
	}
	if taken.Load() > 64 {
		t.Fatalf("%d refs taken while the sink was stuck; memory is not bounded", taken.Load())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	if heard.Load() != taken.Load() {
		t.Fatalf("%d refs taken, %d heard back", taken.Load(), heard.Load())
	}
}

func TestSkipUnchangedWritesOnce(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sink := &memSink{}
	p := New(Options{Allocator: mem, MaxDelay: time.Millisecond}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	for round := range 3 {
		acked := make(chan error, 1)
		if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(1), SkipUnchanged: true, Done: func(err error) { acked <- err }}); err != nil {
			t.Fatal(err)
		}
		if err := <-acked; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sink.writes != 1 {
		t.Fatalf("an unchanged response was written %d times, want once", sink.writes)
	}
}

func TestUrgentRefFlushesEarly(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p := New(Options{Allocator: mem, MaxDelay: 5 * time.Second, UrgentDelay: 10 * time.Millisecond}, &fakeFetcher{}, &memSink{})
	done := run(t, p, context.Background())
	// A slow ref opens the batch; an urgent one joins it and pulls the flush in.
	slow, urgent := make(chan error, 1), make(chan error, 1)
	start := time.Now()
	if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(1), Done: func(err error) { slow <- err }}); err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(2), Urgent: true, Done: func(err error) { urgent <- err }}); err != nil {
		t.Fatal(err)
	}
	if err := <-urgent; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("an urgent ref waited %v; MaxDelay is 5s, UrgentDelay 10ms", took)
	}
	<-slow
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOnResponseHearsWhatRetainKept: with Retain set, a batch keeps what it
// returns, and OnResponse hears that (not the decoded detail) once the rows
// are durable; a 404 still reaches OnResponse as nil without Retain.
func TestOnResponseHearsWhatRetainKept(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var mu sync.Mutex
	heard := map[survey.GUID]*survey.Response{}
	var retained atomic.Int64
	p := New(Options{
		Allocator: mem, MaxRows: 10, MaxDelay: 10 * time.Millisecond,
		Retain: func(r *survey.Response) *survey.Response {
			retained.Add(1)
			return &survey.Response{ResponseID: r.ResponseID, SurveyID: r.SurveyID, ResponseStatus: r.ResponseStatus, SurveyName: "kept"}
		},
		OnResponse: func(_ context.Context, _ int64, rid survey.GUID, r *survey.Response) {
			mu.Lock()
			defer mu.Unlock()
			heard[rid] = r
		},
	}, &fakeFetcher{missing: map[survey.GUID]bool{id(3): true}}, &memSink{})
	done := run(t, p, context.Background())
	for i := range 20 {
		if err := p.Submit(context.Background(), Ref{SurveyID: 1, ResponseID: id(i), Done: func(error) {}}); err != nil {
			t.Fatal(err)
		}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(heard) != 20 || retained.Load() != 19 {
		t.Fatalf("OnResponse heard %d responses, Retain ran %d times; want 20 and 19", len(heard), retained.Load())
	}
	for rid, r := range heard {
		switch {
		case rid == id(3):
			if r != nil {
				t.Errorf("404 response heard as %+v, want nil", r)
			}
		case r == nil || r.SurveyName != "kept" || r.Pages != nil || r.ResponseStatus != survey.StatusCompleted:
			t.Errorf("response %s heard as %+v, want what Retain kept", rid, r)
		}
	}
}
