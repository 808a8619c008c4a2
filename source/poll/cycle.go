package poll

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

// pass is one cycle of one stream.
type pass struct {
	survey int64
	stream string
	tr     *tracker
	rescan bool         // a partial stream's full rescan: held partials are re-read
	resync bool         // a resync (resync.go): every listed response is rewritten
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
// It pages the stream's range, waits for every submitted response to be
// acknowledged while moving the watermark, and saves the outcome.
func (p *Poller) run(ctx context.Context, surveyID int64, stream string, distrust int) (*pass, error) {
	key := streamKey{surveyID, stream}
	st := p.stateOf(key)
	from, to, rescan := p.cycleRange(key, st.Watermark, distrust)
	if !to.After(from) {
		return nil, nil
	}
	// After the backfill, most of what a cycle lists was written before:
	// let the pipeline skip unchanged details.
	c := &pass{survey: surveyID, stream: stream, rescan: rescan, start: p.o.Now(),
		tr: &tracker{mark: st.Watermark, done: make(chan struct{}, 1), skipUnchanged: !st.Watermark.IsZero()}}
	p.track(key, c)
	defer p.untrack(key)
	st.CycleStartedAt = c.start
	cs := &cycleState{p: p, key: key, c: c, st: st}
	stopSaver := cs.saveProgress(ctx)
	defer stopSaver()
	err := p.split(ctx, c, from, to, nil)
	err = cs.awaitAcks(ctx, err)
	if ctx.Err() != nil {
		return c, ctx.Err()
	}
	stopSaver()
	p.finish(ctx, cs, distrust, err)
	return c, err
}

// stateOf returns a stream's checkpoint, or a new one.
func (p *Poller) stateOf(key streamKey) pipeline.StreamState {
	p.mu.Lock()
	st, ok := p.state[key]
	p.mu.Unlock()
	if !ok {
		st = pipeline.StreamState{SurveyID: key.survey, Stream: key.stream}
	}
	return st
}

// cycleRange is the range a cycle of a stream at watermark reads: from
// BackfillFrom on the first cycle, else from the watermark less the
// overlap, up to now less the settle lag. A partial stream re-reads its
// whole lookback (a rescan) every PartialRescanInterval, unless its lists
// are not believed (distrust > 0): they may show the same partials
// whatever was asked, and a rescan re-reads each of them. A backfill of a
// partial stream counts as a rescan's time but not as a rescan.
func (p *Poller) cycleRange(key streamKey, watermark time.Time, distrust int) (from, to time.Time, rescan bool) {
	now := p.o.Now()
	to = now.Add(-p.o.SettleLag).Truncate(time.Second)
	from = p.o.BackfillFrom
	if !watermark.IsZero() {
		back := p.o.Overlap
		if key.stream == pipeline.StreamPartial && distrust == 0 {
			p.mu.Lock()
			if now.Sub(p.rescan[key]) >= p.o.PartialRescanInterval {
				back = p.o.PartialLookback
				rescan = true
				p.rescan[key] = now
			}
			p.mu.Unlock()
		}
		from = watermark.Add(-back)
		if from.Before(p.o.BackfillFrom) {
			from = p.o.BackfillFrom
		}
	}
	if watermark.IsZero() && key.stream == pipeline.StreamPartial {
		p.mu.Lock()
		p.rescan[key] = now // a backfill reads the whole lookback too
		p.mu.Unlock()
	}
	return from, to, rescan
}

// track makes a running cycle count in the progress log; untrack ends it.
func (p *Poller) track(key streamKey, c *pass) {
	p.progMu.Lock()
	p.inflight[key] = c
	p.progMu.Unlock()
}

func (p *Poller) untrack(key streamKey) {
	p.progMu.Lock()
	delete(p.inflight, key)
	p.progMu.Unlock()
}

// cycleState is a stream's checkpoint during a cycle. It is saved by the
// cycle's goroutine (the watermark moves) and, during a long cycle, by the
// progress saver; mu orders the two.
type cycleState struct {
	p   *Poller
	key streamKey
	c   *pass

	mu sync.Mutex
	st pipeline.StreamState
}

// saveLocked saves the checkpoint with the cycle's progress; under mu.
func (cs *cycleState) saveLocked(ctx context.Context) {
	cs.st.CycleListed, cs.st.CycleDone = cs.c.listed.Load(), cs.c.done.Load()
	cs.p.save(ctx, cs.key, cs.st)
}

// saveProgress saves the checkpoint, with the watermark as far as the
// windows acknowledged so far, every ProgressInterval while the cycle's
// progress changes, until ctx ends or the returned stop is called;
// stop waits for the saver to end and may be called more than once.
func (cs *cycleState) saveProgress(ctx context.Context) (stop func()) {
	progCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(cs.p.o.ProgressInterval)
		defer t.Stop()
		var lastL, lastD int64 = -1, -1
		for {
			select {
			case <-t.C:
				l, d := cs.c.listed.Load(), cs.c.done.Load()
				// The watermark moves with the saved progress too: a
				// long cycle still paging (a backfill, a resync) keeps
				// what is written if it is interrupted.
				mark, _, _ := cs.c.tr.snapshot()
				cs.mu.Lock()
				moved := mark.After(cs.st.Watermark)
				if moved {
					cs.st.Watermark = mark
				}
				if moved || l != lastL || d != lastD {
					lastL, lastD = l, d
					cs.saveLocked(ctx)
				}
				cs.mu.Unlock()
			case <-progCtx.Done():
				return
			}
		}
	}()
	return func() { cancel(); <-stopped }
}

