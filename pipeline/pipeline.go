package pipeline

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/logonce"
	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

// Ref is one unit of work: a response to read and write. Done is called
// exactly once: with nil when the response's rows (or its deletion) are
// durably in the sink, or when the response was rejected (a permanent
// error) and its Reject is durably in the RejectStore; with an error when
// neither is the case and the caller must try again later (the poller keeps
// its watermark, the webhook spool keeps its event).
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
	// OnReject, when set, hears that the ref was rejected (its Reject is
	// durable, now or at an earlier read of the same content) just before
	// Done(nil): the poller remembers it, so reconcile does not read an
	// unchanged rejected response again (issue 19).
	OnReject func()
	// ListedStatus is the status of the list that showed the ref (the
	// poller's stream; "" for a webhook). A reject records it, so that
	// after a restart the poller still knows an unchanged rejected response
	// (listed at the same status) need not be read again (issue 19).
	ListedStatus string

	hash uint64 // content hash of the fetched detail, 0 when not computed
}

// Options tune the pipeline. Zero values take the defaults noted.
type Options struct {
	FetchConcurrency int           // concurrent detail fetches (8)
	MaxRows          int           // answer rows per batch (15 000, as sync.batch.max_rows)
	MaxBytes         int           // approximate bytes per batch (64 MiB)
	MaxDelay         time.Duration // longest a response waits in a batch (1 s)
	UrgentDelay      time.Duration // longest an Urgent ref waits in a batch (50 ms)
	RetryInitial     time.Duration // first wait after a failed sink or reject write (500 ms)
	RetryMax         time.Duration // longest wait between sink or reject write attempts (30 s)
	// RefusedRetryMax is the longest wait between write attempts while the
	// warehouse refuses them (WriteError.Refused, or every response of a
	// batch refused one by one): a table problem an operator must fix, so
	// the pipeline retries slowly (2 min; at least RetryMax).
	RefusedRetryMax time.Duration
	// Rejects records the responses the pipeline gives up on (permanent
	// fetch, flatten or write errors); their refs are acknowledged once the
	// record is durable. Nil: such refs hear the error instead and are read
	// again later, as transient failures are.
	Rejects    RejectStore
	Allocator  memory.Allocator
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
	// OnResponse, when set, sees every written response after its rows are
	// durable (the file copier uses it); r is nil when the service answered
	// 404 (the response was removed). It must not block for long.
	OnResponse func(ctx context.Context, surveyID int64, responseID survey.GUID, r *survey.Response)
	// Retain, when set, returns what of a response OnResponse needs: a
	// batch keeps that, not the decoded response, until its write is
	// durable (a response's decoded detail is several times its rows'
	// size; issue 19). Nil keeps the whole response. It must not modify r.
	Retain func(r *survey.Response) *survey.Response
	// Erased, when set, is consulted before a response is fetched: a
	// response it reports (its tombstone: sync.erase_deleted, surveysync
	// erase) is acknowledged without being read or written. It must be
	// fast (an in-memory lookup).
	Erased func(surveyID int64, responseID survey.GUID) bool
}

// Defaults of zero Options fields (config's sync.fetch_concurrency and
// sync.batch.* are these).
const (
	// DefaultFetchConcurrency is the API client's default concurrency
	// (api.max_concurrency, 8): with more fetchers than API slots each
	// slot is handed from one fetcher to another, and the one woken waits
	// for the processor while the slot idles (issue 19: 75 % of the
	// emulator's ceiling with 16, 81 % with 8, docs/benchmarks.md).
	DefaultFetchConcurrency = 8
	// DefaultMaxRows: since a batch keeps no decoded details (Retain,
	// flatten.Batch.Slice), batches of 15,000 rows fit in less memory than
	// batches of 10,000 did, and ClickHouse makes a third fewer parts
	// (issue 19, 20k harness: 87.7 → 91.1 % of the emulator's ceiling,
	// peak RSS 74–84 MB; 20,000 rows: 90.1 %, 84–93 MB; docs/benchmarks.md).
	DefaultMaxRows         = 15_000
	DefaultMaxBytes        = 64 << 20
	DefaultMaxDelay        = time.Second
	DefaultUrgentDelay     = 50 * time.Millisecond
	DefaultRetryInitial    = 500 * time.Millisecond
	DefaultRetryMax        = 30 * time.Second
	DefaultRefusedRetryMax = 2 * time.Minute
)

