package poll

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// stopAfterSub acknowledges every ref and cancels the run once it has seen
// n of them: a resync interrupted by a stop or a crash.
type stopAfterSub struct {
	mu     sync.Mutex
	n      int
	got    map[survey.GUID]int
	cancel context.CancelFunc
}

func (s *stopAfterSub) Submit(ctx context.Context, r pipeline.Ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n > 0 && len(s.got) >= s.n {
		s.cancel()
		return ctx.Err()
	}
	if s.got == nil {
		s.got = map[survey.GUID]int{}
	}
	s.got[r.ResponseID]++
	r.Done(nil) // at once: the windows before the stop are acknowledged
	return nil
}

// A resync rewrites every response of its range, held or not, and an
// interrupted one goes on from its checkpoint in a new poller (a restart):
// every response is written, and the second run does not start over.
func TestResyncResumesAfterInterruption(t *testing.T) {
	e := newEmulator(t, 500, 0.1)
	states := &memStates{}
	opts := Options{Statuses: []string{"completed", "partial"}, PerPage: 50, MaxWindowResponses: 50, Now: e.clock.Now}

	ctx, cancel := context.WithCancel(context.Background())
	first := &stopAfterSub{n: 200, cancel: cancel}
	p := New(opts, e.client, first, states, nil)
	for id, st := range e.truth() {
		p.Observe(simSurvey, id, st) // held: a poll cycle would skip them all
	}
	job, err := p.Resync(ctx, simSurvey, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Streams) != 2 {
		t.Fatalf("job %+v: want a checkpoint per stream", job)
	}
	if err := p.RunResyncs(ctx); err == nil {
		t.Fatal("the interrupted resync returned no error")
	}
	cancel()

	second := &stopAfterSub{}
	p = New(opts, e.client, second, states, nil)
	if err := p.RunResyncs(context.Background()); err != nil {
		t.Fatal(err)
	}
	truth := e.truth()
	for id := range truth {
		if first.got[id]+second.got[id] == 0 {
			t.Errorf("%s was not written again", id)
		}
	}
	if len(second.got) >= len(truth) {
		t.Errorf("the second run wrote %d of %d: it started over instead of going on", len(second.got), len(truth))
	}
	saved, _ := states.LoadStates(context.Background())
	n := 0
	for _, st := range saved {
		if !IsResync(st.Stream) {
			continue
		}
		n++
		if resyncPending(st) || !st.Watermark.Equal(job.To) {
			t.Errorf("%s: still pending after the second run (watermark %s, last run %s)", st.Stream, st.Watermark, st.LastRunAt)
		}
	}
	if n != 2 {
		t.Errorf("%d resync checkpoints saved, want 2", n)
	}
	// Nothing more is pending: a third run writes nothing.
	third := &stopAfterSub{}
	if err := New(opts, e.client, third, states, nil).RunResyncs(context.Background()); err != nil || len(third.got) != 0 {
		t.Errorf("a run with nothing pending wrote %d (err %v)", len(third.got), err)
	}
}

// A resync of a survey the service does not know is refused at once, and
// no job is saved.
func TestResyncRefusesUnknownSurvey(t *testing.T) {
	e := newEmulator(t, 10, 0)
	states := &memStates{}
	p := New(Options{Now: e.clock.Now}, e.client, &stopAfterSub{}, states, nil)
	if _, err := p.Resync(context.Background(), simSurvey+1, time.Time{}, time.Time{}); !errors.Is(err, survey.ErrNotFound) {
		t.Fatalf("resync of an unknown survey: %v, want not found", err)
	}
	if saved, _ := states.LoadStates(context.Background()); len(saved) != 0 {
		t.Fatalf("a job was saved: %v", saved)
	}
}

// A survey removed (surveys_exclude at a reload) is no longer polled, ends
// its first pass, and stays out when Run runs again (a daemon that leads
// again); AddSurvey brings it back.
func TestRemoveSurvey(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	listed := map[int64]int{}
	api := &countingLister{f: func(id int64) { mu.Lock(); listed[id]++; mu.Unlock() }}
	p := New(Options{Surveys: []int64{1, 2}, Statuses: []string{"completed"}, PollInterval: time.Second, ReconcileInterval: -1,
		Now: func() time.Time { return now }}, api, &stopAfterSub{}, &memStates{}, nil)
	p.RemoveSurvey(2) // before Run: the first pass does not wait for it
	for range 2 {     // a second Run, as after a lead regained
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		select {
		case <-p.FirstPassDone():
		case <-time.After(5 * time.Second):
			t.Fatal("the first pass waits for the removed survey")
		}
		time.Sleep(50 * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if listed[2] != 0 || listed[1] == 0 {
		t.Fatalf("list calls by survey: %v; want none of the removed survey 2", listed)
	}
}

// countingLister answers every list with nothing and reports the survey.
type countingLister struct{ f func(int64) }

func (c *countingLister) ListResponses(_ context.Context, id int64, q survey.ListQuery) (*survey.ResponseList, error) {
	c.f(id)
	return &survey.ResponseList{Page: q.Page, PerPage: q.PerPage}, nil
}
