package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/pipeline/survey"
)

// Ref is one unit of work: a response to read and write. Done is called
// exactly once: with nil when the response's rows (or its deletion) are
// durably in the sink, with an error when they are not and the caller must
// try again later (the poller keeps its watermark, the webhook spool keeps
// its event).
type Ref struct {
	SurveyID   int64
	ResponseID survey.GUID
	Source     string // "poll", "webhook", "reconcile": a metric label
	Done       func(error)
	// SkipUnchanged acknowledges the ref without writing when the detail is
	// identical to the one this process last wrote for the response (the
	// poller sets it on re-reads of overlaps and partial rescans).
	SkipUnchanged bool
	// Urgent asks for the batch holding this ref to be flushed within
	// UrgentDelay rather than MaxDelay (webhooks: someone waits for the row).
	Urgent bool
	// OnNotFound, when set, decides what a 404 on the detail means: true
	// writes the deletion (what a ref without it gets), false acknowledges
	// the ref with ErrNotWritten and writes nothing. The webhook path sets
	// it: a 404 for a response never synced is no deletion to record (the
	// poller's reconcile finds real deletions).
	OnNotFound func(ctx context.Context) (deleteIt bool, err error)

	hash uint64 // content hash of the fetched detail, 0 when not computed
}

// Options tune the pipeline. Zero values take the defaults noted.
type Options struct {
	FetchConcurrency int           // concurrent detail fetches (16)
	MaxRows          int           // answer rows per batch (100 000)
	MaxBytes         int           // approximate bytes per batch (64 MiB)
	MaxDelay         time.Duration // longest a response waits in a batch (1 s)
	UrgentDelay      time.Duration // longest an Urgent ref waits in a batch (50 ms)
	RetryInitial     time.Duration // first wait after a failed sink write (500 ms)
	RetryMax         time.Duration // longest wait between sink write attempts (30 s)
	Allocator        memory.Allocator
	Logger           *slog.Logger
	Registerer       prometheus.Registerer
	Now              func() time.Time
	// OnResponse, when set, sees every written response after its rows are
	// durable (the file copier uses it); r is nil when the service answered
	// 404 (the response was removed). It must not block for long.
	OnResponse func(ctx context.Context, surveyID int64, responseID survey.GUID, r *survey.Response)
}