func (o *Options) setDefaults() {
	if o.FetchConcurrency <= 0 {
		o.FetchConcurrency = DefaultFetchConcurrency
	}
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.UrgentDelay <= 0 || o.UrgentDelay > o.MaxDelay {
		o.UrgentDelay = min(DefaultUrgentDelay, o.MaxDelay)
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = DefaultRetryInitial
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.RefusedRetryMax <= 0 {
		o.RefusedRetryMax = DefaultRefusedRetryMax
	}
	o.RefusedRetryMax = max(o.RefusedRetryMax, o.RetryMax)
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
	fetchLog  *logonce.Limiter
	in        chan Ref
	closeOnce sync.Once
	closed    chan struct{}
	mu        sync.RWMutex // guards sends on in against close
	inClosed  bool

	wmu sync.Mutex  // guards ws
	ws  WriteStatus // the state of the writes (WriteStatus); ws.Attempts is the back-off's step
}

// New returns a pipeline reading details through f and writing to s.
func New(o Options, f Fetcher, s Sink) *Pipeline {
	o.setDefaults()
	return &Pipeline{
		o:        o,
		fetcher:  f,
		sink:     s,
		m:        newMetrics(o.Registerer),
		in:       make(chan Ref, o.FetchConcurrency),
		cache:    newContentCache(200_000),
		fetchLog: logonce.New(o.Logger, time.Second, 5*time.Minute, nil),
		closed:   make(chan struct{}),
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
	rejected  bool // unchanged, and what was last read of it was rejected
	notFound  bool // 404 and OnNotFound said not to write a deletion
}

// ErrNotWritten is given to a ref's Done when its detail answered 404 and
// its OnNotFound said not to write a deletion: nothing was written, and
// nothing is to retry.
var ErrNotWritten = errors.New("response not found (404) and not written as a deletion")

// batch is a flushed batch and, parallel to refs (and to the batch's
// responses rows), what each response needs after the write: what
// OnResponse hears, its metrics. A refused batch is written again in
// slices of its records (flatten.Batch.Slice), so it keeps no decoded
// response for that.
type batch struct {
	b    *flatten.Batch
	refs []Ref
	resp []written
	meta []itemMeta
	why  string
}

// rejection is a ref given up on at a stage, with the permanent error.
type rejection struct {
	ref   Ref
	stage string
	err   error
	index int // position in its batch (write stage)
}

// Run runs the stages until the input is closed and drained (returns nil) or
// ctx is cancelled (returns ctx's error after reporting every unwritten ref).
func (p *Pipeline) Run(ctx context.Context) error {
	fetchedCh := make(chan fetched, p.o.FetchConcurrency)
	batches := make(chan batch)

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
		if p.o.Erased != nil && p.o.Erased(r.SurveyID, r.ResponseID) {
			p.m.erased.Inc()
			r.Done(nil)
			continue
		}
		f, err := p.fetch(ctx, r)
		if err == nil && f.unchanged {
			p.m.unchanged.Inc()
			if f.rejected && r.OnReject != nil {
				r.OnReject()
			}
			r.Done(nil)
			continue
		}
		if err == nil && f.notFound {
			r.Done(ErrNotWritten)
			continue
		}
		if err != nil {
			p.m.fetchErrors.WithLabelValues(r.Source).Inc()
			if permanent.Is(err) && ctx.Err() == nil {
				if r.SkipUnchanged {
					// A re-read that fails the same way as the last time is
					// not recorded again.
					r.hash = rejectHash(StageFetch, permanent.Reason(err))
					if same, _ := p.cache.same(r.ResponseID, r.hash); same {
						p.m.unchanged.Inc()
						if r.OnReject != nil {
							r.OnReject()
						}
						r.Done(nil)
						continue
					}
				}
				p.reject(ctx, []rejection{{ref: r, stage: StageFetch, err: err}})
				continue
			}
			// One line per cause and back-off step, not one per queued
			// response (a revoked token fails every one of them at once).
			p.fetchLog.Warn("fetch response failed; it will be read again", err,
				"survey_id", r.SurveyID, "response_id", r.ResponseID, "source", r.Source)
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
	now := p.o.Now()
	p.m.fetchSeconds.Observe(now.Sub(start).Seconds())
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
		return fetched{}, permanent.Errorf(flatten.ReasonIDMismatch, "response %s: detail says survey %d, asked for survey %d", r.ResponseID, resp.SurveyID, r.SurveyID)
	}
	if resp.ResponseID != "" && resp.ResponseID != r.ResponseID {
		return fetched{}, permanent.Errorf(flatten.ReasonIDMismatch, "response %s: detail carries response_id %s", r.ResponseID, resp.ResponseID)
	}
	it.Response = resp
	it.Deleted = resp.ResponseStatus == survey.StatusDeleted
	if r.SkipUnchanged {
		r.hash = contentHash(resp)
		if same, rejected := p.cache.same(r.ResponseID, r.hash); same {
			return fetched{ref: r, unchanged: true, rejected: rejected}, nil
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
				if !permanent.Is(err) {
					err = permanent.New("flatten", err)
				}
				p.reject(ctx, []rejection{{ref: f.ref, stage: StageFlatten, err: err}})
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
			kept := f.resp
			if kept != nil && p.o.Retain != nil {
				kept = p.o.Retain(kept)
			}
			resps = append(resps, written{f.ref.SurveyID, f.ref.ResponseID, kept})
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
		settled, err := p.write(ctx, bt)
		if err != nil {
			for i, r := range bt.refs {
				if !settled[i] {
					r.Done(err)
				}
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
		for i, r := range bt.refs {
			if settled[i] {
				continue // rejected: acknowledged by reject
			}
			p.m.writtenItems(bt.meta[i : i+1])
			if r.hash != 0 {
				p.cache.put(r.ResponseID, r.hash, false)
			}
			p.m.written.WithLabelValues(r.Source).Inc()
			r.Done(nil)
		}
		if p.o.OnResponse != nil {
			for i, w := range bt.resp {
				if !settled[i] {
					p.o.OnResponse(ctx, w.surveyID, w.responseID, w.resp)
				}
			}
		}
	}
	return nil
}

// write writes bt. It retries transient sink errors until the write
// succeeds or ctx is done: a sink outage makes the pipeline wait, and the
// bounded channels upstream make the fetchers wait too. So do refusals
// (WriteError.Refused: an unknown table or column, a type error, missing
// grants), more slowly: the batch stays in flight until the warehouse takes
// it. A permanent error is not retried as such: the batch is written again
// in halves, down to single responses, so that only the responses the sink
// refuses are rejected and the others are written; but when every response
// of a batch of two or more is refused on its own (or a single one while
// the warehouse is known to refuse everything), the table is at fault, not
// the data, and the batch waits and is written again as after a refusal.
// Every wait logs one line (failing); the first success after failures
// logs the recovery. settled[i] reports that ref i was rejected and has
// heard back already; err is ctx's error when ctx ended first.
func (p *Pipeline) write(ctx context.Context, bt batch) (settled []bool, err error) {
	settled = make([]bool, len(bt.refs))
	resp, answers := bt.b.Rows()
	p.m.batchRows.WithLabelValues(flatten.TableResponses).Observe(float64(resp))
	p.m.batchRows.WithLabelValues(flatten.TableAnswers).Observe(float64(answers))
	var rejects []rejection
	for {
		err = p.writeRetry(ctx, bt.b)
		if err == nil || !permanent.Is(err) {
			return settled, err
		}
		refusing := p.refusing()
		if !refusing {
			p.o.Logger.Warn("sink refused a batch permanently; writing its responses in parts to find the ones it refuses",
				"responses", resp, "reason", permanent.Reason(err), "err", err)
		}
		rejects = rejects[:0]
		if err := p.isolate(ctx, bt, 0, len(bt.refs), err, &rejects); err != nil {
			return settled, err
		}
		if len(rejects) < len(bt.refs) || (len(bt.refs) < 2 && !refusing) {
			break
		}
		// Every response refused on its own: that is the table (a column's
		// type changed, a replica behind on a migration), not the data.
		// Wait as for an outage instead of rejecting good responses.
		if err := backoff.Sleep(ctx, p.failing(rejects[0].err, WriteRefused, resp)); err != nil {
			return settled, err
		}
	}
	p.reject(ctx, rejects)
	for _, r := range rejects {
		settled[r.index] = true
	}
	return settled, nil
}

// isolate writes responses lo..hi-1 of bt, which failed together with the
// permanent error perr, in two halves; a half that fails permanently is
// split again. A single response that fails permanently is added to out.
func (p *Pipeline) isolate(ctx context.Context, bt batch, lo, hi int, perr error, out *[]rejection) error {
	if hi-lo == 1 {
		*out = append(*out, rejection{ref: bt.refs[lo], stage: StageWrite, err: perr, index: lo})
		return nil
	}
	mid := lo + (hi-lo)/2
	for _, part := range [][2]int{{lo, mid}, {mid, hi}} {
		err := p.writeSlice(ctx, bt.b, part[0], part[1])
		switch {
		case err == nil:
		case permanent.Is(err):
			if err := p.isolate(ctx, bt, part[0], part[1], err, out); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

// writeSlice writes responses lo..hi-1 of b alone: a slice of its records,
// at the versions they were built with, so rows already written by an
// earlier attempt are written again identically (and collapse).
func (p *Pipeline) writeSlice(ctx context.Context, b *flatten.Batch, lo, hi int) error {
	part := b.Slice(lo, hi)
	defer part.Release()
	return p.writeRetry(ctx, part)
}

// writeRetry writes b, retrying transient errors and refusals with the
// write path's back-off (failing). It returns nil, a permanent error (not
// retried), or ctx's error.
func (p *Pipeline) writeRetry(ctx context.Context, b *flatten.Batch) error {
	resp, answers := b.Rows()
	for {
		start := p.o.Now()
		err := p.sink.Write(ctx, b)
		p.m.writeSeconds.Observe(p.o.Now().Sub(start).Seconds())
		if err == nil {
			p.m.rowsWritten.WithLabelValues(flatten.TableResponses).Add(float64(resp))
			p.m.rowsWritten.WithLabelValues(flatten.TableAnswers).Add(float64(answers))
			p.writeSucceeded()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.m.writeErrors.Inc()
		if permanent.Is(err) {
			return err
		}
		if err := backoff.Sleep(ctx, p.failing(err, "", resp)); err != nil {
			return err
		}
	}
}

// reject records rs in the RejectStore, retrying transient errors, then
// acknowledges each ref with nil. Without a RejectStore, when the store
// fails permanently, or when ctx ends first, the refs hear the error
// instead (they are read again later).
func (p *Pipeline) reject(ctx context.Context, rs []rejection) {
	if len(rs) == 0 {
		return
	}
	now := p.o.Now().UTC()
	recs := make([]Reject, len(rs))
	for i, r := range rs {
		reason := permanent.Reason(r.err)
		if reason == "" {
			reason = "unknown"
		}
		recs[i] = Reject{
			SurveyID: r.ref.SurveyID, ResponseID: r.ref.ResponseID, Stage: r.stage, Reason: reason,
			Error: truncateUTF8(r.err.Error(), MaxRejectErrorBytes), Source: r.ref.Source, RejectedAt: now,
			ListedStatus: r.ref.ListedStatus,
		}
		p.o.Logger.Warn("response rejected: it cannot be stored as the service sends it; recorded with its reason",
			"survey_id", r.ref.SurveyID, "response_id", r.ref.ResponseID, "source", r.ref.Source,
			"stage", r.stage, "reason", reason, "err", r.err)
	}
	if p.o.Rejects == nil {
		for _, r := range rs {
			r.ref.Done(r.err)
		}
		return
	}
	retry := backoff.Policy{Initial: p.o.RetryInitial, Max: p.o.RetryMax}
	for attempt := 1; ; attempt++ {
		err := p.o.Rejects.WriteRejects(ctx, recs)
		if err == nil {
			break
		}
		if ctx.Err() == nil && !permanent.Is(err) {
			wait := retry.Delay(attempt)
			p.o.Logger.Warn("reject store write failed; retrying", "attempt", attempt, "rejects", len(recs), "retry_in", wait, "err", err)
			err = backoff.Sleep(ctx, wait)
		}
		if err != nil {
			if ctx.Err() == nil {
				p.o.Logger.Error("reject store refused the records; the responses will be read again", "rejects", len(recs), "err", err)
			}
			for _, r := range rs {
				r.ref.Done(err)
			}
			return
		}
	}
	for i, r := range rs {
		p.m.rejected.WithLabelValues(recs[i].Stage, recs[i].Reason).Inc()
		if r.ref.hash != 0 {
			p.cache.put(r.ref.ResponseID, r.ref.hash, true)
		}
		if r.ref.OnReject != nil {
			r.ref.OnReject()
		}
		r.ref.Done(nil)
	}
}

// rejectHash stands for "rejected at stage for reason" in the content
// cache, for refs whose detail could not be read; never 0.
func rejectHash(stage, reason string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("reject\x00" + stage + "\x00" + reason))
	return h.Sum64() | 1
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	return strings.ToValidUTF8(s[:n-len(ellipsis)], "") + ellipsis
}
