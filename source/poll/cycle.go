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
