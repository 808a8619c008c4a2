// Package poll reads every survey's responses from the list operation and
// hands each one to the pipeline (docs/architecture.md).
//
// A survey has one stream per list status. The completed, disqualified and
// quota-full streams read windows of date_completed from the stream's
// watermark minus the overlap to now minus a settle lag; the partial stream
// reads windows of date_created over the partial lookback, every cycle,
// because partial responses keep changing. Windows are closed in the past,
// so new responses cannot shift the pages under us; a window whose total
// changes while it is paged (a deletion) is paged again. Windows holding more
// than MaxWindowResponses are split in two by time until they fit, so a
// backfill of a million responses moves its watermark in steps and a crash
// re-reads at most one step.
//
// The watermark of a stream moves only when every response of every window
// up to it has been acknowledged by the pipeline (durably written). A
// reconcile pass every ReconcileInterval lists every id of a survey and
// re-reads the ones the warehouse has but the lists no longer show (a
// deletion) and the ones the lists show but the warehouse lacks.
package poll

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/survey"
)

// Lister lists a survey's responses (source/surveyapi's client).
type Lister interface {
	ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error)
}

// Submitter takes responses to write (the pipeline).
type Submitter interface {
	Submit(ctx context.Context, r pipeline.Ref) error
}

// Inventory tells which responses the warehouse holds as current (not
// deleted), with their status; the reconcile pass compares it with the
// lists. Optional.
type Inventory interface {
	CurrentResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error)
}

