package poll

import (
	"strconv"
	"time"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/pipeline"
)

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
		s.interval = max(s.interval, p.distrustBackoff(base).Step(s.distrust))
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

// distrustBackoff is the schedule of a stream whose list answers are not
// believed, by the number of such passes in a row: the stream's base
// interval doubled with each, up to SafetyNetInterval (or the base, when
// longer). Step, not Delay: the steps are exact, as issue 19 set them
// (each stream's steps start at its own first distrusted pass).
func (p *Poller) distrustBackoff(base time.Duration) backoff.Policy {
	return backoff.Policy{Initial: 2 * base, Max: max(p.o.SafetyNetInterval, base)}
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
