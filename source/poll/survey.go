package poll

import (
	"context"
	"errors"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
)

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
