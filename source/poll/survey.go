package poll

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/survey"
)

// surveyLoop is one survey's loop state (runSurvey): its streams'
// schedules, when it last found something, and when it reconciles next.
type surveyLoop struct {
	id            int64
	run           *surveyRun
	scheds        map[string]*sched
	lastNew       time.Time // a survey starts active
	nextReconcile time.Time // zero: due at the first round
}

// runSurvey polls one survey until ctx is done: each round runs the
// streams that are due (all of them when the survey is ending), reschedules
// them, reports the first pass, reconciles when due, and sleeps until the
// next stream or reconcile is due or the survey is woken.
func (p *Poller) runSurvey(ctx context.Context, id int64, r *surveyRun) error {
	if !p.preloadHeld(ctx, id) {
		return nil
	}
	l := p.newSurveyLoop(id, r)
	for {
		p.mu.Lock()
		ending, ended := r.ending, r.ended
		p.mu.Unlock()
		now := p.o.Now()
		ran := p.runDue(ctx, l, now, ending)
		if ctx.Err() != nil {
			return nil
		}
		p.afterRound(l, ran, now, ended && !ending)
		p.reportFirstPass(l)
		if !p.reconcileIfDue(ctx, l, ending) {
			return nil
		}
		if ending {
			p.settleEnded(l)
		}
		if !p.sleep(ctx, l) {
			return nil
		}
	}
}

// preloadHeld fills the held set with what the warehouse holds of a
// survey, and with the responses rejected and not written since: after a
// restart the overlap and the partial lookback are re-listed, and what the
// warehouse holds need not be fetched again, nor what was rejected at the
// status it is listed at. It returns false when ctx ended.
func (p *Poller) preloadHeld(ctx context.Context, id int64) bool {
	if p.inv == nil || p.o.HeldMax <= 0 {
		return true
	}
	have, err := p.inv.CurrentResponses(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		p.o.Logger.Warn("read the warehouse's responses failed; the first cycle re-reads the overlap", "survey_id", id, "err", err)
	}
	for rid, st := range have {
		p.held.put(id, rid, st)
	}
	rejected, err := p.rejectedResponses(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		p.o.Logger.Warn("read the rejected responses failed; a rejected response listed again is read again", "survey_id", id, "err", err)
	}
	p.holdRejected(id, rejected)
	return true
}

// rejectedResponses returns what the inventory knows of a survey's rejected
// responses not written since (none without a RejectInventory).
func (p *Poller) rejectedResponses(ctx context.Context, id int64) (map[survey.GUID]string, error) {
	ri, ok := p.inv.(RejectInventory)
	if !ok {
		return nil, nil
	}
	return ri.RejectedResponses(ctx, id)
}

// holdRejected holds each response of rejected as rejected at its listed
// status, unless the held set knows it already (from this process: as new
// as the records, or newer). The inventory returns only those not written
// since their reject, so a later write (a fixed response) wins over an old
// reject.
func (p *Poller) holdRejected(id int64, rejected map[survey.GUID]string) {
	for rid, st := range rejected {
		p.held.seedRejected(id, rid, st)
	}
}

func (p *Poller) newSurveyLoop(id int64, r *surveyRun) *surveyLoop {
	l := &surveyLoop{id: id, run: r, lastNew: p.o.Now(), scheds: make(map[string]*sched, len(p.o.Statuses))}
	for _, st := range p.o.Statuses {
		l.scheds[st] = &sched{}
	}
	return l
}

// runDue runs, concurrently, one cycle of every stream due at now (of
// every stream when ending) and returns the streams it ran.
func (p *Poller) runDue(ctx context.Context, l *surveyLoop, now time.Time, ending bool) []string {
	g, gctx := errgroup.WithContext(ctx)
	var ran []string
	for _, stream := range p.o.Statuses {
		s := l.scheds[stream]
		if !ending && s.next.After(now) {
			continue
		}
		ran = append(ran, stream)
		g.Go(func() error {
			p.runStream(gctx, l.id, stream, s)
			return nil
		})
	}
	_ = g.Wait()
	return ran
}

// runStream runs one cycle of a stream and records its outcome in s. A
// failure is logged here unless the pass was not believed (distrusted logs
// it once per back-off step) or the survey is unreadable (reportFirstPass
// logs it once for the survey).
func (p *Poller) runStream(ctx context.Context, id int64, stream string, s *sched) {
	s.t0 = p.o.Now()
	s.pass, s.err = p.run(ctx, id, stream, s.distrust)
	s.found = 0
	if s.pass != nil {
		s.found = int(s.pass.found.Load())
	}
	s.t1 = p.o.Now()
	if s.err != nil && ctx.Err() == nil && (s.pass == nil || s.pass.believed()) && !p.unreadable(s.err) {
		// One line per cause and back-off step: the same failure of
		// every stream of every survey (a revoked token) is one cause.
		why := errors.New(strings.ReplaceAll(s.err.Error(), stream, "#"))
		p.failLog.Log(slog.LevelWarn, "poll cycle failed; the window is read again next cycle", why,
			"survey_id", id, "stream", stream, "err", s.err)
	}
}

