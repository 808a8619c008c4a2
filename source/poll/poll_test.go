package poll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeResp struct {
	id        survey.GUID
	status    string
	created   time.Time
	completed time.Time
}

// fakeAPI lists in-memory responses with exclusive bounds (the strictest
// reading of the spec), ordered by date then id.
type fakeAPI struct {
	mu      sync.Mutex
	resps   []fakeResp
	calls   int
	onList  func(q survey.ListQuery)
	failAll error
	failFor map[int64]error // by survey
}

func (f *fakeAPI) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	if f.onList != nil {
		f.onList(q)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failAll != nil {
		return nil, f.failAll
	}
	if err := f.failFor[surveyID]; err != nil {
		return nil, err
	}
	var match []fakeResp
	for _, r := range f.resps {
		if r.status != q.Status {
			continue
		}
		d := r.completed
		lo, hi := q.StartCompletedAt, q.EndCompletedAt
		if q.Status == survey.StatusPartial {
			d, lo, hi = r.created, q.StartStartedAt, q.EndStartedAt
		}
		if !lo.IsZero() && !d.After(lo) || !hi.IsZero() && !d.Before(hi) {
			continue
		}
		match = append(match, r)
	}
	sort.Slice(match, func(i, j int) bool { return match[i].id < match[j].id })
	out := &survey.ResponseList{PerPage: q.PerPage, Page: q.Page, Total: len(match)}
	for i := (q.Page - 1) * q.PerPage; i < len(match) && i < q.Page*q.PerPage; i++ {
		out.Data = append(out.Data, survey.ResponseRef{ResponseID: match[i].id})
	}
	return out, nil
}

type fakeSub struct {
	mu   sync.Mutex
	got  map[survey.GUID]int
	fail func(id survey.GUID) error
}

func (s *fakeSub) Submit(ctx context.Context, r pipeline.Ref) error {
	s.mu.Lock()
	if s.got == nil {
		s.got = map[survey.GUID]int{}
	}
	s.got[r.ResponseID]++
	var err error
	if s.fail != nil {
		err = s.fail(r.ResponseID)
	}
	s.mu.Unlock()
	go r.Done(err) // acks arrive from another goroutine, as from the pipeline
	return nil
}

type memStates struct {
	mu sync.Mutex
	m  map[streamKey]pipeline.StreamState
}

func (s *memStates) LoadStates(context.Context) ([]pipeline.StreamState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pipeline.StreamState
	for _, v := range s.m {
		out = append(out, v)
	}
	return out, nil
}

func (s *memStates) SaveStates(_ context.Context, st []pipeline.StreamState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[streamKey]pipeline.StreamState{}
	}
	for _, v := range st {
		s.m[streamKey{v.SurveyID, v.Stream}] = v
	}
	return nil
}

func gen(n int, base time.Time, status string) []fakeResp {
	out := make([]fakeResp, n)
	for i := range out {
		t := base.Add(time.Duration(i) * time.Minute)
		out[i] = fakeResp{id: survey.GUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)), status: status, created: t.Add(-time.Hour), completed: t}
	}
	return out
}

func TestCycleSubmitsEveryResponseAndMovesWatermark(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	api := &fakeAPI{resps: gen(5000, now.Add(-30*24*time.Hour), survey.StatusCompleted)}
	sub := &fakeSub{}
	st := &memStates{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 100, MaxWindowResponses: 700, Now: func() time.Time { return now }}, api, sub, st, nil)
	if _, err := p.cycle(context.Background(), 1, "completed"); err != nil {
		t.Fatal(err)
	}
	if len(sub.got) != 5000 {
		t.Fatalf("submitted %d distinct responses, want 5000", len(sub.got))
	}
	s := st.m[streamKey{1, "completed"}]
	if want := now.Add(-5 * time.Second); s.Watermark.Before(want.Add(-time.Second)) {
		t.Fatalf("watermark %v, want about %v", s.Watermark, want)
	}
	if s.Synced < 5000 || s.LastError != "" {
		t.Fatalf("state %+v", s)
	}
	// The next cycle re-reads only the overlap.
	sub.got = nil
	now = now.Add(time.Minute)
	if _, err := p.cycle(context.Background(), 1, "completed"); err != nil {
		t.Fatal(err)
	}
	if len(sub.got) != 0 {
		t.Fatalf("second cycle submitted %d responses; nothing new in the overlap", len(sub.got))
	}
}