// Options tune the poller. Zero values take the defaults noted.
type Options struct {
	Surveys         []int64
	Statuses        []string      // streams to poll (completed, disqualified, quotafull, partial)
	PollInterval    time.Duration // 30 s
	Overlap         time.Duration // 10 min
	SettleLag       time.Duration // 5 s
	PartialLookback time.Duration // 72 h
	// PartialRescanInterval is how often the partial stream re-reads its
	// whole lookback (partial responses change while they stay partial);
	// other cycles read it like the other streams, from the watermark minus
	// the overlap. 10 min.
	PartialRescanInterval time.Duration
	ReconcileInterval     time.Duration // 6 h; negative disables
	BackfillFrom          time.Time     // 2000-01-01
	PerPage               int           // 1000
	MaxWindowResponses    int           // 20 000
	// ProgressInterval is how often a long cycle (a backfill) saves its
	// progress in the stream's state and the poller logs the overall
	// progress. 10 s.
	ProgressInterval time.Duration
	// Unreadable reports whether a list error means the survey cannot be
	// read at all (404, 403): such a survey fails its first pass (see
	// FirstPassErrors) instead of holding it open. nil: none is.
	Unreadable func(error) bool
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (o *Options) defaults() {
	if len(o.Statuses) == 0 {
		o.Statuses = []string{pipeline.StreamCompleted, pipeline.StreamDisqualified, pipeline.StreamQuotaFull, pipeline.StreamPartial}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 30 * time.Second
	}
	if o.Overlap <= 0 {
		o.Overlap = 10 * time.Minute
	}
	if o.SettleLag < 0 {
		o.SettleLag = 0
	}
	if o.PartialLookback <= 0 {
		o.PartialLookback = 72 * time.Hour
	}
	if o.PartialRescanInterval <= 0 {
		o.PartialRescanInterval = 10 * time.Minute
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = 6 * time.Hour
	}
	if o.BackfillFrom.IsZero() {
		o.BackfillFrom = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.PerPage <= 0 || o.PerPage > 1000 {
		o.PerPage = 1000
	}
	if o.MaxWindowResponses <= 0 {
		o.MaxWindowResponses = 20_000
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Poller runs one loop per survey and stream.
type Poller struct {
	o      Options
	lister Lister
	sub    Submitter
	states pipeline.StateStore
	inv    Inventory
	m      *metrics

	mu      sync.Mutex
	state   map[streamKey]pipeline.StreamState
	rescan  map[streamKey]time.Time // last full rescan of a partial stream
	surveys map[int64]*surveyRun
	add     chan int64
	wakeAll chan struct{}

	firstMu      sync.Mutex
	firstPending map[int64]bool  // configured surveys whose first cycle is not done
	firstFailed  map[int64]error // configured surveys that cannot be read
	firstDone    chan struct{}

	progMu   sync.Mutex
	inflight map[streamKey]*progress // cycles running now
}

// progress counts one cycle's responses: announced by its lists, written.
type progress struct {
	start        time.Time
	listed, done atomic.Int64
}

type streamKey struct {
	survey int64
	stream string
}

type surveyRun struct {
	cancel context.CancelFunc
	ending bool
	wake   chan struct{}
}

// New returns a poller. inv may be nil (no reconcile pass).
func New(o Options, l Lister, s Submitter, states pipeline.StateStore, inv Inventory) *Poller {
	o.defaults()
	return &Poller{
		o: o, lister: l, sub: s, states: states, inv: inv,
		m:       newMetrics(o.Registerer, o.Statuses),
		state:   map[streamKey]pipeline.StreamState{},
		rescan:  map[streamKey]time.Time{},
		surveys: map[int64]*surveyRun{},
		add:     make(chan int64, 64),
		wakeAll: make(chan struct{}, 1),

		firstPending: map[int64]bool{},
		firstFailed:  map[int64]error{},
		firstDone:    make(chan struct{}),
		inflight:     map[streamKey]*progress{},
	}
}

// FirstPassDone is closed once every configured survey has finished one
// cycle of every stream without error, or was found unreadable (see
// FirstPassErrors): the backfill is caught up.
func (p *Poller) FirstPassDone() <-chan struct{} { return p.firstDone }

// FirstPassErrors returns, by survey id, the configured surveys that
// cannot be read (Options.Unreadable), with the error.
func (p *Poller) FirstPassErrors() map[int64]error {
	p.firstMu.Lock()
	defer p.firstMu.Unlock()
	out := make(map[int64]error, len(p.firstFailed))
	for id, err := range p.firstFailed {
		out[id] = err
	}
	return out
}

// markFirstPass records the end of a configured survey's first pass: done,
// or failed with err.
func (p *Poller) markFirstPass(id int64, err error) {
	p.firstMu.Lock()
	defer p.firstMu.Unlock()
	if !p.firstPending[id] {
		return
	}
	if err != nil {
		p.firstFailed[id] = err
	}
	delete(p.firstPending, id)
	if len(p.firstPending) == 0 {
		close(p.firstDone)
	}
}

// AddSurvey adds a survey to the polling set (a survey_launched webhook, or
// a response of an unknown survey). Adding a known survey wakes it.
func (p *Poller) AddSurvey(id int64) {
	select {
	case p.add <- id:
	default:
		// The buffer is full only under a storm of new surveys; the survey
		// gets added on the next cycle through Wake's full scan.
		p.Wake()
	}
}

// EndSurvey gives a survey one final full sync and then stops polling it.
func (p *Poller) EndSurvey(id int64) {
	p.mu.Lock()
	r, ok := p.surveys[id]
	if ok {
		r.ending = true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

// Wake starts a cycle of every survey now instead of at the next interval.
func (p *Poller) Wake() {
	select {
	case p.wakeAll <- struct{}{}:
	default:
	}
}

// States returns a copy of the streams' checkpoints.
func (p *Poller) States() []pipeline.StreamState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]pipeline.StreamState, 0, len(p.state))
	for _, s := range p.state {
		out = append(out, s)
	}
	return out
}

// Run polls until ctx is done. It returns nil on a clean stop.
func (p *Poller) Run(ctx context.Context) error {
	states, err := p.states.LoadStates(ctx)
	if err != nil {
		return fmt.Errorf("poll: load sync state: %w", err)
	}
	p.mu.Lock()
	for _, s := range states {
		p.state[streamKey{s.SurveyID, s.Stream}] = s
	}
	p.mu.Unlock()

	g, gctx := errgroup.WithContext(ctx)
	start := func(id int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := p.surveys[id]; ok {
			return
		}
		sctx, cancel := context.WithCancel(gctx)
		r := &surveyRun{cancel: cancel, wake: make(chan struct{}, 1)}
		p.surveys[id] = r
		g.Go(func() error {
			defer cancel()
			err := p.runSurvey(sctx, id, r)
			if gctx.Err() == nil && sctx.Err() != nil {
				return nil // retired
			}
			return err
		})
	}
	p.firstMu.Lock()
	for _, id := range p.o.Surveys {
		p.firstPending[id] = true
	}
	if len(p.firstPending) == 0 {
		close(p.firstDone)
	}
	p.firstMu.Unlock()
	for _, id := range p.o.Surveys {
		start(id)
	}
	g.Go(func() error { p.logProgress(gctx); return nil })
	g.Go(func() error {
		for {
			select {
			case id := <-p.add:
				start(id)
			case <-p.wakeAll:
				p.mu.Lock()
				for _, r := range p.surveys {
					select {
					case r.wake <- struct{}{}:
					default:
					}
				}
				p.mu.Unlock()
			case <-gctx.Done():
				return nil
			}
		}
	})
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (p *Poller) runSurvey(ctx context.Context, id int64, r *surveyRun) error {
	var lastReconcile time.Time
	for {
		ending := func() bool { p.mu.Lock(); defer p.mu.Unlock(); return r.ending }()
		g, gctx := errgroup.WithContext(ctx)
		var failed atomic.Bool
		var unreadable atomic.Pointer[error]
		for _, stream := range p.o.Statuses {
			g.Go(func() error {
				err := p.cycle(gctx, id, stream)
				if err != nil && gctx.Err() == nil {
					failed.Store(true)
					if p.o.Unreadable != nil && p.o.Unreadable(err) {
						unreadable.CompareAndSwap(nil, &err)
						return nil
					}
					p.o.Logger.Warn("poll cycle failed; the window is read again next cycle",
						"survey_id", id, "stream", stream, "err", err)
				}
				return nil
			})
		}
		_ = g.Wait()
		if ctx.Err() != nil {
			return nil
		}
		if e := unreadable.Load(); e != nil {
			p.o.Logger.Error("survey cannot be read: check its id in surveys and the token's rights; retried every poll interval",
				"survey_id", id, "err", *e)
			p.markFirstPass(id, *e)
		} else if !failed.Load() {
			p.markFirstPass(id, nil)
		}
		if p.inv != nil && p.o.ReconcileInterval > 0 && (ending || p.o.Now().Sub(lastReconcile) >= p.o.ReconcileInterval) {
			if err := p.reconcile(ctx, id); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.o.Logger.Warn("reconcile failed; retried next interval", "survey_id", id, "err", err)
			} else {
				lastReconcile = p.o.Now()
			}
		}
		if ending {
			p.o.Logger.Info("survey ended: final sync done, polling stops", "survey_id", id)
			p.mu.Lock()
			delete(p.surveys, id)
			p.mu.Unlock()
			return nil
		}
		t := time.NewTimer(p.o.PollInterval)
		select {
		case <-t.C:
		case <-r.wake:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// window is a closed time range of one stream, paged and submitted.
type window struct {
	from, to  time.Time
	pending   int
	submitted bool // every page listed and submitted
	failed    error
}

// tracker moves a stream's watermark to the end of the highest window whose
// responses, and all before it, are acknowledged.
type tracker struct {
	mu      sync.Mutex
	windows []*window
	mark    time.Time // highest contiguous acknowledged window end
	done    chan struct{}
	err     error

	skipUnchanged bool // refs are re-reads: set pipeline.Ref.SkipUnchanged
}

func (t *tracker) open(from, to time.Time) *window {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := &window{from: from, to: to}
	t.windows = append(t.windows, w)
	return w
}

func (t *tracker) ack(w *window, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w.pending--
	if err != nil && w.failed == nil {
		w.failed = err
	}
	t.advance()
}

func (t *tracker) sealed(w *window) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w.submitted = true
	t.advance()
}

func (t *tracker) advance() {
	for len(t.windows) > 0 {
		w := t.windows[0]
		if !w.submitted || w.pending > 0 {
			break
		}
		if w.failed != nil {
			if t.err == nil {
				t.err = w.failed
			}
			break
		}
		t.mark = w.to
		t.windows = t.windows[1:]
	}
	select {
	case t.done <- struct{}{}:
	default:
	}
}

func (t *tracker) snapshot() (mark time.Time, open int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	inflight := 0
	for _, w := range t.windows {
		inflight += w.pending
		if !w.submitted {
			inflight++
		}
		if w.failed != nil && err == nil {
			err = w.failed
		}
	}
	return t.mark, inflight, err
}

// cycle reads one stream of one survey from its watermark to now.
func (p *Poller) cycle(ctx context.Context, surveyID int64, stream string) error {
	key := streamKey{surveyID, stream}
	p.mu.Lock()
	st, ok := p.state[key]
	p.mu.Unlock()
	if !ok {
		st = pipeline.StreamState{SurveyID: surveyID, Stream: stream}
	}
	now := p.o.Now()
	to := now.Add(-p.o.SettleLag).Truncate(time.Second)
	from := p.o.BackfillFrom
	if !st.Watermark.IsZero() {
		back := p.o.Overlap
		if stream == pipeline.StreamPartial {
			p.mu.Lock()
			if now.Sub(p.rescan[key]) >= p.o.PartialRescanInterval {
				back = p.o.PartialLookback
				p.rescan[key] = now
			}
			p.mu.Unlock()
		}
		from = st.Watermark.Add(-back)
		if from.Before(p.o.BackfillFrom) {
			from = p.o.BackfillFrom
		}
	}
	if !to.After(from) {
		return nil
	}
	start := p.o.Now()
	// After the backfill, most of what a cycle lists was written before:
	// let the pipeline skip unchanged details.
	tr := &tracker{mark: st.Watermark, done: make(chan struct{}, 1), skipUnchanged: !st.Watermark.IsZero()}
	prog := &progress{start: start}
	p.progMu.Lock()
	p.inflight[key] = prog
	p.progMu.Unlock()
	defer func() {
		p.progMu.Lock()
		delete(p.inflight, key)
		p.progMu.Unlock()
	}()
	// st is saved by this goroutine and, during a long cycle, by the
	// progress saver below; stMu orders the two.
	var stMu sync.Mutex
	st.CycleStartedAt = start
	saveLocked := func() {
		st.CycleListed, st.CycleDone = prog.listed.Load(), prog.done.Load()
		p.save(ctx, key, st)
	}
	progCtx, stopProgress := context.WithCancel(ctx)
	progStopped := make(chan struct{})
	go func() {
		defer close(progStopped)
		t := time.NewTicker(p.o.ProgressInterval)
		defer t.Stop()
		var lastL, lastD int64 = -1, -1
		for {
			select {
			case <-t.C:
				l, d := prog.listed.Load(), prog.done.Load()
				if l != lastL || d != lastD {
					lastL, lastD = l, d
					stMu.Lock()
					saveLocked()
					stMu.Unlock()
				}
			case <-progCtx.Done():
				return
			}
		}
	}()
	defer func() { stopProgress(); <-progStopped }()
	var synced int64
	var syncedMu sync.Mutex
	err := p.split(ctx, surveyID, stream, from, to, tr, func() {
		syncedMu.Lock()
		synced++
		syncedMu.Unlock()
		prog.done.Add(1)
	}, func(total int) { prog.listed.Add(int64(total)) })
	// Wait for every submitted response to be acknowledged, saving progress.
	for {
		mark, inflight, werr := tr.snapshot()
		if mark.After(st.Watermark) {
			stMu.Lock()
			st.Watermark = mark
			saveLocked()
			stMu.Unlock()
		}
		if inflight == 0 || ctx.Err() != nil {
			if err == nil {
				err = werr
			}
			break
		}
		select {
		case <-tr.done:
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	stopProgress()
	<-progStopped
	st.CycleStartedAt, st.CycleListed, st.CycleDone = time.Time{}, 0, 0
	st.LastRunAt = start
	st.Synced += synced
	st.LastError = ""
	outcome := "ok"
	if err != nil {
		st.LastError = err.Error()
		outcome = "error"
	}
	p.m.cycles.WithLabelValues(stream, outcome).Inc()
	p.m.cycleSeconds.WithLabelValues(stream).Observe(time.Since(start).Seconds())
	p.save(ctx, key, st)
	return err
}

func (p *Poller) save(ctx context.Context, key streamKey, st pipeline.StreamState) {
	st.UpdatedAt = p.o.Now()
	p.mu.Lock()
	p.state[key] = st
	p.mu.Unlock()
	p.m.watermark.WithLabelValues(strconv.FormatInt(key.survey, 10), key.stream).Set(float64(st.Watermark.Unix()))
	if err := p.states.SaveStates(ctx, []pipeline.StreamState{st}); err != nil && ctx.Err() == nil {
		// The watermark stays in memory and is saved with the next step;
		// a crash before that re-reads, it does not lose.
		p.o.Logger.Warn("save sync state failed", "survey_id", key.survey, "stream", key.stream, "err", err)
	}
}

func (p *Poller) query(stream string, from, to time.Time, page int) survey.ListQuery {
	q := survey.ListQuery{Page: page, PerPage: p.o.PerPage, Status: stream}
	// Whether the service's bounds are inclusive is not documented: start
	// one second early so adjacent windows overlap instead of leaving a gap.
	from = from.Add(-time.Second)
	if stream == pipeline.StreamPartial {
		q.StartStartedAt, q.EndStartedAt = from, to
	} else {
		q.StartCompletedAt, q.EndCompletedAt = from, to
	}
	return q
}

// split pages [from, to) as one window, or as two halves when it holds more
// than MaxWindowResponses.
// announce, when not nil, is told the window's total (the progress of the
// cycle); halves are not announced again.
func (p *Poller) split(ctx context.Context, surveyID int64, stream string, from, to time.Time, tr *tracker, count func(), announce func(total int)) error {
	first, err := p.lister.ListResponses(ctx, surveyID, p.query(stream, from, to, 1))
	if err != nil {
		return fmt.Errorf("list %s responses of survey %d from %s to %s: %w", stream, surveyID, survey.FormatTime(from), survey.FormatTime(to), err)
	}
	if announce != nil {
		announce(first.Total)
	}
	if first.Total > p.o.MaxWindowResponses && to.Sub(from) > 2*time.Second {
		mid := from.Add(to.Sub(from) / 2).Truncate(time.Second)
		if err := p.split(ctx, surveyID, stream, from, mid, tr, count, nil); err != nil {
			return err
		}
		return p.split(ctx, surveyID, stream, mid, to, tr, count, nil)
	}
	return p.page(ctx, surveyID, stream, from, to, first, tr, count)
}

// page submits every response of one window. If the window's total changes
// while it is paged, items may have shifted between pages: it is paged again
// (a response submitted twice is written idempotently).
func (p *Poller) page(ctx context.Context, surveyID int64, stream string, from, to time.Time, first *survey.ResponseList, tr *tracker, count func()) error {
	w := tr.open(from, to)
	defer tr.sealed(w)
	seen := make(map[survey.GUID]struct{}, first.Total)
	cur := first
	for attempt := 1; ; attempt++ {
		total := cur.Total
		for page := 1; ; page++ {
			if page > 1 {
				var err error
				cur, err = p.lister.ListResponses(ctx, surveyID, p.query(stream, from, to, page))
				if err != nil {
					p.failWindow(tr, w, err)
					return fmt.Errorf("list %s responses of survey %d page %d: %w", stream, surveyID, page, err)
				}
			}
			p.m.pages.WithLabelValues(stream).Inc()
			for _, it := range cur.Data {
				if _, dup := seen[it.ResponseID]; dup {
					continue
				}
				seen[it.ResponseID] = struct{}{}
				if err := p.submit(ctx, tr, w, surveyID, it.ResponseID, "poll", count); err != nil {
					return err
				}
			}
			p.m.listed.WithLabelValues(stream).Add(float64(len(cur.Data)))
			if len(cur.Data) < p.o.PerPage || page*p.o.PerPage >= cur.Total {
				break
			}
		}
		if cur.Total == total || attempt >= 3 {
			return nil
		}
		p.m.reread.WithLabelValues(stream).Inc()
		p.o.Logger.Info("window changed while paged; paging it again", "survey_id", surveyID, "stream", stream,
			"total_before", total, "total_after", cur.Total)
		var err error
		cur, err = p.lister.ListResponses(ctx, surveyID, p.query(stream, from, to, 1))
		if err != nil {
			p.failWindow(tr, w, err)
			return err
		}
	}
}

func (p *Poller) failWindow(tr *tracker, w *window, err error) {
	tr.mu.Lock()
	if w.failed == nil {
		w.failed = err
	}
	tr.mu.Unlock()
}

func (p *Poller) submit(ctx context.Context, tr *tracker, w *window, surveyID int64, id survey.GUID, source string, count func()) error {
	tr.mu.Lock()
	w.pending++
	tr.mu.Unlock()
	err := p.sub.Submit(ctx, pipeline.Ref{
		SurveyID: surveyID, ResponseID: id, Source: source, SkipUnchanged: tr.skipUnchanged,
		Done: func(err error) {
			if err == nil {
				count()
			}
			tr.ack(w, err)
		},
	})
	if err != nil {
		tr.ack(w, err)
		return err
	}
	return nil
}

// reconcile lists every id of a survey in every stream and re-reads the
// responses the two sides disagree on: in the warehouse but in no list (a
// deletion), in a list but not in the warehouse (missed), or listed under
// another status than the warehouse shows (a change the windows missed, such
// as a late completion dated before the watermark's overlap).
func (p *Poller) reconcile(ctx context.Context, surveyID int64) error {
	start := p.o.Now()
	have, err := p.inv.CurrentResponses(ctx, surveyID)
	if err != nil {
		return fmt.Errorf("reconcile survey %d: read warehouse ids: %w", surveyID, err)
	}
	listed := make(map[survey.GUID]struct{}, len(have))
	var missing, changed []survey.GUID
	for _, stream := range p.o.Statuses {
		for page := 1; ; page++ {
			q := survey.ListQuery{Page: page, PerPage: p.o.PerPage, Status: stream}
			l, err := p.lister.ListResponses(ctx, surveyID, q)
			if err != nil {
				return fmt.Errorf("reconcile survey %d: list %s page %d: %w", surveyID, stream, page, err)
			}
			for _, it := range l.Data {
				if _, dup := listed[it.ResponseID]; dup {
					continue
				}
				listed[it.ResponseID] = struct{}{}
				status, ok := have[it.ResponseID]
				switch {
				case !ok:
					missing = append(missing, it.ResponseID)
				case status != stream:
					changed = append(changed, it.ResponseID)
				}
			}
			if len(l.Data) < p.o.PerPage || page*p.o.PerPage >= l.Total {
				break
			}
		}
	}
	var vanished []survey.GUID
	for id := range have {
		if _, ok := listed[id]; !ok {
			vanished = append(vanished, id)
		}
	}
	tr := &tracker{done: make(chan struct{}, 1)}
	w := tr.open(start, start)
	noop := func() {}
	for _, id := range slices.Concat(vanished, missing, changed) {
		if err := p.submit(ctx, tr, w, surveyID, id, "reconcile", noop); err != nil {
			tr.sealed(w)
			return err
		}
	}
	tr.sealed(w)
	for {
		_, inflight, werr := tr.snapshot()
		if inflight == 0 {
			if werr != nil {
				return fmt.Errorf("reconcile survey %d: %w", surveyID, werr)
			}
			break
		}
		select {
		case <-tr.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.m.reconciled.WithLabelValues("vanished").Add(float64(len(vanished)))
	p.m.reconciled.WithLabelValues("missing").Add(float64(len(missing)))
	p.m.reconciled.WithLabelValues("status_changed").Add(float64(len(changed)))
	if len(vanished)+len(missing)+len(changed) > 0 {
		p.o.Logger.Info("reconcile re-read responses", "survey_id", surveyID,
			"vanished", len(vanished), "missing", len(missing), "status_changed", len(changed))
	}
	return nil
}

// logProgress logs, every ProgressInterval while cycles have been running
// longer than that (a backfill), how far they are: responses written of
// those listed, the rate, and an estimate of the time left.
func (p *Poller) logProgress(ctx context.Context) {
	t := time.NewTicker(p.o.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		now := p.o.Now()
		var listed, done int64
		var oldest time.Time
		streams := 0
		p.progMu.Lock()
		for _, pr := range p.inflight {
			if now.Sub(pr.start) < p.o.ProgressInterval {
				continue
			}
			streams++
			listed += pr.listed.Load()
			done += pr.done.Load()
			if oldest.IsZero() || pr.start.Before(oldest) {
				oldest = pr.start
			}
		}
		p.progMu.Unlock()
		if streams == 0 || listed == 0 {
			continue
		}
		rate, eta := Rate(done, listed, now.Sub(oldest))
		attrs := []any{"done", done, "listed", listed, "percent", done * 100 / listed,
			"per_second", fmt.Sprintf("%.1f", rate), "streams", streams}
		if eta > 0 {
			attrs = append(attrs, "eta", eta.String())
		}
		p.o.Logger.Info("sync progress", attrs...)
	}
}

// Rate is the pace of a cycle that wrote done of listed responses in
// elapsed, per second, and the time left at that pace (0 when unknown).
func Rate(done, listed int64, elapsed time.Duration) (float64, time.Duration) {
	if elapsed <= 0 || done <= 0 {
		return 0, 0
	}
	rate := float64(done) / elapsed.Seconds()
	left := listed - done
	if left <= 0 {
		return rate, 0
	}
	return rate, (time.Duration(float64(left)/rate) * time.Second).Truncate(time.Second)
}
