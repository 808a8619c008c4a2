package poll

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/survey"
)

// fakeTime is a clock that moves only when the survey loop sleeps on it
// (Options.After): every sleep returns at once, its wait recorded, until
// stop of them were taken; then it cancels and never fires.
type fakeTime struct {
	mu     sync.Mutex
	now    time.Time
	waits  []time.Duration
	stop   int
	cancel context.CancelFunc
	onWait func(n int) // after the n-th sleep (from 1)
}

func (f *fakeTime) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fakeTime) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	f.waits = append(f.waits, d)
	n := len(f.waits)
	f.now = f.now.Add(d)
	f.mu.Unlock()
	if f.onWait != nil {
		f.onWait(n)
	}
	if n >= f.stop {
		f.cancel()
		return nil
	}
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// A survey loop whose list answers are not believed (a page repeated for
// ever, claiming 10^9) backs the stream off exponentially up to the
// safety-net interval, whatever its activity, with one warning per step;
// the first believed pass brings it back to its base interval, with one
// line. Driven through runSurvey on a clock that moves only when it
// sleeps.
func TestSurveyLoopDistrustStepsAndReset(t *testing.T) {
	cases := []struct {
		name    string
		opts    Options
		hostile int             // passes not believed, then two believed ones
		want    []time.Duration // the loop's sleeps
	}{
		{name: "active survey: from twice the base (25 s) to the safety net", hostile: 8,
			opts: Options{PollInterval: 30 * time.Second, SettleLag: 5 * time.Second},
			want: []time.Duration{50 * time.Second, 100 * time.Second, 200 * time.Second, 400 * time.Second, 800 * time.Second,
				1600 * time.Second, 30 * time.Minute, 30 * time.Minute, 25 * time.Second, 25 * time.Second}},
		{name: "a shorter safety net caps sooner", hostile: 4,
			opts: Options{PollInterval: 10 * time.Second, SafetyNetInterval: time.Minute},
			want: []time.Duration{20 * time.Second, 40 * time.Second, time.Minute, time.Minute, 10 * time.Second, 10 * time.Second}},
		{name: "webhooks: the safety net is the base and the ceiling", hostile: 3,
			opts: Options{PollInterval: 30 * time.Second, Webhooks: true},
			want: []time.Duration{30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hostile atomic.Bool
			hostile.Store(true)
			var fresh atomic.Int64
			lister := listFunc(func(q survey.ListQuery) (*survey.ResponseList, error) {
				if hostile.Load() {
					return &survey.ResponseList{Total: 1_000_000_000, Data: refs(0, q.PerPage)}, nil
				}
				// Believed: one response new to the survey (it is active).
				if q.Page > 1 {
					return &survey.ResponseList{Total: 1}, nil
				}
				return &survey.ResponseList{Total: 1, Data: refs(int(1000+fresh.Add(1)), 1)}, nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clk := &fakeTime{now: cycleNow, stop: len(tc.want), cancel: cancel}
			clk.onWait = func(n int) {
				if n == tc.hostile {
					hostile.Store(false)
				}
			}
			var logs syncBuilder
			o := tc.opts
			o.Statuses, o.ReconcileInterval, o.DistrustCallsPerDay = []string{"completed"}, -1, 1_000_000 // the calls' budget does not bind
			o.Now, o.After, o.Logger = clk.Now, clk.After, slog.New(slog.NewTextHandler(&logs, nil))
			p := New(o, lister, &fakeSub{}, &memStates{}, nil)
			r := &surveyRun{cancel: cancel, wake: make(chan struct{}, 1)}
			if err := p.runSurvey(ctx, 1, r); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(clk.waits) != fmt.Sprint(tc.want) {
				t.Fatalf("sleeps %v, want %v", clk.waits, tc.want)
			}
			out := logs.String()
			if n := strings.Count(out, NotBelieved+"; the stream backs off"); n != tc.hostile {
				t.Errorf("%d back-off warnings for %d passes not believed, want one each:\n%s", n, tc.hostile, out)
			}
			if n := strings.Count(out, "believed again"); n != 1 {
				t.Errorf("%d lines saying the stream is believed again, want 1:\n%s", n, out)
			}
			if got := testutil.ToFloat64(p.m.distrusted.WithLabelValues("1", "completed")); got != 0 {
				t.Errorf("distrusted gauge %v after believed passes", got)
			}
			if st := p.States(); len(st) != 1 || st[0].LastError != "" {
				t.Errorf("after a believed pass: %+v", st)
			}
		})
	}
}

// syncBuilder is a strings.Builder safe for concurrent writers.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// The distrust back-off is internal/backoff's schedule: the base doubled
// per pass not believed, capped at the safety net (or the base, when
// longer), for every pass count, without overflow.
func TestDistrustBackoffIsTheOneSchedule(t *testing.T) {
	for _, base := range []time.Duration{time.Nanosecond, time.Millisecond, 25 * time.Second, 30 * time.Minute, 6 * time.Hour} {
		p := New(Options{}, nil, nil, nil, nil)
		pol := p.distrustBackoff(base)
		ceiling := max(p.o.SafetyNetInterval, base)
		want := base
		for n := 1; n <= 80; n++ {
			want = min(2*want, ceiling)
			if got := pol.Step(n); got != want {
				t.Fatalf("base %v, %d passes: %v, want %v", base, n, got, want)
			}
		}
		if pol != (backoff.Policy{Initial: 2 * base, Max: ceiling}) {
			t.Fatalf("policy %+v", pol)
		}
	}
}