func TestFailedResponseHoldsWatermark(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(300, now.Add(-10*time.Hour), survey.StatusCompleted)
	api := &fakeAPI{resps: resps}
	bad := resps[150].id
	sub := &fakeSub{fail: func(id survey.GUID) error {
		if id == bad {
			return errors.New("clickhouse down")
		}
		return nil
	}}
	st := &memStates{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 50, MaxWindowResponses: 100, Now: func() time.Time { return now }}, api, sub, st, nil)
	if _, err := p.cycle(context.Background(), 1, "completed"); err == nil {
		t.Fatal("cycle with a failed response returned nil")
	}
	s := st.m[streamKey{1, "completed"}]
	if !s.Watermark.Before(resps[150].completed) {
		t.Fatalf("watermark %v moved past the failed response completed at %v", s.Watermark, resps[150].completed)
	}
	if s.LastError == "" {
		t.Fatal("last error not recorded")
	}
	// Fixed: the next cycle reads it again and the watermark catches up.
	sub.fail = nil
	sub.got = nil
	if _, err := p.cycle(context.Background(), 1, "completed"); err != nil {
		t.Fatal(err)
	}
	if sub.got[bad] == 0 {
		t.Fatal("failed response not read again")
	}
	if s := st.m[streamKey{1, "completed"}]; s.Watermark.Before(now.Add(-6 * time.Second)) {
		t.Fatalf("watermark %v did not catch up", s.Watermark)
	}
}

func TestWindowRepagedWhenTotalChanges(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(250, now.Add(-10*time.Hour), survey.StatusCompleted)
	api := &fakeAPI{resps: resps}
	deleted := false
	api.onList = func(q survey.ListQuery) {
		if q.Page == 2 && !deleted {
			deleted = true
			api.mu.Lock()
			api.resps = api.resps[1:] // a deletion shifts every page by one
			api.mu.Unlock()
		}
	}
	sub := &fakeSub{}
	p := New(Options{Statuses: []string{"completed"}, PerPage: 100, Now: func() time.Time { return now }}, api, sub, &memStates{}, nil)
	if _, err := p.cycle(context.Background(), 1, "completed"); err != nil {
		t.Fatal(err)
	}
	for _, r := range resps[1:] {
		if sub.got[r.id] == 0 {
			t.Fatalf("response %s missed after a page shift", r.id)
		}
	}
}

type inv map[survey.GUID]string

func (i inv) CurrentResponses(context.Context, int64) (map[survey.GUID]string, error) { return i, nil }

