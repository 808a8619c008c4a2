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
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/internal/logonce"
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

// RejectInventory is implemented by an Inventory that can list a survey's
// responses rejected when a list showed them and not written since, with
// that list's status: they are held as rejected at a survey's first cycle
// and at every reconcile, so that after a restart an unchanged rejected
// response is not read again (and adds no new reject record), while one
// listed at another status is (issue 19).
type RejectInventory interface {
	RejectedResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error)
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
	ReconcileInterval     time.Duration // 24 h; negative disables
	// OnReconcile hears what every reconcile pass found (the daemon's
	// verification figures); nil: nobody. Called from the pass's goroutine.
	OnReconcile        func(ReconcileReport)
	BackfillFrom       time.Time // 2000-01-01
	PerPage            int       // 1000
	MaxWindowResponses int       // 20 000

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
	o Options
	// reconciling holds a token while a reconcile pass runs: one at a
	// time, poller-wide (reconcile.go).
	reconciling chan struct{}
	lister      Lister
	sub         Submitter
	states      pipeline.StateStore
	inv         Inventory
	m           *metrics
	held        *held
	budget      *budget // nil without Options.CallCount

	mu      sync.Mutex
	state   map[streamKey]pipeline.StreamState
	rescan  map[streamKey]time.Time // last full rescan of a partial stream
	surveys map[int64]*surveyRun
	ended   map[int64]bool     // surveys to start at the ended cadence
	adds    map[int64]struct{} // surveys to add, under mu; addSig tells Run
	removed map[int64]bool     // configured surveys RemoveSurvey took out (a Run again skips them), under mu
	addSig  chan struct{}
	wakeAll chan struct{}
	// resyncSig tells Run's resync runner that Resync queued a job.
	resyncSig chan struct{}

	firstMu      sync.Mutex
	firstPending map[int64]bool  // configured surveys whose first cycle is not done
	firstFailed  map[int64]error // configured surveys that cannot be read
	firstDone    chan struct{}
	ran          bool // Run ran before (under firstMu)

	progMu   sync.Mutex
	inflight map[streamKey]*pass // cycles running now, for the progress log

	distrustCalls atomic.Int64 // list calls spent on answers not believed

	// failLog logs failed cycles and reconciles once per root cause and
	// back-off step, with a count: a revoked token fails every stream of
	// every survey at once (issue 19).
	failLog *logonce.Limiter
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
		m:    newMetrics(o.Registerer, o.Statuses),
		held: newHeld(o.HeldMax),
		// One reconcile pass at a time, poller-wide (reconcile.go).
		reconciling: make(chan struct{}, 1),
		state:       map[streamKey]pipeline.StreamState{},
		rescan:      map[streamKey]time.Time{},
		surveys:     map[int64]*surveyRun{},
		ended:       map[int64]bool{},
		adds:        map[int64]struct{}{},
		removed:     map[int64]bool{},
		addSig:      make(chan struct{}, 1),
		wakeAll:     make(chan struct{}, 1),

		resyncSig: make(chan struct{}, 1),

		firstPending: map[int64]bool{},
		firstFailed:  map[int64]error{},
		firstDone:    make(chan struct{}),
		inflight:     map[streamKey]*pass{},
	}
	p.failLog = logonce.New(o.Logger, time.Second, 5*time.Minute, o.Now)
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
	delete(p.removed, id)
	p.mu.Unlock()
	select {
	case p.addSig <- struct{}{}:
	default: // Run has a signal pending already; it takes every add
	}
}

// RemoveSurvey stops polling a survey (surveys_exclude, at a reload): its
// loop ends after the call in flight, its checkpoints stay, and it no
// longer holds the first pass open. AddSurvey starts it again.
func (p *Poller) RemoveSurvey(id int64) {
	p.mu.Lock()
	delete(p.adds, id)
	p.removed[id] = true
	r, ok := p.surveys[id]
	if ok {
		delete(p.surveys, id)
		r.cancel()
	}
	p.mu.Unlock()
	p.markFirstPass(id, nil)
	if ok {
		p.o.Logger.Info("survey no longer polled", "survey_id", id)
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

// Surveys returns the surveys being polled now, in ascending order.
func (p *Poller) Surveys() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int64, 0, len(p.surveys))
	for id := range p.surveys {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
