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
//
// Every call counts against a monthly quota (docs/architecture.md,
// "Freshness and cost"): each stream has its own schedule (poll interval
// while the survey is active, backing off while idle, a safety net with
// webhooks, rare once ended, stretched to fit a monthly budget), and a
// bounded held set of responses known to be written keeps re-listed ones
// from being fetched again.
package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
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
	PollInterval    time.Duration // 30 s: the freshness bound of an active stream (polled every PollInterval − SettleLag)
	Overlap         time.Duration // 10 min
	SettleLag       time.Duration // none; sync.settle_lag is 5 s
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

	// Scheduling (docs/architecture.md, "Freshness and cost"). A stream
	// that found nothing new or changed for IdleAfter doubles its interval
	// after every empty cycle, up to MaxIdleInterval; anything new brings it
	// back to PollInterval.
	IdleAfter       time.Duration // 20 × PollInterval
	MaxIdleInterval time.Duration // 30 min
	// Webhooks: response_received webhooks feed the pipeline, so polling is
	// only the safety net: the completed stream every SafetyNetInterval,
	// the others every twice that. Webhooks of known surveys do not wake
	// the poll.
	Webhooks          bool
	SafetyNetInterval time.Duration // 30 min
	// DistrustCallsPerDay bounds what a stream whose list answers are not
	// believed (implausible totals, a page adding nothing new, the page
	// cap, a total that keeps changing) spends: besides backing off
	// exponentially up to SafetyNetInterval, such a stream's next pass
	// waits until its list calls since it stopped being believed fit this
	// many a day. 90 (a survey's four streams: at most ~380 list calls a
	// day, whatever the service answers).
	DistrustCallsPerDay int
	// Ended surveys (and surveys after EndSurvey's final sync) are polled
	// every EndedInterval, for late deletions and changes.
	Ended         []int64
	EndedInterval time.Duration // 6 h

	// MonthlyBudget is the account's monthly API quota in calls (0 =
	// unlimited): every interval is stretched so that the projected spend
	// fits (budget.go). CallCount returns the API calls sent so far (the
	// client's counter); without it there is no projection.
	MonthlyBudget int64
	CallCount     func() int64
	BudgetWindow  time.Duration // 30 min: the rate is measured over this
	BudgetTick    time.Duration // 1 min

	// HeldMax bounds the memory of responses known to be written (held.go):
	// 450 000 entries (two tables of 2^18 slots, about 9 MiB); negative
	// disables it.
	HeldMax int
	// MaxWindowPages caps the pages of one pass over a window whatever its
	// total says (4 × MaxWindowResponses / PerPage + 10); the cap per pass
	// is also total/per_page + 10 % + 2.
	MaxWindowPages int
	// MaxReconcileResponses: a survey whose list reports more ids than this
	// in one stream is not reconciled (its id set would not fit): 2 000 000.
	MaxReconcileResponses int

	// ProgressInterval is how often a long cycle (a backfill) saves its
	// progress in the stream's state and the poller logs the overall
	// progress. 10 s.
	ProgressInterval time.Duration
	// Unreadable reports whether a list error means the survey cannot be
	// read at all (404, 403): such a survey fails its first pass (see
	// FirstPassErrors) instead of holding it open. nil: none is.
	Unreadable func(error) bool

	Now func() time.Time
	// After is the timer the scheduler sleeps on (time.After); the
	// benchmark passes a compressed clock.
	After      func(time.Duration) <-chan time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (o *Options) setDefaults() {
	if len(o.Statuses) == 0 {
		o.Statuses = []string{pipeline.StreamCompleted, pipeline.StreamDisqualified, pipeline.StreamQuotaFull, pipeline.StreamPartial}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Overlap <= 0 {
		o.Overlap = DefaultOverlap
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 10 * time.Second
	}
	if o.SettleLag < 0 {
		o.SettleLag = 0
	}
	if o.PartialLookback <= 0 {
		o.PartialLookback = DefaultPartialLookback
	}
	if o.PartialRescanInterval <= 0 {
		o.PartialRescanInterval = DefaultPartialRescanInterval
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	if o.BackfillFrom.IsZero() {
		o.BackfillFrom = DefaultBackfillFrom()
	}
	if o.PerPage <= 0 || o.PerPage > 1000 {
		o.PerPage = 1000
	}
	if o.MaxWindowResponses <= 0 {
		o.MaxWindowResponses = 20_000
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = 20 * o.PollInterval
	}
	if o.MaxIdleInterval <= 0 {
		o.MaxIdleInterval = 30 * time.Minute
	}
	o.MaxIdleInterval = max(o.MaxIdleInterval, o.PollInterval)
	if o.SafetyNetInterval <= 0 {
		o.SafetyNetInterval = 30 * time.Minute
	}
	o.SafetyNetInterval = max(o.SafetyNetInterval, o.PollInterval)
	if o.DistrustCallsPerDay <= 0 {
		o.DistrustCallsPerDay = 90
	}
	if o.EndedInterval <= 0 {
		o.EndedInterval = 6 * time.Hour
	}
	if o.BudgetWindow <= 0 {
		o.BudgetWindow = 30 * time.Minute
	}
	if o.BudgetTick <= 0 {
		o.BudgetTick = time.Minute
	}
	if o.HeldMax == 0 {
		o.HeldMax = 450_000
	}
	if o.MaxWindowPages <= 0 {
		o.MaxWindowPages = 4*o.MaxWindowResponses/o.PerPage + 10
	}
	if o.MaxReconcileResponses <= 0 {
		o.MaxReconcileResponses = 2_000_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Poller runs one loop per survey; each stream of a survey has its own
// schedule.
type Poller struct {
	o      Options
	lister Lister
	sub    Submitter
	states pipeline.StateStore
	inv    Inventory
	m      *metrics
	held   *held
	budget *budget // nil without Options.CallCount

	mu      sync.Mutex
	state   map[streamKey]pipeline.StreamState
	rescan  map[streamKey]time.Time // last full rescan of a partial stream
	surveys map[int64]*surveyRun
	ended   map[int64]bool     // surveys to start at the ended cadence
	adds    map[int64]struct{} // surveys to add, under mu; addSig tells Run
	addSig  chan struct{}
	wakeAll chan struct{}

	firstMu      sync.Mutex
	firstPending map[int64]bool  // configured surveys whose first cycle is not done
	firstFailed  map[int64]error // configured surveys that cannot be read
	firstDone    chan struct{}
	ran          bool // Run ran before (under firstMu)

	progMu   sync.Mutex
	inflight map[streamKey]*pass // cycles running now, for the progress log

	distrustCalls atomic.Int64 // list calls spent on answers not believed
}

type streamKey struct {
	survey int64
	stream string
}

type surveyRun struct {
	cancel context.CancelFunc
	ending bool // a final sync is due (EndSurvey)
	ended  bool // polled every EndedInterval
	wake   chan struct{}
}

// New returns a poller. inv may be nil (no reconcile pass, and no held set
// after a restart).
func New(o Options, l Lister, s Submitter, states pipeline.StateStore, inv Inventory) *Poller {
	o.setDefaults()
	p := &Poller{
		o: o, lister: l, sub: s, states: states, inv: inv,
		m:       newMetrics(o.Registerer, o.Statuses),
		held:    newHeld(o.HeldMax),
		state:   map[streamKey]pipeline.StreamState{},
		rescan:  map[streamKey]time.Time{},
		surveys: map[int64]*surveyRun{},
		ended:   map[int64]bool{},
		adds:    map[int64]struct{}{},
		addSig:  make(chan struct{}, 1),
		wakeAll: make(chan struct{}, 1),

		firstPending: map[int64]bool{},
		firstFailed:  map[int64]error{},
		firstDone:    make(chan struct{}),
		inflight:     map[streamKey]*pass{},
	}
	for _, id := range o.Ended {
		p.ended[id] = true
	}
	if o.CallCount != nil {
		p.budget = newBudget(o.MonthlyBudget, o.CallCount, p.distrustCalls.Load, o.Now, o.BudgetWindow, o.Logger, p.m)
	} else {
		p.m.budget.Set(float64(o.MonthlyBudget))
	}
	return p
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
// a response of an unknown survey). Adding a known survey wakes it, unless
// webhooks feed the pipeline (Options.Webhooks): then a response_received
// of a known survey needs no poll, its ref is already on its way. An ended
// survey is polled at the normal cadence again.
func (p *Poller) AddSurvey(id int64) {
	p.mu.Lock()
	r, ok := p.surveys[id]
	if ok && !r.ended && p.o.Webhooks {
		p.mu.Unlock()
		return
	}
	p.adds[id] = struct{}{}
	p.mu.Unlock()
	select {
	case p.addSig <- struct{}{}:
	default: // Run has a signal pending already; it takes every add
	}
}

// EndSurvey gives a survey one final full sync (every stream and a
// reconcile); afterwards it is polled every EndedInterval.
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

// Observe tells the poller that a response is durably written at status
// (the detail's response_status; "deleted" for a removed one), whoever
// submitted it: the daemon calls it from the pipeline's OnResponse, so a
// response that came by webhook is not fetched again when a list shows it.
func (p *Poller) Observe(surveyID int64, id survey.GUID, status string) {
	p.held.put(surveyID, id, status)
}

// Projection returns the projected API calls per month at the current pace
// (-1 while unknown or without Options.CallCount) and the factor every poll
// interval is stretched by to fit Options.MonthlyBudget.
func (p *Poller) Projection() (projected, stretch float64) {
	if p.budget == nil {
		return -1, 1
	}
	return p.budget.projection()
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
	// Run may run again after it returned (a daemon that leads again,
	// docs/operations.md "High availability"): the surveys of the earlier
	// run, configured or added since, start again from the checkpoints just
	// read; the first pass is not repeated.
	p.mu.Lock()
	for _, s := range states {
		p.state[streamKey{s.SurveyID, s.Stream}] = s
	}
	earlier := make([]int64, 0, len(p.surveys))
	for id := range p.surveys {
		earlier = append(earlier, id)
	}
	slices.Sort(earlier)
	clear(p.surveys)
	p.mu.Unlock()

	g, gctx := errgroup.WithContext(ctx)
	start := func(id int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if r, ok := p.surveys[id]; ok {
			r.ended = false
			select {
			case r.wake <- struct{}{}:
			default:
			}
			return
		}
		sctx, cancel := context.WithCancel(gctx)
		r := &surveyRun{cancel: cancel, wake: make(chan struct{}, 1), ended: p.ended[id]}
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
	if !p.ran {
		p.ran = true
		for _, id := range p.o.Surveys {
			p.firstPending[id] = true
		}
		if len(p.firstPending) == 0 {
			close(p.firstDone)
		}
	}
	p.firstMu.Unlock()
	for _, id := range p.o.Surveys {
		start(id)
	}
	for _, id := range earlier {
		start(id) // a configured one is only woken
	}
	if p.budget != nil {
		g.Go(func() error { return p.budget.run(gctx, p.o.BudgetTick, p.o.After) })
	}
	g.Go(func() error { p.logProgress(gctx); return nil })
	g.Go(func() error {
		for {
			select {
			case <-p.addSig:
				p.mu.Lock()
				ids := make([]int64, 0, len(p.adds))
				for id := range p.adds {
					ids = append(ids, id)
				}
				clear(p.adds)
				p.mu.Unlock()
				for _, id := range ids {
					start(id)
				}
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

// sched is one stream's schedule.
type sched struct {
	interval time.Duration // unstretched; doubles while the survey is idle
	next     time.Time
	ok       bool // one cycle succeeded
	// the last cycle's outcome
	t0, t1 time.Time
	found  int
	err    error
	pass   *pass // nil: the cycle listed nothing (an empty range)

	// Distrust (issue 19): consecutive passes whose list answers were not
	// believed, and the earliest the next such pass may start for the
	// stream's distrusted list calls to stay within DistrustCallsPerDay.
	distrust int
	notUntil time.Time
}

// cadence returns a stream's base interval and the longest it backs off to.
func (p *Poller) cadence(stream string, ended bool) (base, longest time.Duration) {
	switch {
	case ended:
		return p.o.EndedInterval, p.o.EndedInterval
	case p.o.Webhooks:
		s := p.o.SafetyNetInterval
		if stream != pipeline.StreamCompleted {
			s *= 2 // webhooks announce these too; the safety net can be coarser
		}
		return s, s
	default:
		return p.activeInterval(), p.o.MaxIdleInterval
	}
}

// activeInterval is how often an active survey's streams are polled:
// PollInterval less the settle lag (at most halving it), so that a response
// completed at any moment is listed within PollInterval: it waits at most
// the settle lag to enter a window, and windows start every
// PollInterval − SettleLag.
func (p *Poller) activeInterval() time.Duration {
	return max(p.o.PollInterval-p.o.SettleLag, p.o.PollInterval/2)
}

// stretched applies the budget's factor, up to a day.
func (p *Poller) stretched(d time.Duration) time.Duration {
	f := p.budget.factor()
	if f <= 1 {
		return d
	}
	return min(time.Duration(float64(d)*f), 24*time.Hour)
}

// reschedule sets a stream's next cycle after its cycle s.t0–s.t1. A survey
// is active while any of its streams found a new or changed response in the
// last IdleAfter (lastNew): its streams keep the base interval. Otherwise,
// and after a failed cycle, the interval doubles up to the longest.
//
// A pass whose list answers were not believed (pass.believed) backs the
// stream off further, whatever the survey's activity: its interval doubles
// from the base with every such pass in a row, up to SafetyNetInterval (or
// the base, when longer), and its next pass waits until the list calls of
// its distrusted passes fit DistrustCallsPerDay (distrustBurst). The first believed pass
// brings it back.
func (p *Poller) reschedule(s *sched, surveyID int64, stream string, ended bool, lastNew time.Time) {
	base, longest := p.cadence(stream, ended)
	if s.err == nil && s.t0.Sub(lastNew) < p.o.IdleAfter {
		s.interval = base
	} else {
		s.interval = min(2*max(s.interval, base/2), longest)
	}
	s.interval = max(s.interval, base)
	switch {
	case s.pass != nil && !s.pass.believed():
		if s.distrust == 0 || s.notUntil.Before(s.t0) {
			s.notUntil = s.t0
		}
		s.distrust++
		ceiling := max(p.o.SafetyNetInterval, base)
		back := ceiling
		if s.distrust < 30 && base<<s.distrust < ceiling {
			back = base << s.distrust
		}
		s.interval = max(s.interval, back)
		s.notUntil = s.notUntil.Add(time.Duration(s.pass.calls.Load()) * (24 * time.Hour / time.Duration(p.o.DistrustCallsPerDay)))
	case s.pass != nil && s.err == nil && s.distrust > 0:
		p.o.Logger.Info("list answers believed again; the stream is back on its schedule",
			"survey_id", surveyID, "stream", stream, "after_passes", s.distrust)
		s.distrust = 0
		s.notUntil = time.Time{}
		p.m.distrusted.WithLabelValues(strconv.FormatInt(surveyID, 10), stream).Set(0)
	}
	s.next = s.t0.Add(p.stretched(s.interval))
	if s.distrust > 0 && s.next.Before(s.notUntil.Add(-distrustBurst)) {
		s.next = s.notUntil.Add(-distrustBurst)
	}
	if s.next.Before(s.t1) {
		s.next = s.t1
	}
	p.m.interval.WithLabelValues(strconv.FormatInt(surveyID, 10), stream).Set(p.stretched(s.interval).Seconds())
}

// activate brings every stream of a survey that just found something back
// to the base interval.
func (p *Poller) activate(s *sched, stream string, ended bool, at time.Time) {
	base, _ := p.cadence(stream, ended)
	if s.interval > base && s.distrust == 0 {
		s.interval = base
		if next := at.Add(p.stretched(base)); next.Before(s.next) {
			s.next = next
		}
	}
}

func (p *Poller) runSurvey(ctx context.Context, id int64, r *surveyRun) error {
	if p.inv != nil && p.o.HeldMax > 0 {
		// After a restart the overlap and the partial lookback are re-listed:
		// what the warehouse holds need not be fetched again.
		have, err := p.inv.CurrentResponses(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.o.Logger.Warn("read the warehouse's responses failed; the first cycle re-reads the overlap", "survey_id", id, "err", err)
		}
		for rid, st := range have {
			p.held.put(id, rid, st)
		}
	}
	var nextReconcile time.Time // zero: due at the first round
	lastNew := p.o.Now()        // a survey starts active
	scheds := make(map[string]*sched, len(p.o.Statuses))
	for _, st := range p.o.Statuses {
		scheds[st] = &sched{}
	}
	for {
		p.mu.Lock()
		ending, ended := r.ending, r.ended
		p.mu.Unlock()
		now := p.o.Now()
		g, gctx := errgroup.WithContext(ctx)
		var ran []string
		for _, stream := range p.o.Statuses {
			s := scheds[stream]
			if !ending && s.next.After(now) {
				continue
			}
			ran = append(ran, stream)
			g.Go(func() error {
				s.t0 = p.o.Now()
				s.pass, s.err = p.run(gctx, id, stream, s.distrust)
				s.found = 0
				if s.pass != nil {
					s.found = int(s.pass.found.Load())
				}
				s.t1 = p.o.Now()
				if s.err != nil && gctx.Err() == nil && (s.pass == nil || s.pass.believed()) {
					if p.o.Unreadable != nil && p.o.Unreadable(s.err) {
						return nil // reported once for the survey below
					}
					p.o.Logger.Warn("poll cycle failed; the window is read again next cycle",
						"survey_id", id, "stream", stream, "err", s.err)
				}
				return nil
			})
		}
		_ = g.Wait()
		if ctx.Err() != nil {
			return nil
		}
		found := 0
		for _, stream := range ran {
			s := scheds[stream]
			found += s.found
			s.ok = s.ok || s.err == nil
		}
		if found > 0 {
			lastNew = now
		}
		schedEnded := ended && !ending
		for _, stream := range ran {
			s := scheds[stream]
			p.reschedule(s, id, stream, schedEnded, lastNew)
			if s.pass != nil && !s.pass.believed() {
				p.distrusted(id, stream, s)
			}
		}
		if found > 0 {
			for stream, s := range scheds {
				p.activate(s, stream, schedEnded, now)
			}
		}
		allOK := true
		var unreadable error
		for _, s := range scheds {
			allOK = allOK && s.ok
			if unreadable == nil && s.err != nil && p.o.Unreadable != nil && p.o.Unreadable(s.err) {
				unreadable = s.err
			}
		}
		if unreadable != nil {
			p.o.Logger.Error("survey cannot be read: check its id in surveys and the token's rights; retried at the stream's interval",
				"survey_id", id, "err", unreadable)
			p.markFirstPass(id, unreadable)
		} else if allOK {
			p.markFirstPass(id, nil)
		}
		if p.inv != nil && p.o.ReconcileInterval > 0 && (ending || !p.o.Now().Before(nextReconcile)) {
			every := p.stretched(p.o.ReconcileInterval)
			if err := p.reconcile(ctx, id); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.m.reconciles.WithLabelValues("error").Inc()
				if errors.Is(err, errNotBelieved) {
					// Asking again soon would get the same answer: the next
					// pass is at the usual interval.
					p.o.Logger.Warn("reconcile: list answers not believed; retried at the reconcile interval",
						"survey_id", id, "next_in", every, "err", err)
				} else {
					p.o.Logger.Warn("reconcile failed; retried later", "survey_id", id, "err", err)
					every = min(every, p.o.MaxIdleInterval)
				}
			} else {
				p.m.reconciles.WithLabelValues("ok").Inc()
			}
			nextReconcile = p.o.Now().Add(every)
		}
		if ending {
			p.o.Logger.Info("survey ended: final sync done; polled every ended interval from now on", "survey_id", id,
				"interval", p.o.EndedInterval)
			p.mu.Lock()
			r.ending, r.ended = false, true
			p.mu.Unlock()
			for stream, s := range scheds {
				s.interval = p.o.EndedInterval
				s.next = p.o.Now().Add(p.stretched(p.o.EndedInterval))
				p.m.interval.WithLabelValues(strconv.FormatInt(id, 10), stream).Set(p.stretched(s.interval).Seconds())
			}
		}
		next := time.Time{}
		for _, s := range scheds {
			if next.IsZero() || s.next.Before(next) {
				next = s.next
			}
		}
		if p.inv != nil && p.o.ReconcileInterval > 0 && nextReconcile.Before(next) {
			// Reconcile keeps its own interval, whatever the streams' backoff.
			next = nextReconcile
		}
		wait := next.Sub(p.o.Now())
		if wait <= 0 {
			continue
		}
		select {
		case <-p.o.After(wait):
		case <-r.wake:
			for _, s := range scheds {
				s.next = time.Time{}
			}
		case <-ctx.Done():
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

// pass is one cycle of one stream.
type pass struct {
	survey int64
	stream string
	tr     *tracker
	rescan bool         // a partial stream's full rescan: held partials are re-read
	found  atomic.Int64 // responses new to us or changed
	synced atomic.Int64

	// progress: when the cycle started, responses its lists announced, and
	// those done (written, or skipped as held).
	start  time.Time
	listed atomic.Int64
	done   atomic.Int64

	calls     atomic.Int64           // list calls
	anomalies [nAnomaly]atomic.Int64 // list answers not believed, by kind
}

// Kinds of list answers not believed (surveysync_poll_list_anomalies_total).
const (
	anImplausibleTotal = iota // a window's halves claim more than the window
	anPageAddsNothing         // a full page holds no id new to the pass
	anPageCap                 // pages beyond what the total allows
	anTotalUnstable           // the total changed during every pass over a window
	nAnomaly
)

var anomalyNames = [nAnomaly]string{"implausible_total", "page_adds_nothing", "page_cap", "total_unstable"}

// NotBelieved starts a stream's LastError while its list answers are not
// believed and it backs off (surveysync status marks such streams).
const NotBelieved = "list answers not believed"

// distrustBurst is how far a distrusted stream's spending may run ahead of
// DistrustCallsPerDay (a generic cell rate: each pass pushes notUntil on by
// its calls' share of a day; the next pass waits until notUntil less this).
// Over any day a distrusted stream spends at most DistrustCallsPerDay ×
// (1 + 1 h / 24 h) calls plus one pass.
const distrustBurst = time.Hour

// errNotBelieved marks a reconcile failure caused by a list answer that is
// not believed.
var errNotBelieved = errors.New(NotBelieved)

// spentDistrusted counts list calls spent on answers not believed.
func (p *Poller) spentDistrusted(calls int64) {
	p.distrustCalls.Add(calls)
	p.m.distrustCalls.Add(float64(calls))
}

// anomaly counts a list answer of kind that the pass does not believe.
func (p *Poller) anomaly(c *pass, kind int) {
	c.anomalies[kind].Add(1)
	p.m.hostile.WithLabelValues(anomalyNames[kind]).Inc()
}

// believed reports whether every list answer of the pass was believed.
func (c *pass) believed() bool {
	for k := range c.anomalies {
		if c.anomalies[k].Load() > 0 {
			return false
		}
	}
	return true
}

// anomalyText lists the pass's anomalies: "implausible_total×1 page_cap×1".
func (c *pass) anomalyText() string {
	var b strings.Builder
	for k := range c.anomalies {
		if n := c.anomalies[k].Load(); n > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s×%d", anomalyNames[k], n)
		}
	}
	return b.String()
}

// distrusted logs, once per back-off step, that a stream's pass was not
// believed, and counts its list calls as the distrusted share of the
// spend.
func (p *Poller) distrusted(surveyID int64, stream string, s *sched) {
	calls := s.pass.calls.Load()
	p.spentDistrusted(calls)
	p.m.distrusted.WithLabelValues(strconv.FormatInt(surveyID, 10), stream).Set(float64(s.distrust))
	attrs := []any{"survey_id", surveyID, "stream", stream, "passes_in_a_row", s.distrust,
		"anomalies", s.pass.anomalyText(), "list_calls", calls, "next_poll_in", s.next.Sub(s.t1).Round(time.Second).String()}
	if s.err != nil {
		attrs = append(attrs, "err", s.err)
	}
	p.o.Logger.Warn(NotBelieved+"; the stream backs off (logged once per back-off step)", attrs...)
}

// cycle reads one stream of one survey from its watermark to now. It
// returns how many responses were new or changed (not held at the listed
// status).
func (p *Poller) cycle(ctx context.Context, surveyID int64, stream string) (int, error) {
	c, err := p.run(ctx, surveyID, stream, 0)
	if c == nil {
		return 0, err
	}
	return int(c.found.Load()), err
}

// run is one cycle; distrust is the number of passes in a row before it
// whose lists were not believed. The pass is nil when the range was empty.
func (p *Poller) run(ctx context.Context, surveyID int64, stream string, distrust int) (*pass, error) {
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
	rescan := false
	if !st.Watermark.IsZero() {
		back := p.o.Overlap
		if stream == pipeline.StreamPartial && distrust == 0 {
			// A stream whose lists are not believed does not rescan: its
			// lists may show the same partials whatever was asked, and a
			// rescan re-reads each of them.
			p.mu.Lock()
			if now.Sub(p.rescan[key]) >= p.o.PartialRescanInterval {
				back = p.o.PartialLookback
				rescan = true
				p.rescan[key] = now
			}
			p.mu.Unlock()
		}
		from = st.Watermark.Add(-back)
		if from.Before(p.o.BackfillFrom) {
			from = p.o.BackfillFrom
		}
	}
	if st.Watermark.IsZero() && stream == pipeline.StreamPartial {
		p.mu.Lock()
		p.rescan[key] = now // a backfill reads the whole lookback too
		p.mu.Unlock()
	}
	if !to.After(from) {
		return nil, nil
	}
	start := p.o.Now()
	// After the backfill, most of what a cycle lists was written before:
	// let the pipeline skip unchanged details.
	c := &pass{survey: surveyID, stream: stream, rescan: rescan, start: start,
		tr: &tracker{mark: st.Watermark, done: make(chan struct{}, 1), skipUnchanged: !st.Watermark.IsZero()}}
	p.progMu.Lock()
	p.inflight[key] = c
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
		st.CycleListed, st.CycleDone = c.listed.Load(), c.done.Load()
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
				l, d := c.listed.Load(), c.done.Load()
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
	err := p.split(ctx, c, from, to, nil)
	// Wait for every submitted response to be acknowledged, saving progress.
	for {
		mark, inflight, werr := c.tr.snapshot()
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
		case <-c.tr.done:
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return c, ctx.Err()
	}
	stopProgress()
	<-progStopped
	st.CycleStartedAt, st.CycleListed, st.CycleDone = time.Time{}, 0, 0
	st.LastRunAt = start
	st.Synced += c.synced.Load()
	st.LastError = ""
	outcome := "ok"
	if err != nil {
		st.LastError = err.Error()
		outcome = "error"
	}
	if !c.believed() {
		st.LastError = fmt.Sprintf("%s (%s; %d passes in a row): backing off", NotBelieved, c.anomalyText(), distrust+1)
		if err != nil {
			st.LastError += ": " + err.Error()
		}
	}
	p.m.cycles.WithLabelValues(stream, outcome).Inc()
	p.m.cycleSeconds.WithLabelValues(stream).Observe(p.o.Now().Sub(start).Seconds())
	p.save(ctx, key, st)
	return c, err
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

func (p *Poller) list(ctx context.Context, c *pass, from, to time.Time, page int) (*survey.ResponseList, error) {
	c.calls.Add(1)
	l, err := p.lister.ListResponses(ctx, c.survey, p.query(c.stream, from, to, page))
	if err != nil {
		return nil, fmt.Errorf("list %s responses of survey %d from %s to %s page %d: %w",
			c.stream, c.survey, survey.FormatTime(from), survey.FormatTime(to), page, err)
	}
	if l.Total < 0 {
		l.Total = 0
	}
	return l, nil
}

// split pages [from, to) as one window, or as two halves when it holds more
// than MaxWindowResponses. first is the window's first page when already
// read. A total is only a claim: when the halves together claim much more
// than the window did, the totals are not believed and the window is paged
// whole, under the page cap (a total of 10^9 must not split a window into
// 10^9 pieces).
func (p *Poller) split(ctx context.Context, c *pass, from, to time.Time, first *survey.ResponseList) error {
	if first == nil {
		var err error
		if first, err = p.list(ctx, c, from, to, 1); err != nil {
			return err
		}
		// The cycle's whole window (halves come with their first page):
		// what its progress counts towards.
		c.listed.Add(int64(first.Total))
	}
	if first.Total > p.o.MaxWindowResponses && to.Sub(from) > 2*time.Second {
		mid := from.Add(to.Sub(from) / 2).Truncate(time.Second)
		left, err := p.list(ctx, c, from, mid, 1)
		if err != nil {
			return err
		}
		right, err := p.list(ctx, c, mid, to, 1)
		if err != nil {
			return err
		}
		if left.Total+right.Total <= first.Total+first.Total/2+p.o.PerPage {
			if err := p.split(ctx, c, from, mid, left); err != nil {
				return err
			}
			return p.split(ctx, c, mid, to, right)
		}
		p.anomaly(c, anImplausibleTotal)
		p.o.Logger.Debug("list totals are implausible (the halves of a window claim more than the window); paging the window whole, under the page cap",
			"survey_id", c.survey, "stream", c.stream, "total", first.Total, "left", left.Total, "right", right.Total)
	}
	return p.page(ctx, c, from, to, first)
}

// maxPages is the page cap of one pass over a window claiming total.
func (p *Poller) maxPages(total, absolute int) int {
	n := total/p.o.PerPage + 1
	return min(n+n/10+2, absolute)
}

// page submits every response of one window. If the window's total changes
// while it is paged, items may have shifted between pages: it is paged again
// (a response submitted twice is written idempotently). A pass stops at a
// short page, at the page its total says is the last, or at a page that
// adds no id new to the pass (a service repeating a page); a pass longer
// than its cap fails the window.
func (p *Poller) page(ctx context.Context, c *pass, from, to time.Time, first *survey.ResponseList) error {
	w := c.tr.open(from, to)
	defer c.tr.sealed(w)
	// Never sized by the total: it is only the service's claim.
	seen := make(map[survey.GUID]int8, min(first.Total, 4*p.o.PerPage))
	cur := first
	for attempt := int8(1); ; attempt++ {
		total := cur.Total
		limit := p.maxPages(total, p.o.MaxWindowPages)
		for page := 1; ; page++ {
			if page > 1 {
				var err error
				if cur, err = p.list(ctx, c, from, to, page); err != nil {
					p.failWindow(c.tr, w, err)
					return err
				}
			}
			p.m.pages.WithLabelValues(c.stream).Inc()
			added := 0
			for _, it := range cur.Data {
				prev, dup := seen[it.ResponseID]
				if prev == attempt {
					continue
				}
				seen[it.ResponseID] = attempt
				added++
				if dup {
					continue // submitted in an earlier pass
				}
				if err := p.consider(ctx, c, w, it.ResponseID); err != nil {
					return err
				}
			}
			p.m.listed.WithLabelValues(c.stream).Add(float64(len(cur.Data)))
			if len(cur.Data) < p.o.PerPage || page*p.o.PerPage >= cur.Total {
				break
			}
			if added == 0 {
				p.anomaly(c, anPageAddsNothing)
				p.o.Logger.Debug("a list page repeated ids already read in this pass; paging stops", "survey_id", c.survey,
					"stream", c.stream, "page", page, "total", cur.Total)
				break
			}
			if page >= limit {
				p.anomaly(c, anPageCap)
				err := fmt.Errorf("list %s responses of survey %d from %s to %s: still more pages after %d (total claims %d): page cap reached",
					c.stream, c.survey, survey.FormatTime(from), survey.FormatTime(to), page, cur.Total)
				p.failWindow(c.tr, w, err)
				return err
			}
		}
		if cur.Total == total {
			return nil
		}
		if attempt >= 3 {
			// Still moving after three passes: a response may have
			// landed on a page already read. The window is not
			// acknowledged, so the watermark stays before it and the
			// next cycle reads it again (the re-reads are idempotent).
			p.anomaly(c, anTotalUnstable)
			err := fmt.Errorf("list %s responses of survey %d from %s to %s: total changed during each of %d passes (last %d, then %d): window read again next cycle",
				c.stream, c.survey, survey.FormatTime(from), survey.FormatTime(to), attempt, total, cur.Total)
			p.failWindow(c.tr, w, err)
			return err
		}
		p.m.reread.WithLabelValues(c.stream).Inc()
		p.o.Logger.Info("window changed while paged; paging it again", "survey_id", c.survey, "stream", c.stream,
			"total_before", total, "total_after", cur.Total)
		var err error
		if cur, err = p.list(ctx, c, from, to, 1); err != nil {
			p.failWindow(c.tr, w, err)
			return err
		}
	}
}

// consider submits a listed response unless it is held at the listed
// status: a completed, disqualified or quota-full response cannot change
// but by deletion (which reconcile finds), and a partial one is re-read
// only by the partial stream's rescans.
func (p *Poller) consider(ctx context.Context, c *pass, w *window, id survey.GUID) error {
	h := p.held.get(c.survey, id)
	same := sameStatus(c.stream, h)
	if same && !(c.rescan && h&^hsRejected == hsPartial) {
		p.m.skipped.WithLabelValues(c.stream).Inc()
		c.done.Add(1)
		return nil
	}
	if !same {
		c.found.Add(1)
	}
	return p.submit(ctx, c.tr, w, c.survey, id, "poll", c.stream, func() { c.synced.Add(1); c.done.Add(1) })
}

func (p *Poller) failWindow(tr *tracker, w *window, err error) {
	tr.mu.Lock()
	if w.failed == nil {
		w.failed = err
	}
	tr.mu.Unlock()
}

// submit hands a ref to the pipeline; once it is written, the response is
// held at status (when not empty).
func (p *Poller) submit(ctx context.Context, tr *tracker, w *window, surveyID int64, id survey.GUID, source, status string, count func()) error {
	tr.mu.Lock()
	w.pending++
	tr.mu.Unlock()
	rejected := false
	err := p.sub.Submit(ctx, pipeline.Ref{
		SurveyID: surveyID, ResponseID: id, Source: source, SkipUnchanged: tr.skipUnchanged,
		OnReject: func() { rejected = true },
		Done: func(err error) {
			if err == nil {
				count()
				switch {
				case status == "":
				case rejected:
					p.held.putRejected(surveyID, id, status)
				default:
					p.held.put(surveyID, id, status)
				}
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
// as a late completion dated before the watermark's overlap). A quota-full
// response, listed as quotafull but detailed as disqualified, is no change.
func (p *Poller) reconcile(ctx context.Context, surveyID int64) (err error) {
	start := p.o.Now()
	have, err := p.inv.CurrentResponses(ctx, surveyID)
	if err != nil {
		return fmt.Errorf("reconcile survey %d: read warehouse ids: %w", surveyID, err)
	}
	listed := make(map[survey.GUID]struct{}, len(have))
	var missing, changed []survey.GUID
	var missingSt, changedSt []string
	absolute := p.o.MaxReconcileResponses/p.o.PerPage + 10
	var calls int64
	defer func() {
		if errors.Is(err, errNotBelieved) {
			p.spentDistrusted(calls)
		}
	}()
	for _, stream := range p.o.Statuses {
		limit := absolute
		for page := 1; ; page++ {
			q := survey.ListQuery{Page: page, PerPage: p.o.PerPage, Status: stream}
			calls++
			l, err := p.lister.ListResponses(ctx, surveyID, q)
			if err != nil {
				return fmt.Errorf("reconcile survey %d: list %s page %d: %w", surveyID, stream, page, err)
			}
			if page == 1 {
				if l.Total > p.o.MaxReconcileResponses {
					p.m.hostile.WithLabelValues("reconcile_too_big").Inc()
					return fmt.Errorf("reconcile survey %d: the %s list claims %d responses, more than the %d reconcile holds in memory; not reconciled: %w",
						surveyID, stream, l.Total, p.o.MaxReconcileResponses, errNotBelieved)
				}
				limit = p.maxPages(max(l.Total, 0), absolute)
			}
			added := 0
			for _, it := range l.Data {
				if _, dup := listed[it.ResponseID]; dup {
					continue
				}
				added++
				listed[it.ResponseID] = struct{}{}
				status, ok := have[it.ResponseID]
				switch {
				case !ok && p.rejectedAt(surveyID, it.ResponseID, stream):
					// Rejected when listed so: reading it again would
					// reject it again (a changed one is listed otherwise).
					p.m.reconciled.WithLabelValues("rejected_unchanged").Inc()
				case !ok:
					missing = append(missing, it.ResponseID)
					missingSt = append(missingSt, stream)
				case !sameStatus(stream, statusCode(status)):
					changed = append(changed, it.ResponseID)
					changedSt = append(changedSt, stream)
				}
			}
			if len(l.Data) < p.o.PerPage || page*p.o.PerPage >= l.Total {
				break
			}
			if added == 0 {
				p.m.hostile.WithLabelValues("page_adds_nothing").Inc()
				break
			}
			if page >= limit || len(listed) > p.o.MaxReconcileResponses+len(have) {
				p.m.hostile.WithLabelValues("page_cap").Inc()
				return fmt.Errorf("reconcile survey %d: list %s: still more pages after %d (total claims %d): page cap reached: %w",
					surveyID, stream, page, l.Total, errNotBelieved)
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
	ids := slices.Concat(vanished, missing, changed)
	sts := slices.Concat(make([]string, len(vanished)), missingSt, changedSt)
	for i, id := range ids {
		if err := p.submit(ctx, tr, w, surveyID, id, "reconcile", sts[i], noop); err != nil {
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

// rejectedAt reports whether a response was rejected when a list of stream
// showed it (and is listed so still).
func (p *Poller) rejectedAt(surveyID int64, id survey.GUID, stream string) bool {
	h := p.held.get(surveyID, id)
	return h&hsRejected != 0 && sameStatus(stream, h)
}

// logProgress logs, every ProgressInterval while cycles have been running
// longer than that (a backfill), how far they are: responses written of
// those listed, the rate, and an estimate of the time left.
func (p *Poller) logProgress(ctx context.Context) {
	for {
		select {
		case <-p.o.After(p.o.ProgressInterval):
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
