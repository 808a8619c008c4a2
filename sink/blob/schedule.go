package blob

import (
	"context"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// Run copies queued files with at most MaxConcurrency copies at once,
// retries failures with backoff, reloads unfinished files from the index
// every IndexInterval and writes index rows, until ctx is done. On the way
// out, files still waiting are recorded in the index as pending so that the
// next run copies them; copies in flight are cancelled (nothing of them
// appears in the store). Run returns nil after a clean stop.
func (c *Copier) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for range c.o.MaxConcurrency {
		g.Go(func() error {
			for {
				t, ok := c.q.pop(gctx)
				if !ok {
					return nil
				}
				c.process(gctx, t)
			}
		})
	}
	g.Go(func() error { c.loop(gctx); return nil })
	_ = g.Wait()

	// Record what is left so the next run finds it in the index.
	now := c.o.Now()
	for _, t := range c.q.drain() {
		if t.del || c.storedThisRun(t.ref) {
			continue // the response will be seen deleted again by reconcile
		}
		c.record(files.Record{FileRef: t.ref, StoredAt: now, Error: "pending: not copied before shutdown", Attempts: t.attempts})
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.flush(fctx); err != nil {
		c.o.Logger.Error("file index rows could not be written at shutdown; the files will be found again when their responses are read", "rows", c.bufferedRows(), "err", err)
	}
	return nil
}

func (c *Copier) loop(ctx context.Context) {
	tick := time.NewTicker(min(c.o.RetryInitial/2, c.o.FlushInterval, 500*time.Millisecond))
	defer tick.Stop()
	lastFlush, lastReload, lastDiscover := c.o.Now(), time.Time{}, time.Time{}
	disc, _ := c.idx.(files.Discoverer)
	for {
		now := c.o.Now()
		if disc != nil && now.Sub(lastDiscover) >= c.o.DiscoverInterval {
			lastDiscover = now
			c.discover(ctx, disc)
		}
		if c.idx != nil && now.Sub(lastReload) >= c.o.IndexInterval {
			lastReload = now
			c.reload(ctx)
		}
		c.q.promote(now)
		if now.Sub(lastFlush) >= c.o.FlushInterval || c.bufferedRows() >= c.o.FlushRows {
			lastFlush = now
			if err := c.flush(ctx); err != nil && ctx.Err() == nil {
				c.m.failures.WithLabelValues(ReasonIndex).Inc()
				c.o.Logger.Warn("file index rows not written; kept and retried", "rows", c.bufferedRows(), "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.flushC:
		}
	}
}

// discover queues files named in stored answers that the index has never
// seen.
func (c *Copier) discover(ctx context.Context, disc files.Discoverer) {
	refs, err := disc.Undiscovered(ctx, c.o.TypeMatch, c.o.QueueSize)
	if err != nil {
		if ctx.Err() == nil {
			c.m.failures.WithLabelValues(ReasonIndex).Inc()
			c.o.Logger.Warn("cannot look for undiscovered files in the index; will try again", "err", err)
		}
		return
	}
	if len(refs) > 0 {
		c.o.Logger.Info("found files named in stored answers but never copied", "files", len(refs))
		c.Enqueue(refs...)
	}
}

// reload queues the files the index lists as not stored yet whose backoff
// has passed.
func (c *Copier) reload(ctx context.Context) {
	room := c.q.room()
	if room <= 0 {
		return
	}
	recs, err := c.idx.Pending(ctx, room)
	if err != nil {
		if ctx.Err() == nil {
			c.m.failures.WithLabelValues(ReasonIndex).Inc()
			c.o.Logger.Warn("cannot list unfinished files in the index; will try again", "err", err)
		}
		return
	}
	now := c.o.Now()
	for _, r := range recs {
		if r.Attempts >= c.o.MaxAttempts {
			continue
		}
		wait := c.retryWait(r.Attempts)
		if strings.HasPrefix(r.Error, permanentPrefix) {
			wait = c.o.RetryMax
		}
		if r.Attempts > 0 && r.StoredAt.Add(wait).After(now) {
			continue
		}
		// A file stored by this run is skipped: the row read may predate it.
		c.q.push(task{ref: r.FileRef, attempts: r.Attempts}, c.skipStored)
	}
}

// HandleResponse finds the files of r and queues them; it never blocks
// (pipeline.Options.OnResponse). A deleted response has its files marked
// instead. Files this run already stored are not queued again. When the
// queue is full, the files are written to the index as pending and are
// copied by a later reload.
func (c *Copier) HandleResponse(ctx context.Context, r *survey.Response) {
	if r == nil {
		return
	}
	if r.ResponseStatus == survey.StatusDeleted {
		c.MarkDeleted(r.SurveyID, r.ResponseID)
		return
	}
	c.Enqueue(files.FindFiles(r, c.o.TypeMatch)...)
}

// Enqueue queues files to copy without blocking; see HandleResponse.
func (c *Copier) Enqueue(refs ...files.FileRef) {
	now := c.o.Now()
	for _, ref := range refs {
		if c.q.push(task{ref: ref}, c.skipSettled) {
			continue
		}
		c.m.failures.WithLabelValues(ReasonQueueFull).Inc()
		c.record(files.Record{FileRef: ref, StoredAt: now, Error: "pending: copy queue full"})
	}
}

// QueueDepth is the number of files waiting (queued or waiting to retry).
func (c *Copier) QueueDepth() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return len(c.q.ready) + len(c.q.delayed)
}

// Idle reports whether nothing is queued, waiting, in flight or unwritten
// to the index.
func (c *Copier) Idle() bool {
	c.q.mu.Lock()
	held := len(c.q.held)
	c.q.mu.Unlock()
	return held == 0 && c.bufferedRows() == 0
}

// Drained reports whether nothing is queued or in flight and every index
// row is written; files waiting for a retry do not count (their failure is
// already in the index, and a later pass or run retries them). Use it to
// decide that a one-shot sync is done; Idle waits for the retries too.
func (c *Copier) Drained() bool {
	c.q.mu.Lock()
	busy := len(c.q.held) - len(c.q.delayed)
	c.q.mu.Unlock()
	return busy == 0 && c.bufferedRows() == 0
}
