package poll

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// listFunc is a Lister answering from a function.
type listFunc func(q survey.ListQuery) (*survey.ResponseList, error)

func (f listFunc) ListResponses(_ context.Context, _ int64, q survey.ListQuery) (*survey.ResponseList, error) {
	return f(q)
}

// counted counts a Lister's calls.
type counted struct {
	Lister
	n atomic.Int64
}

func (c *counted) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	c.n.Add(1)
	return c.Lister.ListResponses(ctx, surveyID, q)
}

// refs lists n fresh ids from start.
func refs(start, n int) []survey.ResponseRef {
	out := make([]survey.ResponseRef, n)
	for i := range out {
		out[i] = survey.ResponseRef{ResponseID: survey.GUID(guidN(start + i))}
	}
	return out
}

var cycleNow = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

// A cycle's decisions, one stream from an empty state to now (no settle
// lag): how its range is paged, whether its list answers are believed,
// and where its watermark ends.
func TestCycleDecisions(t *testing.T) {
	type want struct {
		err       string // substring of the cycle's error; "" none
		mark      string // "to" (the cycle's end), "zero", or "before-fail" (before the failed response, after BackfillFrom)
		submitted int    // distinct responses submitted
		calls     int64  // list calls; 0 = not checked
		anomaly   string // "" = believed; else the pass's anomaly text
		rereads   float64
	}
	cases := []struct {
		name string
		n    int                       // completed responses, a minute apart, the last an hour ago
		list func(api *fakeAPI) Lister // nil: the fake service as it is
		opts func(o *Options)          // on top of PerPage 100, MaxWindowResponses 1000
		fail func(rs []fakeResp) func(survey.GUID) error
		want want
	}{
		{name: "one window of three pages", n: 250,
			want: want{mark: "to", submitted: 250, calls: 3}},
		{name: "the total says the second full page is the last", n: 200,
			want: want{mark: "to", submitted: 200, calls: 2}},
		{name: "an empty range is one call", n: 0,
			want: want{mark: "to", calls: 1}},
		{name: "a window above MaxWindowResponses is split until each half fits", n: 2500,
			want: want{mark: "to", submitted: 2500}},
		{name: "a failed acknowledgement holds the watermark before its window", n: 300,
			opts: func(o *Options) { o.MaxWindowResponses = 100; o.PerPage = 50 },
			fail: func(rs []fakeResp) func(survey.GUID) error {
				return func(id survey.GUID) error {
					if id == rs[150].id {
						return errors.New("clickhouse down")
					}
					return nil
				}
			},
			want: want{err: "clickhouse down", mark: "before-fail", submitted: 300}},
		{name: "a deletion while paged: the window is paged again", n: 250,
			list: func(api *fakeAPI) Lister {
				var once sync.Once
				api.onList = func(q survey.ListQuery) {
					if q.Page == 2 {
						once.Do(func() { api.mu.Lock(); api.resps = api.resps[1:]; api.mu.Unlock() })
					}
				}
				return api
			},
			want: want{mark: "to", submitted: 250, calls: 6, rereads: 1}},
		{name: "a page adding nothing new ends the pass: read, but not believed", n: 0,
			list: func(*fakeAPI) Lister {
				return listFunc(func(q survey.ListQuery) (*survey.ResponseList, error) {
					return &survey.ResponseList{Total: 1_000_000_000, Data: refs(min(q.Page, 3)*q.PerPage, q.PerPage)}, nil
				})
			},
			opts: func(o *Options) { o.MaxWindowResponses = 2_000_000_000 },
			want: want{mark: "to", submitted: 300, calls: 4, anomaly: "page_adds_nothing×1"}},
		{name: "the page cap fails the window: the watermark stays", n: 0,
			list: func(*fakeAPI) Lister {
				return listFunc(func(q survey.ListQuery) (*survey.ResponseList, error) {
					return &survey.ResponseList{Total: 1_000_000_000, Data: refs(q.Page*q.PerPage, q.PerPage)}, nil
				})
			},
			opts: func(o *Options) { o.MaxWindowResponses = 2_000_000_000; o.MaxWindowPages = 5 },
			want: want{err: "page cap", mark: "zero", submitted: 500, calls: 5, anomaly: "page_cap×1"}},
		{name: "implausible totals: the window is paged whole, not split", n: 250,
			list: func(api *fakeAPI) Lister {
				return listFunc(func(q survey.ListQuery) (*survey.ResponseList, error) {
					l, err := api.ListResponses(context.Background(), 1, q)
					if err == nil {
						l.Total = 5000 // every window and half claims as much
					}
					return l, err
				})
			},
			// 1 (the window) + 2 (its halves) + pages 2 and 3.
			want: want{mark: "to", submitted: 250, calls: 5, anomaly: "implausible_total×1"}},
		{name: "a total changing in every pass fails the window", n: 250,
			list: func(api *fakeAPI) Lister {
				var k atomic.Int64
				return listFunc(func(q survey.ListQuery) (*survey.ResponseList, error) {
					l, err := api.ListResponses(context.Background(), 1, q)
					if err == nil {
						l.Total += int(k.Add(1))
					}
					return l, err
				})
			},
			want: want{err: "total changed", mark: "zero", submitted: 250, anomaly: "total_unstable×1", rereads: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resps := gen(tc.n, cycleNow.Add(-time.Hour-time.Duration(tc.n)*time.Minute), survey.StatusCompleted)
			api := &fakeAPI{resps: resps}
			var l Lister = api
			if tc.list != nil {
				l = tc.list(api)
			}
			cl := &counted{Lister: l}
			sub := &fakeSub{}
			if tc.fail != nil {
				sub.fail = tc.fail(resps)
			}
			st := &memStates{}
			o := Options{Statuses: []string{"completed"}, PerPage: 100, MaxWindowResponses: 1000, SettleLag: -1,
				Now: func() time.Time { return cycleNow }}
			if tc.opts != nil {
				tc.opts(&o)
			}
			p := New(o, cl, sub, st, nil)
			c, err := p.run(context.Background(), 1, "completed", 0)
			switch {
			case tc.want.err == "" && err != nil:
				t.Fatalf("cycle: %v", err)
			case tc.want.err != "" && (err == nil || !strings.Contains(err.Error(), tc.want.err)):
				t.Fatalf("cycle: %v, want an error with %q", err, tc.want.err)
			}
			s := st.m[streamKey{1, "completed"}]
			switch tc.want.mark {
			case "to":
				if !s.Watermark.Equal(cycleNow) {
					t.Errorf("watermark %v, want the cycle's end %v", s.Watermark, cycleNow)
				}
			case "zero":
				if !s.Watermark.IsZero() {
					t.Errorf("watermark moved to %v", s.Watermark)
				}
			case "before-fail":
				if !s.Watermark.Before(resps[150].completed) || !s.Watermark.After(o.BackfillFrom) {
					t.Errorf("watermark %v, want after the windows acknowledged and before %v", s.Watermark, resps[150].completed)
				}
			}
			if len(sub.got) != tc.want.submitted {
				t.Errorf("%d responses submitted, want %d", len(sub.got), tc.want.submitted)
			}
			if tc.want.calls > 0 && cl.n.Load() != tc.want.calls {
				t.Errorf("%d list calls, want %d", cl.n.Load(), tc.want.calls)
			}
			if c == nil {
				t.Fatal("no pass")
			}
			if got := c.anomalyText(); got != tc.want.anomaly || c.believed() != (tc.want.anomaly == "") {
				t.Errorf("anomalies %q (believed %v), want %q", got, c.believed(), tc.want.anomaly)
			}
			if tc.want.anomaly != "" && !strings.HasPrefix(s.LastError, NotBelieved) {
				t.Errorf("LastError %q does not say the lists are not believed", s.LastError)
			}
			if got := testutil.ToFloat64(p.m.reread.WithLabelValues("completed")); got != tc.want.rereads {
				t.Errorf("%v windows paged again, want %v", got, tc.want.rereads)
			}
			if c.calls.Load() != cl.n.Load() {
				t.Errorf("the pass counted %d list calls, the service saw %d", c.calls.Load(), cl.n.Load())
			}
		})
	}
}