func TestReconcileRereadsVanishedAndMissing(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(10, now.Add(-10*time.Hour), survey.StatusCompleted)
	api := &fakeAPI{resps: resps[1:]} // resps[0] was deleted at the service
	have := inv{resps[0].id: "completed"}
	for _, r := range resps[1:9] { // resps[9] never reached the warehouse
		have[r.id] = "completed"
	}
	have[resps[5].id] = "partial" // completed at the service since
	sub := &fakeSub{}
	var reports []ReconcileReport
	p := New(Options{Statuses: []string{"completed", "partial"}, Now: func() time.Time { return now },
		OnReconcile: func(r ReconcileReport) { reports = append(reports, r) }}, api, sub, &memStates{}, have)
	if err := p.reconcile(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if len(sub.got) != 3 || sub.got[resps[0].id] != 1 || sub.got[resps[9].id] != 1 || sub.got[resps[5].id] != 1 {
		t.Fatalf("reconcile submitted %v, want the vanished, the missing and the changed one", sub.got)
	}
	// What it found reaches the verification figures: completed lists 9
	// (resps[1:]) and the warehouse holds 8 completed (resps[0], [1:5],
	// [6:9]); the missing resps[9] and the changed resps[5] are missing in
	// completed, the changed one extra in partial, the vanished resps[0]
	// extra in completed. 2 list calls and 3 re-reads.
	want := []ReconcileStream{{Stream: "completed", Service: 9, Warehouse: 8, Missing: 2, Extra: 1}, {Stream: "partial", Service: 0, Warehouse: 1, Missing: 0, Extra: 1}}
	if len(reports) != 1 || reports[0].Err != nil || !slices.Equal(reports[0].Streams, want) || reports[0].Calls != 5 {
		t.Fatalf("reports %+v, want one with %+v and 5 calls", reports, want)
	}
}

// invSeq answers CurrentResponses with each of its snapshots in turn (the
// last repeats): the warehouse as it changes during a pass.
type invSeq struct{ snaps []inv }

func (s *invSeq) CurrentResponses(context.Context, int64) (map[survey.GUID]string, error) {
	i := s.snaps[0]
	if len(s.snaps) > 1 {
		s.snaps = s.snaps[1:]
	}
	return i, nil
}

// A response written while reconcile read the lists (a webhook, a poll
// cycle) is re-read but not reported as drift; one still missing is.
func TestReconcileDoesNotReportLateWritesAsDrift(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	resps := gen(10, now.Add(-10*time.Hour), survey.StatusCompleted)
	api := &fakeAPI{resps: resps}
	before := inv{}
	for _, r := range resps[:8] {
		before[r.id] = "completed"
	}
	after := inv{resps[8].id: "completed"} // written meanwhile; resps[9] still missing
	for id, st := range before {
		after[id] = st
	}
	sub := &fakeSub{}
	var reports []ReconcileReport
	p := New(Options{Statuses: []string{"completed"}, Now: func() time.Time { return now },
		OnReconcile: func(r ReconcileReport) { reports = append(reports, r) }}, api, sub, &memStates{}, &invSeq{snaps: []inv{before, after}})
	if err := p.reconcile(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if len(sub.got) != 2 {
		t.Fatalf("re-read %v, want both missing ones", sub.got)
	}
	if len(reports) != 1 || reports[0].Streams[0].Missing != 1 || reports[0].Reread != 2 {
		t.Fatalf("reports %+v, want 1 missing (the late write not counted) and 2 re-read", reports)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
		api := &fakeAPI{resps: gen(10, now.Add(-time.Hour), survey.StatusCompleted)}
		sub := &fakeSub{}
		ctx, cancel := context.WithCancel(context.Background())
		p := New(Options{Surveys: []int64{1, 2}, PollInterval: time.Hour, ReconcileInterval: -1, Now: func() time.Time { return now }}, api, sub, &memStates{}, nil)
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		deadline := time.Now().Add(5 * time.Second)
		for {
			sub.mu.Lock()
			n := len(sub.got)
			sub.mu.Unlock()
			if n == 10 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.AddSurvey(3)
		p.EndSurvey(2)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A survey the service does not know ends its first pass with the error,
// so that --exit-when-synced can say so instead of waiting forever.
func TestUnreadableSurveyEndsFirstPass(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	errGone := errors.New("not found")
	api := &fakeAPI{resps: gen(10, now.Add(-time.Hour), survey.StatusCompleted),
		failFor: map[int64]error{999: fmt.Errorf("list: %w", errGone)}}
	sub := &fakeSub{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(Options{Surveys: []int64{1, 999}, Statuses: []string{"completed"}, PollInterval: time.Hour, ReconcileInterval: -1,
		Unreadable: func(err error) bool { return errors.Is(err, errGone) },
		Now:        func() time.Time { return now }}, api, sub, &memStates{}, nil)
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.FirstPassDone():
	case <-time.After(5 * time.Second):
		t.Fatal("the first pass never ended")
	}
	errs := p.FirstPassErrors()
	if len(errs) != 1 || !errors.Is(errs[999], errGone) {
		t.Fatalf("FirstPassErrors = %v", errs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// gatedSub acknowledges the first n refs at once and the others when
// release is closed.
type gatedSub struct {
	mu      sync.Mutex
	n       int
	seen    int
	release chan struct{}
}

func (s *gatedSub) Submit(ctx context.Context, r pipeline.Ref) error {
	s.mu.Lock()
	s.seen++
	now := s.seen <= s.n
	s.mu.Unlock()
	if now {
		go r.Done(nil)
		return nil
	}
	go func() { <-s.release; r.Done(nil) }()
	return nil
}

// A long cycle saves its progress (listed, written) while it runs, and
// clears it when done.
func TestLongCycleSavesProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
		api := &fakeAPI{resps: gen(50, now.Add(-time.Hour), survey.StatusCompleted)}
		sub := &gatedSub{n: 20, release: make(chan struct{})}
		st := &memStates{}
		p := New(Options{Statuses: []string{"completed"}, PerPage: 10, ProgressInterval: 10 * time.Millisecond,
			Now: func() time.Time { return now }}, api, sub, st, nil)
		done := make(chan error)
		go func() { _, err := p.cycle(context.Background(), 1, "completed"); done <- err }()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st.mu.Lock()
			s := st.m[streamKey{1, "completed"}]
			st.mu.Unlock()
			if s.CycleListed == 50 && s.CycleDone == 20 && s.InCycle() && s.Synced == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress saved: %+v", s)
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(sub.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		s := st.m[streamKey{1, "completed"}]
		if s.InCycle() || s.CycleListed != 0 || s.CycleDone != 0 || s.Synced != 50 {
			t.Fatalf("after the cycle: %+v", s)
		}
		if rate, eta := Rate(20, 50, 10*time.Second); rate != 2 || eta != 15*time.Second {
			t.Errorf("Rate(20, 50, 10s) = %v, %v", rate, eta)
		}
	})
}

// bySurvey counts list calls per survey.
type bySurvey struct {
	*fakeAPI
	mu sync.Mutex
	n  map[int64]int
}

func (b *bySurvey) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	b.mu.Lock()
	b.n[surveyID]++
	b.mu.Unlock()
	return b.fakeAPI.ListResponses(ctx, surveyID, q)
}

func (b *bySurvey) calls(id int64) int { b.mu.Lock(); defer b.mu.Unlock(); return b.n[id] }

// Run runs again after it returned (a daemon that leads again): the
// configured surveys and those added meanwhile are polled again, and the
// first pass is not repeated.
func TestRunAgain(t *testing.T) {
	api := &bySurvey{fakeAPI: &fakeAPI{resps: gen(50, time.Now().Add(-time.Hour), survey.StatusCompleted)}, n: map[int64]int{}}
	p := New(Options{Surveys: []int64{1}, Statuses: []string{"completed"}, PollInterval: time.Hour, ReconcileInterval: -1}, api, &fakeSub{}, &memStates{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-p.FirstPassDone():
	case <-time.After(10 * time.Second):
		t.Fatal("first pass not done")
	}
	p.AddSurvey(2)
	for i := 0; api.calls(2) == 0; i++ {
		if i > 500 {
			t.Fatal("survey 2 not polled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c1, c2 := api.calls(1), api.calls(2)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- p.Run(ctx) }()
	for i := 0; api.calls(1) == c1 || api.calls(2) == c2; i++ {
		if i > 500 {
			t.Fatalf("second run polled survey 1: %v, survey 2: %v", api.calls(1) > c1, api.calls(2) > c2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
