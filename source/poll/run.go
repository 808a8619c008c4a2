package poll

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
)

// Run polls until ctx is done. It returns nil on a clean stop.
func (p *Poller) Run(ctx context.Context) error {
	earlier, err := p.resume(ctx)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	start := func(id int64) { p.startSurvey(gctx, g, id) }
	p.beginFirstPass()
	for _, id := range p.o.Surveys {
		p.mu.Lock()
		gone := p.removed[id] // excluded at a reload since New
		p.mu.Unlock()
		if !gone {
			start(id)
		}
	}
	for _, id := range earlier {
		start(id) // a configured one is only woken
	}
	if p.budget != nil {
		g.Go(func() error { return p.budget.run(gctx, p.o.BudgetTick, p.o.After) })
	}
	g.Go(func() error { p.logProgress(gctx); return nil })
	g.Go(func() error { p.serveSignals(gctx, start); return nil })
	g.Go(func() error { p.serveResyncs(gctx); return nil })
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// resume loads the streams' checkpoints and returns the surveys of an
// earlier run, sorted. Run may run again after it returned (a daemon that
// leads again, docs/operations.md "High availability"): the surveys of the
// earlier run, configured or added since, start again from the checkpoints
// just read; the first pass is not repeated.
func (p *Poller) resume(ctx context.Context) ([]int64, error) {
	states, err := p.states.LoadStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("poll: load sync state: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range states {
		p.state[streamKey{s.SurveyID, s.Stream}] = s
	}
	earlier := make([]int64, 0, len(p.surveys))
	for id := range p.surveys {
		earlier = append(earlier, id)
	}
	slices.Sort(earlier)
	clear(p.surveys)
	return earlier, nil
}

// startSurvey starts a survey's loop in g, or wakes it (at the normal
// cadence again) when it runs already. A survey's loop ends with gctx, or
// alone when the survey is retired (its context cancelled).
func (p *Poller) startSurvey(gctx context.Context, g *errgroup.Group, id int64) {
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

// beginFirstPass makes the configured surveys' first pass pending, on the
// first Run only.
func (p *Poller) beginFirstPass() {
	p.firstMu.Lock()
	defer p.firstMu.Unlock()
	if p.ran {
		return
	}
	p.ran = true
	p.mu.Lock()
	for _, id := range p.o.Surveys {
		if !p.removed[id] {
			p.firstPending[id] = true
		}
	}
	p.mu.Unlock()
	if len(p.firstPending) == 0 {
		close(p.firstDone)
	}
}

// serveSignals starts the surveys AddSurvey asked for and wakes every
// survey on Wake, until ctx is done.
func (p *Poller) serveSignals(ctx context.Context, start func(int64)) {
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
		case <-ctx.Done():
			return
		}
	}
}