// The tracker moves the watermark to the end of the highest window whose
// refs, and those of every window before it, are all acknowledged without
// error; a failed acknowledgement holds it before its window for good.
func TestTrackerMovesTheWatermark(t *testing.T) {
	t0 := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	end := func(w int) time.Time { return t0.Add(time.Duration(w+1) * time.Hour) }
	type step struct {
		op   string // open (the next window), sub, ok, fail, seal
		w    int
		mark int // window whose end the mark is at after the step; -1: the start
	}
	cases := []struct {
		name    string
		steps   []step
		wantErr bool
	}{
		{name: "a window moves the mark once sealed and every ref acknowledged", steps: []step{
			{"open", 0, -1}, {"sub", 0, -1}, {"sub", 0, -1}, {"ok", 0, -1}, {"seal", 0, -1}, {"ok", 0, 0}}},
		{name: "a window still paged holds the mark though nothing is pending", steps: []step{
			{"open", 0, -1}, {"sub", 0, -1}, {"ok", 0, -1}, {"seal", 0, 0}}},
		{name: "an empty window moves the mark when sealed", steps: []step{
			{"open", 0, -1}, {"seal", 0, 0}}},
		{name: "a later window done first waits for the earlier", steps: []step{
			{"open", 0, -1}, {"sub", 0, -1}, {"seal", 0, -1},
			{"open", 1, -1}, {"sub", 1, -1}, {"seal", 1, -1}, {"ok", 1, -1},
			{"ok", 0, 1}}},
		{name: "a failed acknowledgement holds the mark before its window and those after", wantErr: true, steps: []step{
			{"open", 0, -1}, {"sub", 0, -1}, {"seal", 0, -1}, {"ok", 0, 0},
			{"open", 1, 0}, {"sub", 1, 0}, {"sub", 1, 0}, {"seal", 1, 0}, {"fail", 1, 0}, {"ok", 1, 0},
			{"open", 2, 0}, {"seal", 2, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &tracker{mark: end(-1), done: make(chan struct{}, 1)}
			var ws []*window
			for i, s := range tc.steps {
				switch s.op {
				case "open":
					ws = append(ws, tr.open(end(s.w-1), end(s.w)))
				case "sub":
					tr.mu.Lock()
					ws[s.w].pending++
					tr.mu.Unlock()
				case "ok":
					tr.ack(ws[s.w], nil)
				case "fail":
					tr.ack(ws[s.w], errors.New("write failed"))
				case "seal":
					tr.sealed(ws[s.w])
				}
				mark, _, _ := tr.snapshot()
				if want := end(s.mark); !mark.Equal(want) {
					t.Fatalf("after step %d (%s %d): mark at %v, want %v", i, s.op, s.w, mark, want)
				}
			}
			_, inflight, err := tr.snapshot()
			if (err != nil) != tc.wantErr || inflight != 0 {
				t.Fatalf("at the end: %d in flight, err %v; want an error: %v", inflight, err, tc.wantErr)
			}
		})
	}
}

// heldSub acknowledges every ref at once except those of hold, which wait
// for release.
type heldSub struct {
	fakeSub
	hold    map[survey.GUID]bool
	release chan struct{}
}

func (s *heldSub) Submit(ctx context.Context, r pipeline.Ref) error {
	if !s.hold[r.ResponseID] {
		return s.fakeSub.Submit(ctx, r)
	}
	s.mu.Lock()
	if s.got == nil {
		s.got = map[survey.GUID]int{}
	}
	s.got[r.ResponseID]++
	s.mu.Unlock()
	go func() { <-s.release; r.Done(nil) }()
	return nil
}

// While a cycle waits for acknowledgements, the saved watermark is at the
// end of the windows fully acknowledged, never past a response still being
// written; it reaches the cycle's end once that one is.
func TestWatermarkWaitsForEveryRefOfItsWindow(t *testing.T) {
	resps := gen(600, cycleNow.Add(-11*time.Hour), survey.StatusCompleted)
	api := &fakeAPI{resps: resps}
	slow := resps[400]
	sub := &heldSub{hold: map[survey.GUID]bool{slow.id: true}, release: make(chan struct{})}
	st := &memStates{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 50, MaxWindowResponses: 100, SettleLag: -1,
		Now: func() time.Time { return cycleNow }}, api, sub, st, nil)
	done := make(chan error, 1)
	go func() { _, err := p.cycle(context.Background(), 1, "completed"); done <- err }()
	var mark time.Time
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sub.mu.Lock()
		n := len(sub.got)
		sub.mu.Unlock()
		st.mu.Lock()
		mark = st.m[streamKey{1, "completed"}].Watermark
		st.mu.Unlock()
		if n == len(resps) && mark.After(resps[250].completed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d submitted, watermark %v", n, mark)
		}
	}
	if mark.After(slow.completed) {
		t.Fatalf("watermark %v passed %v, a response not yet written", mark, slow.completed)
	}
	select {
	case err := <-done:
		t.Fatalf("the cycle ended (%v) with a response unacknowledged", err)
	default:
	}
	close(sub.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := st.m[streamKey{1, "completed"}]; !s.Watermark.Equal(cycleNow) || s.LastError != "" {
		t.Fatalf("after the acknowledgement: %+v", s)
	}
}