// awaitAcks waits until every submitted response of the cycle is
// acknowledged (or ctx ends), moving and saving the watermark as windows
// are acknowledged. It returns err, or else the first window's failure.
func (cs *cycleState) awaitAcks(ctx context.Context, err error) error {
	tr := cs.c.tr
	for {
		mark, inflight, werr := tr.snapshot()
		if mark.After(cs.st.Watermark) {
			cs.mu.Lock()
			cs.st.Watermark = mark
			cs.saveLocked(ctx)
			cs.mu.Unlock()
		}
		if inflight == 0 || ctx.Err() != nil {
			if err == nil {
				err = werr
			}
			return err
		}
		select {
		case <-tr.done:
		case <-ctx.Done():
		}
	}
}

// finish saves the outcome of a cycle that ran to its end (the progress
// saver stopped): no cycle in progress, the responses synced, and the last
// error, marked as not believed when a list answer was not.
func (p *Poller) finish(ctx context.Context, cs *cycleState, distrust int, err error) {
	c, st := cs.c, cs.st
	st.CycleStartedAt, st.CycleListed, st.CycleDone = time.Time{}, 0, 0
	st.LastRunAt = c.start
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
	p.m.cycles.WithLabelValues(c.stream, outcome).Inc()
	p.m.cycleSeconds.WithLabelValues(c.stream).Observe(p.o.Now().Sub(c.start).Seconds())
	p.save(ctx, cs.key, st)
}

func (p *Poller) save(ctx context.Context, key streamKey, st pipeline.StreamState) {
	st.UpdatedAt = p.o.Now()
	p.mu.Lock()
	p.state[key] = st
	p.mu.Unlock()
	if !IsResync(key.stream) {
		p.m.watermark.WithLabelValues(strconv.FormatInt(key.survey, 10), key.stream).Set(float64(st.Watermark.Unix()))
	}
	if err := p.states.SaveStates(ctx, []pipeline.StreamState{st}); err != nil && ctx.Err() == nil {
		// The watermark stays in memory and is saved with the next step;
		// a crash before that re-reads, it does not lose.
		p.o.Logger.Warn("save sync state failed", "survey_id", key.survey, "stream", key.stream, "err", err)
	}
}