func (o *Options) defaults() {
	if o.FetchConcurrency <= 0 {
		o.FetchConcurrency = 16
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 100_000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Second
	}
	if o.UrgentDelay <= 0 || o.UrgentDelay > o.MaxDelay {
		o.UrgentDelay = min(50*time.Millisecond, o.MaxDelay)
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 500 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.Allocator == nil {
		o.Allocator = memory.NewGoAllocator()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// ErrClosed is returned by Submit once the pipeline no longer takes work.
var ErrClosed = errors.New("pipeline: closed to new work")

// Pipeline fetches, flattens, batches and writes responses. Build it with
// New, run it with Run, feed it with Submit, and stop it with CloseInput
// (soft: drain and flush) or by cancelling Run's context (hard: everything
// not yet written is reported to its Done with the context's error).
type Pipeline struct {
	o       Options
	fetcher Fetcher
	sink    Sink
	m       *metrics

	cache     *contentCache
	in        chan Ref
	closeOnce sync.Once
	closed    chan struct{}
	mu        sync.RWMutex // guards sends on in against close
	inClosed  bool
}

// New returns a pipeline reading details through f and writing to s.
func New(o Options, f Fetcher, s Sink) *Pipeline {
	o.defaults()
	return &Pipeline{
		o:       o,
		fetcher: f,
		sink:    s,
		m:       newMetrics(o.Registerer),
		in:      make(chan Ref, o.FetchConcurrency),
		cache:   newContentCache(200_000),
		closed:  make(chan struct{}),
	}
}

// Submit hands a response to the pipeline. It blocks while the pipeline is
// full (backpressure) until ctx is done or the pipeline is closed; on an
// error the ref was not taken and its Done is not called.
func (p *Pipeline) Submit(ctx context.Context, r Ref) error {
	if r.Done == nil {
		r.Done = func(error) {}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.inClosed {
		return ErrClosed
	}
	select {
	case p.in <- r:
		p.m.submitted.WithLabelValues(r.Source).Inc()
		return nil
	case <-p.closed:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CloseInput stops taking new work; Run drains what it holds, flushes and
// returns. It is safe to call more than once.
func (p *Pipeline) CloseInput() {
	p.closeOnce.Do(func() {
		close(p.closed) // wakes blocked Submits
		p.mu.Lock()
		p.inClosed = true
		close(p.in)
		p.mu.Unlock()
	})
}

// written is what OnResponse hears about a response once its rows are durable.
type written struct {
	surveyID   int64
	responseID survey.GUID
	resp       *survey.Response // nil: removed (404)
}

type fetched struct {
	item      flatten.Item
	ref       Ref
	resp      *survey.Response
	unchanged bool // identical to what was last written: acknowledged without a write
	notFound  bool // 404 and OnNotFound said not to write a deletion
}

// ErrNotWritten is given to a ref's Done when its detail answered 404 and
// its OnNotFound said not to write a deletion: nothing was written, and
// nothing is to retry.
var ErrNotWritten = errors.New("response not found (404) and not written as a deletion")

type batch struct {
	b    *flatten.Batch
	refs []Ref
	resp []written
	meta []itemMeta
	why  string
}

// Run runs the stages until the input is closed and drained (returns nil) or
// ctx is cancelled (returns ctx's error after reporting every unwritten ref).
func (p *Pipeline) Run(ctx context.Context) error {
	fetchedCh := make(chan fetched, p.o.FetchConcurrency)
	batches := make(chan batch, 1)

	g, gctx := errgroup.WithContext(ctx)
	// Stage 1: fetch details concurrently.
	var fetchers sync.WaitGroup
	for range p.o.FetchConcurrency {
		fetchers.Add(1)
		g.Go(func() error {
			defer fetchers.Done()
			return p.fetchLoop(gctx, fetchedCh)
		})
	}
	g.Go(func() error {
		fetchers.Wait()
		close(fetchedCh)
		return nil
	})
	// Stage 2: flatten and batch.
	g.Go(func() error {
		defer close(batches)
		return p.batchLoop(gctx, fetchedCh, batches)
	})
	// Stage 3: write, then acknowledge.
	g.Go(func() error { return p.writeLoop(gctx, batches) })

	err := g.Wait()
	// Anything left in the input after a hard stop is reported, not lost.
	p.CloseInput()
	for r := range p.in {
		r.Done(context.Cause(ctx))
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (p *Pipeline) fetchLoop(ctx context.Context, out chan<- fetched) error {
	for {
		var r Ref
		var ok bool
		select {
		case r, ok = <-p.in:
			if !ok {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		p.m.queue.WithLabelValues("fetch").Set(float64(len(p.in)))
		f, err := p.fetch(ctx, r)
		if err == nil && f.unchanged {
			p.m.unchanged.Inc()
			r.Done(nil)
			continue
		}
		if err == nil && f.notFound {
			r.Done(ErrNotWritten)
			continue
		}
		if err != nil {
			p.m.fetchErrors.WithLabelValues(r.Source).Inc()
			p.o.Logger.Warn("fetch response failed; it will be read again",
				"survey_id", r.SurveyID, "response_id", r.ResponseID, "source", r.Source, "err", err)
			r.Done(err)
			continue
		}
		select {
		case out <- f:
		case <-ctx.Done():
			r.Done(ctx.Err())
			return ctx.Err()
		}
	}
}

func (p *Pipeline) fetch(ctx context.Context, r Ref) (fetched, error) {
	start := p.o.Now()
	resp, err := p.fetcher.GetResponse(ctx, r.SurveyID, r.ResponseID)
	p.m.fetchSeconds.Observe(time.Since(start).Seconds())
	now := p.o.Now()
	it := flatten.Item{
		SurveyID:   r.SurveyID,
		ResponseID: r.ResponseID,
		Version:    uint64(now.UnixNano()),
		SyncedAt:   now,
	}
	switch {
	case errors.Is(err, survey.ErrNotFound):
		if r.OnNotFound != nil {
			del, err := r.OnNotFound(ctx)
			if err != nil {
				return fetched{}, err
			}
			if !del {
				return fetched{ref: r, notFound: true}, nil
			}
		}
		it.Deleted = true
		return fetched{item: it, ref: r}, nil
	case err != nil:
		return fetched{}, err
	}
	if resp.SurveyID != 0 && resp.SurveyID != r.SurveyID {
		return fetched{}, fmt.Errorf("response %s: detail says survey %d, asked for survey %d", r.ResponseID, resp.SurveyID, r.SurveyID)
	}
	if resp.ResponseID != "" && resp.ResponseID != r.ResponseID {
		return fetched{}, fmt.Errorf("response %s: detail carries response_id %s", r.ResponseID, resp.ResponseID)
	}
	it.Response = resp
	it.Deleted = resp.ResponseStatus == survey.StatusDeleted
	if r.SkipUnchanged {
		r.hash = contentHash(resp)
		if p.cache.same(r.ResponseID, r.hash) {
			return fetched{ref: r, unchanged: true}, nil
		}
	}
	return fetched{item: it, ref: r, resp: resp}, nil
}

func (p *Pipeline) batchLoop(ctx context.Context, in <-chan fetched, out chan<- batch) error {
	b := flatten.NewBuilder(p.o.Allocator)
	defer b.Release()
	defer func() {
		// After a hard stop the fetchers hand over what they hold and close
		// in; report each of those refs so nothing is silently dropped.
		for f := range in {
			f.ref.Done(errors.Join(ErrClosed, ctx.Err()))
		}
	}()
	var refs []Ref
	var resps []written
	var metas []itemMeta
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var deadline time.Time // when the batch being built is flushed by time
	defer timer.Stop()

	flush := func(why string) error {
		if len(refs) == 0 {
			return nil
		}
		bt := batch{b: b.Flush(), refs: refs, resp: resps, meta: metas, why: why}
		refs, resps, metas = nil, nil, nil
		timer.Stop()
		p.m.flushes.WithLabelValues(why).Inc()
		select {
		case out <- bt:
			return nil
		case <-ctx.Done():
			bt.b.Release()
			for _, r := range bt.refs {
				r.Done(ctx.Err())
			}
			return ctx.Err()
		}
	}
	fail := func(err error) {
		for _, r := range refs {
			r.Done(err)
		}
		refs = nil
	}
	for {
		select {
		case f, ok := <-in:
			if !ok {
				if err := flush("drain"); err != nil {
					fail(err)
					return err
				}
				return nil
			}
			_, answersBefore := b.Rows()
			if err := b.Add(f.item); err != nil {
				p.m.rejects.Inc()
				p.o.Logger.Error("response cannot be flattened; it will be read again",
					"survey_id", f.ref.SurveyID, "response_id", f.ref.ResponseID, "err", err)
				f.ref.Done(err)
				continue
			}
			switch {
			case len(refs) == 0:
				deadline = time.Now().Add(p.o.MaxDelay)
				if f.ref.Urgent {
					deadline = time.Now().Add(p.o.UrgentDelay)
				}
				timer.Reset(time.Until(deadline))
			case f.ref.Urgent && time.Until(deadline) > p.o.UrgentDelay:
				deadline = time.Now().Add(p.o.UrgentDelay)
				timer.Reset(p.o.UrgentDelay)
			}
			refs = append(refs, f.ref)
			_, answersAfter := b.Rows()
			metas = append(metas, newItemMeta(f.ref.SurveyID, f.resp, f.item.Deleted, answersAfter-answersBefore))
			if p.o.OnResponse != nil {
				resps = append(resps, written{f.ref.SurveyID, f.ref.ResponseID, f.resp})
			}
			_, answers := b.Rows()
			switch {
			case answers >= p.o.MaxRows:
				if err := flush("rows"); err != nil {
					return err
				}
			case b.Bytes() >= p.o.MaxBytes:
				if err := flush("bytes"); err != nil {
					return err
				}
			}
		case <-timer.C:
			if err := flush("delay"); err != nil {
				return err
			}
		case <-ctx.Done():
			fail(ctx.Err())
			return ctx.Err()
		}
	}
}

func (p *Pipeline) writeLoop(ctx context.Context, in <-chan batch) error {
	for bt := range in {
		if err := p.write(ctx, bt); err != nil {
			for _, r := range bt.refs {
				r.Done(err)
			}
			bt.b.Release()
			// Drain what is queued so every ref hears back.
			for rest := range in {
				for _, r := range rest.refs {
					r.Done(err)
				}
				rest.b.Release()
			}
			return err
		}
		bt.b.Release()
		p.m.writtenItems(bt.meta)
		for _, r := range bt.refs {
			if r.hash != 0 {
				p.cache.put(r.ResponseID, r.hash)
			}
			p.m.written.WithLabelValues(r.Source).Inc()
			r.Done(nil)
		}
		for _, w := range bt.resp {
			p.o.OnResponse(ctx, w.surveyID, w.responseID, w.resp)
		}
	}
	return nil
}

// write retries the sink until it succeeds or ctx is done: a sink outage
// makes the pipeline wait, and the bounded channels upstream make the
// fetchers wait too.
func (p *Pipeline) write(ctx context.Context, bt batch) error {
	resp, answers := bt.b.Rows()
	p.m.batchRows.WithLabelValues(flatten.TableResponses).Observe(float64(resp))
	p.m.batchRows.WithLabelValues(flatten.TableAnswers).Observe(float64(answers))
	wait := p.o.RetryInitial
	for attempt := 1; ; attempt++ {
		start := p.o.Now()
		err := p.sink.Write(ctx, bt.b)
		p.m.writeSeconds.Observe(time.Since(start).Seconds())
		if err == nil {
			p.m.rowsWritten.WithLabelValues(flatten.TableResponses).Add(float64(resp))
			p.m.rowsWritten.WithLabelValues(flatten.TableAnswers).Add(float64(answers))
			if attempt > 1 {
				p.o.Logger.Info("sink write succeeded after retries", "attempts", attempt, "responses", resp)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.m.writeErrors.Inc()
		p.o.Logger.Warn("sink write failed; retrying", "attempt", attempt, "responses", resp, "answers", answers, "retry_in", wait, "err", err)
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(wait*2, p.o.RetryMax)
	}
}