// A restarted poller resumes each stream from its saved state: it lists
// only from the watermark less the overlap, submits only what it has not
// written (with an inventory, the overlap costs no detail), and a stream
// whose cycle failed is read again from before the failure.
func TestRestartFromSavedState(t *testing.T) {
	resps := gen(300, cycleNow.Add(-10*time.Hour), survey.StatusCompleted)
	cases := []struct {
		name string
		// a failure in the first run (by index, -1 none) and an inventory in
		// the second
		fail      int
		inventory bool
		// the second run's clock, after the first
		later time.Duration
		want  int // responses the second run submits
	}{
		{name: "caught up, no inventory: the overlap is re-read", fail: -1, later: time.Minute, want: 10},
		{name: "caught up, with an inventory: nothing is", fail: -1, inventory: true, later: time.Minute, want: 0},
		{name: "a failed response: read again with what follows it", fail: 150, inventory: true, later: time.Minute, want: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := cycleNow
			clock := func() time.Time { return now }
			api := &fakeAPI{resps: resps}
			st := &memStates{}
			sub := &fakeSub{}
			if tc.fail >= 0 {
				sub.fail = func(id survey.GUID) error {
					if id == resps[tc.fail].id {
						return errors.New("clickhouse down")
					}
					return nil
				}
			}
			// The last 10 responses are inside the overlap of the second run.
			api.resps = append([]fakeResp(nil), resps...)
			for i := range api.resps[290:] {
				api.resps[290+i].completed = now.Add(-time.Duration(10-i) * 30 * time.Second)
			}
			o := Options{Statuses: []string{"completed"}, PerPage: 50, MaxWindowResponses: 100, SettleLag: -1, Now: clock}
			p1 := New(o, api, sub, st, nil)
			_, err := p1.cycle(context.Background(), 1, "completed")
			if (err != nil) != (tc.fail >= 0) {
				t.Fatalf("first run: %v", err)
			}
			saved := st.m[streamKey{1, "completed"}]

			have := inv{}
			for i, r := range api.resps {
				if tc.inventory && i != tc.fail {
					have[r.id] = "completed"
				}
			}
			var i Inventory
			if tc.inventory {
				i = have
			}
			now = now.Add(tc.later)
			var from time.Time
			api.onList = func(q survey.ListQuery) {
				if q.Page == 1 && from.IsZero() {
					from = q.StartCompletedAt
				}
			}
			sub2 := &fakeSub{}
			p2 := New(o, api, sub2, st, i)
			if _, err := p2.resume(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !p2.preloadHeld(context.Background(), 1) {
				t.Fatal("preload stopped")
			}
			if _, err := p2.cycle(context.Background(), 1, "completed"); err != nil {
				t.Fatalf("second run: %v", err)
			}
			if want := saved.Watermark.Add(-p2.o.Overlap - time.Second); !from.Equal(want) {
				t.Errorf("second run listed from %v, want the saved watermark %v less the overlap and a second", from, saved.Watermark)
			}
			if len(sub2.got) != tc.want {
				t.Errorf("second run submitted %d responses, want %d", len(sub2.got), tc.want)
			}
			if tc.fail >= 0 && sub2.got[resps[tc.fail].id] == 0 {
				t.Errorf("the failed response was not read again")
			}
			if s := st.m[streamKey{1, "completed"}]; !s.Watermark.Equal(now) || s.Synced < int64(len(sub.got)) {
				t.Errorf("after the second run: %+v", s)
			}
		})
	}
}