// unreadable reports whether err means the survey cannot be read at all
// (Options.Unreadable).
func (p *Poller) unreadable(err error) bool {
	return p.o.Unreadable != nil && p.o.Unreadable(err)
}

// afterRound reschedules the streams that ran in the round started at now:
// a round that found something keeps the survey active and brings its
// other streams back to their base interval; a pass not believed backs its
// stream off and is logged.
func (p *Poller) afterRound(l *surveyLoop, ran []string, now time.Time, ended bool) {
	found := 0
	for _, stream := range ran {
		s := l.scheds[stream]
		found += s.found
		s.ok = s.ok || s.err == nil
	}
	if found > 0 {
		l.lastNew = now
	}
	for _, stream := range ran {
		s := l.scheds[stream]
		p.reschedule(s, l.id, stream, ended, l.lastNew)
		if s.pass != nil && !s.pass.believed() {
			p.distrusted(l.id, stream, s)
		}
	}
	if found > 0 {
		for stream, s := range l.scheds {
			p.activate(s, stream, ended, now)
		}
	}
}

// reportFirstPass ends a configured survey's first pass once every stream
// succeeded once, or as failed when a stream found the survey unreadable
// (logged once per round).
func (p *Poller) reportFirstPass(l *surveyLoop) {
	allOK := true
	var unreadable error
	for _, s := range l.scheds {
		allOK = allOK && s.ok
		if unreadable == nil && s.err != nil && p.unreadable(s.err) {
			unreadable = s.err
		}
	}
	if unreadable != nil {
		p.o.Logger.Error("survey cannot be read: check its id in surveys and the token's rights; retried at the stream's interval",
			"survey_id", l.id, "err", unreadable)
		p.markFirstPass(l.id, unreadable)
	} else if allOK {
		p.markFirstPass(l.id, nil)
	}
}

// reconciles reports whether the poller runs reconcile passes.
func (p *Poller) reconciles() bool {
	return p.inv != nil && p.o.ReconcileInterval > 0
}

// reconcileIfDue runs a reconcile pass when one is due (always when the
// survey is ending) and sets the next. A failed pass is retried at the
// reconcile interval when its lists were not believed (asking again soon
// would get the same answer), else within MaxIdleInterval. It returns
// false when ctx ended.
func (p *Poller) reconcileIfDue(ctx context.Context, l *surveyLoop, ending bool) bool {
	if !p.reconciles() || !ending && p.o.Now().Before(l.nextReconcile) {
		return true
	}
	every := p.stretched(p.o.ReconcileInterval)
	var err error
	if ending {
		err = p.reconcile(ctx, l.id) // the survey's final pass waits its turn
	} else {
		var ran bool
		if ran, err = p.tryReconcile(ctx, l.id); !ran && err == nil {
			// Another survey's pass runs: try again after a cycle.
			l.nextReconcile = p.o.Now().Add(min(p.o.PollInterval, p.o.MaxIdleInterval))
			return true
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		p.m.reconciles.WithLabelValues("error").Inc()
		if errors.Is(err, errNotBelieved) {
			p.o.Logger.Warn("reconcile: list answers not believed; retried at the reconcile interval",
				"survey_id", l.id, "next_in", every, "err", err)
		} else {
			p.failLog.Log(slog.LevelWarn, "reconcile failed; retried later", err, "survey_id", l.id, "err", err)
			every = min(every, p.o.MaxIdleInterval)
		}
	} else {
		p.m.reconciles.WithLabelValues("ok").Inc()
	}
	l.nextReconcile = p.o.Now().Add(every)
	return true
}

// settleEnded puts a survey whose final sync is done on the ended
// cadence.
func (p *Poller) settleEnded(l *surveyLoop) {
	p.o.Logger.Info("survey ended: final sync done; polled every ended interval from now on", "survey_id", l.id,
		"interval", p.o.EndedInterval)
	p.mu.Lock()
	l.run.ending, l.run.ended = false, true
	p.mu.Unlock()
	for stream, s := range l.scheds {
		s.interval = p.o.EndedInterval
		s.next = p.o.Now().Add(p.stretched(p.o.EndedInterval))
		p.m.interval.WithLabelValues(strconv.FormatInt(l.id, 10), stream).Set(p.stretched(s.interval).Seconds())
	}
}

// nextDue is when the survey's next stream or reconcile is due: reconcile
// keeps its own interval, whatever the streams' back-off.
func (p *Poller) nextDue(l *surveyLoop) time.Time {
	next := time.Time{}
	for _, s := range l.scheds {
		if next.IsZero() || s.next.Before(next) {
			next = s.next
		}
	}
	if p.reconciles() && l.nextReconcile.Before(next) {
		next = l.nextReconcile
	}
	return next
}

// sleep waits until the survey's next due time, or until it is woken (then
// every stream is due). It returns false when ctx ended.
func (p *Poller) sleep(ctx context.Context, l *surveyLoop) bool {
	wait := p.nextDue(l).Sub(p.o.Now())
	if wait <= 0 {
		return true
	}
	select {
	case <-p.o.After(wait):
	case <-l.run.wake:
		for _, s := range l.scheds {
			s.next = time.Time{}
		}
	case <-ctx.Done():
		return false
	}
	return true
}