// The range a cycle reads: from BackfillFrom on the first, else from the
// watermark less the overlap, to now less the settle lag; a partial stream
// re-reads its whole lookback every PartialRescanInterval, unless its
// lists are not believed.
func TestCycleRange(t *testing.T) {
	wm := cycleNow.Add(-time.Hour)
	backfill := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		stream     string
		watermark  time.Time
		lastRescan time.Duration // before now; 0: never
		distrust   int
		settle     time.Duration
		from, to   time.Time
		rescan     bool
	}{
		{name: "first cycle: the backfill", stream: "completed", from: backfill, to: cycleNow},
		{name: "later: the watermark less the overlap", stream: "completed", watermark: wm, from: wm.Add(-10 * time.Minute), to: cycleNow},
		{name: "the settle lag ends the range earlier, on a second", stream: "completed", watermark: wm, settle: 5500 * time.Millisecond,
			from: wm.Add(-10 * time.Minute), to: cycleNow.Add(-6 * time.Second)},
		{name: "never before BackfillFrom", stream: "completed", watermark: backfill.Add(time.Minute), from: backfill, to: cycleNow},
		{name: "partial, first cycle: the backfill, no rescan", stream: "partial", from: backfill, to: cycleNow},
		{name: "partial, rescan due: the lookback", stream: "partial", watermark: wm, lastRescan: 10 * time.Minute,
			from: wm.Add(-72 * time.Hour), to: cycleNow, rescan: true},
		{name: "partial, rescanned lately: the overlap", stream: "partial", watermark: wm, lastRescan: 9 * time.Minute,
			from: wm.Add(-10 * time.Minute), to: cycleNow},
		{name: "partial, not believed: no rescan", stream: "partial", watermark: wm, lastRescan: time.Hour, distrust: 1,
			from: wm.Add(-10 * time.Minute), to: cycleNow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Options{SettleLag: tc.settle, Now: func() time.Time { return cycleNow }}, nil, nil, nil, nil)
			key := streamKey{1, tc.stream}
			if tc.lastRescan > 0 {
				p.rescan[key] = cycleNow.Add(-tc.lastRescan)
			}
			from, to, rescan := p.cycleRange(key, tc.watermark, tc.distrust)
			if !from.Equal(tc.from) || !to.Equal(tc.to) || rescan != tc.rescan {
				t.Fatalf("[%v, %v) rescan %v, want [%v, %v) rescan %v", from, to, rescan, tc.from, tc.to, tc.rescan)
			}
			if tc.stream == "partial" && (tc.watermark.IsZero() || tc.rescan) && !p.rescan[key].Equal(cycleNow) {
				t.Fatalf("the partial stream's last full read is %v, want now", p.rescan[key])
			}
		})
	}
}
