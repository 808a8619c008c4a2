package webhookrx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/logonce"
	"github.com/surveysync/surveysync/internal/permanent"
)

// maxCommitBatch bounds the events of one group commit (SegmentBytes
// bounds its bytes).
const maxCommitBatch = 512

// scrubInterval bounds how often the spool's file is rewritten without its
// free pages after erasures (privacy.go); the first rewrite is at once.
const scrubInterval = 10 * time.Second

// Done marks (with the retry counts noted meanwhile) are committed in groups.
const (
	doneSyncInterval = 50 * time.Millisecond
	doneSyncMax      = 1024
)

// Receiver receives, spools and processes webhooks. Build it with New, then
// call Run once.
type Receiver struct {
	s    *settings
	proc Processor
	elog EventLog
	m    *metrics

	retry backoff.Policy // the wait after failed attempts: of an event, of a survey's gate, of the event log
	// rejectLog writes one line per cause of rejection and back-off step,
	// with a count, not one per event (a flood of webhooks naming
	// responses that do not exist rejects thousands of events a second).
	rejectLog *logonce.Limiter

	appendCh chan *appendReq
	doneCh   chan []doneMark
	outcomes chan outcomeReq // workers' reports of Process attempts, for the feeder
	scrubCh  chan struct{}   // Scrub's requests, for the spool loop
	queue    *workQueue
	resident atomic.Int64  // bytes of the events handed out (queued or in a worker)
	started  chan struct{} // closed once the spool is open and the spool loop runs
	stopped  chan struct{} // closed when the spool loop stops accepting
	ran      atomic.Bool
	addr     atomic.Pointer[string]
	spooled  atomic.Int64 // events waiting in the spool
	spoolB   atomic.Int64 // their bytes

	errMu    sync.Mutex
	spoolErr error // last spool write error; nil after a good write
}

// outcomeReq reports one Process attempt to the spool loop: done
// (processed, rejected, ignored) or failed transiently (handed out again
// after a backoff).
type outcomeReq struct {
	seq      uint64
	survey   int64
	done     bool
	attempts int // failed Process calls so far
}

type appendReq struct {
	ev  *Event
	res chan appendResult
}

// completion is a processed event on its way to the event log and its done mark.
type completion struct {
	entry LogEntry
	mark  doneMark
}

// New checks o and builds a Receiver. p must not be nil; log may be nil (no
// raw event log). Nothing is opened or served until Run.
func New(o Options, p Processor, log EventLog) (*Receiver, error) {
	if p == nil {
		return nil, errors.New("webhookrx: nil Processor")
	}
	s, err := o.resolve()
	if err != nil {
		return nil, err
	}
	r := &Receiver{
		s: s, proc: p, elog: log,
		retry:     backoff.Policy{Initial: s.RetryInitial, Max: s.RetryMax},
		rejectLog: logonce.New(s.logger, time.Second, 5*time.Minute, s.Now),
		appendCh:  make(chan *appendReq, maxCommitBatch),
		doneCh:    make(chan []doneMark, 16),
		outcomes:  make(chan outcomeReq, s.ProcessConcurrency),
		scrubCh:   make(chan struct{}, 1),
		queue:     newWorkQueue(),
		started:   make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	r.m = newMetrics(o.Registerer, s.Now, func() float64 { return float64(r.resident.Load()) })
	r.m.spoolMaxEvts.Set(float64(s.SpoolMaxEvents))
	r.m.spoolMaxByts.Set(float64(s.SpoolMaxBytes))
	return r, nil
}

// Addr is the address the HTTP server listens on once Run has started it
// ("" before, or without Options.Listen).
func (r *Receiver) Addr() string {
	if a := r.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Started is closed once Run has opened the spool and bound its listener:
// the receiver takes webhooks from then on (the daemon's readiness
// notification waits for it).
func (r *Receiver) Started() <-chan struct{} { return r.started }

// Ready reports whether the receiver can accept webhooks: Run has opened the
// spool, is not stopping, the spool is below its caps and the spool
// directory takes a durable write now. For /readyz: a load balancer then
// sends the service's retries to a daemon that can take them.
//
// Writability is probed on every call (a block written and synced, so a
// full disk fails it too), not remembered: a load balancer that routes by
// readiness sends no webhook to a daemon that is not ready, so a failed
// spool write must not keep it unready once the disk is freed. When the
// probe succeeds after a failed write, the failure is forgotten (and a
// line logged).
func (r *Receiver) Ready() error {
	select {
	case <-r.started:
	default:
		return errors.New("webhookrx: not started")
	}
	select {
	case <-r.stopped:
		return errors.New("webhookrx: stopped")
	default:
	}
	if n, b := r.spooled.Load(), r.spoolB.Load(); n >= int64(r.s.SpoolMaxEvents) || b >= r.s.SpoolMaxBytes {
		return fmt.Errorf("webhookrx: spool full (%d events, %d bytes)", n, b)
	}
	if err := atomicfile.ProbeWritable(r.s.SpoolDir); err != nil {
		r.errMu.Lock()
		last := r.spoolErr
		r.errMu.Unlock()
		if last != nil {
			return fmt.Errorf("webhookrx: spool dir: %w (last spool write failed: %w)", err, last)
		}
		return fmt.Errorf("webhookrx: spool dir: %w", err)
	}
	r.errMu.Lock()
	last := r.spoolErr
	r.spoolErr = nil
	r.errMu.Unlock()
	if last != nil {
		r.s.logger.Info("webhook spool writable again: ready", "dir", r.s.SpoolDir, "last_error", last.Error())
	}
	return nil
}

// Scrub asks the receiver to delete the waiting events of responses
// Options.Erased now reports erased and to rewrite the spool's file
// without its free pages (where bbolt keeps deleted values): call it when
// responses were erased. It does not wait; the rewrite happens at most
// once per 10 s.
func (r *Receiver) Scrub() {
	select {
	case r.scrubCh <- struct{}{}:
	default:
	}
}

// startPrivacy applies Redact to the bodies spooled under other rules,
// deletes the waiting events of erased responses and rewrites the file
// without its free pages, before anything is handed out. A step that
// fails (a full disk) is logged and tried again at the next start: the
// spool works without it.
func (r *Receiver) startPrivacy(sp *spool) error {
	s := r.s
	if s.Redact == nil && s.Erased == nil {
		return nil
	}
	if s.Redact != nil {
		n, err := sp.redactBodies(s.Redact, s.RedactRules, false)
		switch {
		case err != nil:
			s.logger.Warn("webhook spool: cannot apply the privacy rules to the waiting events now; tried again at the next start", "dir", s.SpoolDir, "error", err)
		case n > 0:
			s.logger.Info("webhook spool: the privacy rules applied to the events waiting since before they changed", "events", n, "dir", s.SpoolDir)
		}
	}
	if s.Erased != nil {
		n, err := sp.purge(s.Erased)
		switch {
		case err != nil:
			s.logger.Warn("webhook spool: cannot delete the waiting events of erased responses now; tried again at the next erasure or start", "dir", s.SpoolDir, "error", err)
		case n > 0:
			s.logger.Info("webhook spool: deleted the waiting events of erased responses", "events", n, "dir", s.SpoolDir)
		}
	}
	if _, err := sp.compactNow(); err != nil {
		s.logger.Warn("webhook spool: cannot rewrite the file without its free pages now; tried again at the next start or erasure", "dir", s.SpoolDir, "error", err)
	}
	return nil
}

func (r *Receiver) setSpoolErr(err error) {
	r.errMu.Lock()
	r.spoolErr = err
	r.errMu.Unlock()
}

// Run opens the spool (taking its lock), queues the events left in it in
// spool order, serves HTTP on Options.Listen (if set) and processes events
// until ctx is done. Then it shuts down cleanly: the HTTP server stops (in-
// flight requests get up to ShutdownTimeout), workers take no new events,
// in-flight Process calls get up to ShutdownTimeout before their context is
// cancelled, finished events are logged and marked done, and the spool is
// closed. Events not finished stay in the spool for the next start. Run
// returns nil after a clean stop, or the error that stopped it.
func (r *Receiver) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("webhookrx: Run called twice")
	}
	s := r.s
	sp, replay, err := openSpool(s.SpoolDir, s.DedupeIDs, s.logger)
	if err != nil {
		return err
	}
	if err := r.startPrivacy(sp); err != nil {
		sp.close()
		return err
	}
	if len(replay) != sp.events() { // events of erased responses were deleted
		replay = slices.DeleteFunc(replay, func(seq uint64) bool { return sp.bySeq[seq] == nil })
	}
	var ln net.Listener
	if s.Listen != "" {
		if ln, err = net.Listen("tcp", s.Listen); err != nil {
			sp.close()
			return fmt.Errorf("webhookrx: listen %s: %w", s.Listen, err)
		}
		a := ln.Addr().String()
		r.addr.Store(&a)
		ln = netutil.LimitListener(ln, s.MaxConns)
	}
	for kind, n := range sp.replayedKinds {
		r.m.events.WithLabelValues(kind, evReplayed).Add(float64(n))
	}
	alreadyDone := 0
	for kind, n := range sp.doneAtLoad {
		r.m.events.WithLabelValues(kind, evDuplicate).Add(float64(n))
		alreadyDone += n
	}
	if len(replay) > 0 || alreadyDone > 0 {
		s.logger.Info("webhook spool replayed", "events", len(replay), "already_done", alreadyDone, "dir", s.SpoolDir)
	}
	fd := newFeeder(r, sp, replay)
	fd.fill()
	r.updateGauges(sp)

	spoolStop, loopDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(loopDone)
		r.spoolLoop(sp, fd, spoolStop)
	}()
	close(r.started)

	stopTaking := make(chan struct{})
	procCtx, procCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer procCancel()
	completions := make(chan completion, 256)
	var workers sync.WaitGroup
	for range s.ProcessConcurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.worker(procCtx, stopTaking, completions)
		}()
	}
	logDone, abandon := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(logDone)
		r.logger(stopTaking, abandon, completions)
	}()

	var srv *http.Server
	serveErr := make(chan error, 1)
	if ln != nil {
		srv = &http.Server{
			Handler:           r.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		}
		go func() { serveErr <- srv.Serve(ln) }()
		s.logger.Info("webhook receiver listening", "addr", ln.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("webhookrx: serve: %w", err)
		srv = nil
	}

	// 1. Stop intake; in-flight requests finish (their events are committed).
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
		if err := srv.Shutdown(sctx); err != nil {
			s.logger.Warn("webhook server shutdown timed out; closing connections", "error", err)
			_ = srv.Close()
		}
		cancel()
		<-serveErr //nolint:errcheck // Shutdown's error was logged above; Serve's is ErrServerClosed
	}
	// 2. Workers take no new events; in-flight ones get ShutdownTimeout.
	//    A Processor that ignores its cancelled context is abandoned after
	//    another ShutdownTimeout rather than hanging the shutdown: its event
	//    stays in the spool.
	close(stopTaking)
	hard := time.AfterFunc(s.ShutdownTimeout, procCancel)
	workersDone := make(chan struct{})
	go func() {
		workers.Wait()
		close(workersDone)
	}()
	abandonTimer := time.NewTimer(2 * s.ShutdownTimeout)
	select {
	case <-workersDone:
		// 3. Log and mark done what finished, then close the spool.
		close(completions)
	case <-abandonTimer.C:
		s.logger.Error("webhook processors did not return after their context was cancelled; abandoning them, their events stay in the spool")
		close(abandon)
	}
	abandonTimer.Stop()
	hard.Stop()
	<-logDone
	close(spoolStop)
	<-loopDone
	s.logger.Info("webhook receiver stopped", "left_in_spool", sp.events())
	return runErr
}

// spoolLoop owns the spool: it commits submitted events in groups (one
// transaction for all requests waiting), commits done marks, and hands
// events to the workers within the memory window (feeder).
func (r *Receiver) spoolLoop(sp *spool, fd *feeder, stop <-chan struct{}) {
	defer sp.close()
	// Done marks are committed in groups, every doneSyncInterval or
	// doneSyncMax marks: a crash loses at most that window of marks, whose
	// events are then processed again (idempotently) at the next start.
	// The attempt counts noted meanwhile go in the same transaction.
	var marks []doneMark
	tick := time.NewTicker(doneSyncInterval)
	defer tick.Stop()
	// Erasure: a purge at once, the file rewritten at most once per
	// scrubInterval, again after the done mark of an erased response's
	// event that was in flight (its body is then in a free page).
	scrubDue, lastScrub := false, time.Time{}
	scrub := func() {
		if !scrubDue || time.Since(lastScrub) < scrubInterval {
			return
		}
		scrubDue, lastScrub = false, time.Now()
		if did, err := sp.compactNow(); err != nil {
			r.s.logger.Error("webhook spool: cannot rewrite the file without its free pages (erased values may stay in it until the next try)", "error", err)
			scrubDue = true
		} else if did {
			r.s.logger.Debug("webhook spool: rewrote its file without its free pages", "dir", r.s.SpoolDir)
		}
	}
	flushMarks := func() {
		if len(marks) == 0 && !sp.dirty() {
			return
		}
		if erased := r.s.Erased; erased != nil && !scrubDue {
			for _, m := range marks {
				if e := sp.bySeq[m.seq]; e != nil && e.response != "" && erased(e.survey, e.response) {
					scrubDue = true
					break
				}
			}
		}
		if err := sp.markDone(marks); err != nil {
			r.s.logger.Error("webhook spool: cannot record processed events; retrying", "events", len(marks), "error", err)
			return
		}
		fd.forget(marks)
		marks = nil
		r.updateGauges(sp)
	}
	drainMarks := func() {
		for {
			select {
			case m := <-r.doneCh:
				marks = append(marks, m...)
			default:
				return
			}
		}
	}
	for {
		select {
		case q := <-r.appendCh:
			batch := []*appendReq{q}
			size := int64(len(q.ev.Body))
		gather:
			for len(batch) < maxCommitBatch && size < r.s.SegmentBytes {
				select {
				case q := <-r.appendCh:
					batch = append(batch, q)
					size += int64(len(q.ev.Body))
				default:
					break gather
				}
			}
			r.commit(sp, fd, batch)
		case o := <-r.outcomes:
			fd.outcome(o)
			for n := 0; n < 256; n++ { // take the others waiting, then fill once
				select {
				case o := <-r.outcomes:
					fd.outcome(o)
					continue
				default:
				}
				break
			}
			fd.fill()
		case m := <-r.doneCh:
			marks = append(marks, m...)
			if len(marks) >= doneSyncMax {
				drainMarks()
				flushMarks()
			}
		case <-tick.C:
			flushMarks()
			scrub()
			fd.fill()
		case <-r.scrubCh:
			if r.s.Erased != nil {
				n, err := sp.purge(r.s.Erased)
				if err != nil {
					r.s.logger.Error("webhook spool: cannot delete the events of erased responses; tried again at the next erasure", "error", err)
				} else if n > 0 {
					r.s.logger.Info("webhook spool: deleted the waiting events of erased responses", "events", n)
					r.updateGauges(sp)
				}
			}
			scrubDue = true
			scrub()
		case <-stop:
			// The workers have stopped: take their last reports (attempt
			// counts to keep) and marks.
			for drained := false; !drained; {
				select {
				case o := <-r.outcomes:
					fd.outcome(o)
				default:
					drained = true
				}
			}
			drainMarks()
			flushMarks()
			close(r.stopped)
			for {
				select {
				case q := <-r.appendCh:
					q.res <- resError
				default:
					return
				}
			}
		}
	}
}

func (r *Receiver) commit(sp *spool, fd *feeder, batch []*appendReq) {
	evs := make([]*Event, len(batch))
	for i, q := range batch {
		evs[i] = q.ev
	}
	start := r.s.Now()
	res, err := sp.append(evs, r.s.SpoolMaxEvents, r.s.SpoolMaxBytes)
	accepted := 0
	for i, x := range res {
		if x == resAccepted {
			accepted++
			fd.accepted(*evs[i])
		}
	}
	if accepted > 0 || err != nil {
		r.m.commitDur.Observe(r.s.Now().Sub(start).Seconds())
		r.m.commitEvents.Observe(float64(accepted))
		r.setSpoolErr(err)
	}
	if err != nil {
		r.s.logger.Error("webhook spool: write failed; answering 503", "events", len(batch), "error", err)
	}
	fd.fill()
	r.updateGauges(sp)
	for i, q := range batch {
		q.res <- res[i]
	}
}

func (r *Receiver) updateGauges(sp *spool) {
	r.spooled.Store(int64(sp.events()))
	r.spoolB.Store(sp.bytes)
	r.m.spoolEvents.Set(float64(sp.events()))
	r.m.spoolBytes.Set(float64(sp.bytes))
	if t := sp.oldest(); t.IsZero() {
		r.m.oldestNanos.Store(0)
	} else {
		r.m.oldestNanos.Store(t.UnixNano())
	}
}

// worker processes queued events until stop. An event gets one Process
// call per turn: done (processed, rejected, ignored) it goes to the log and
// is marked done; failed transiently it goes back to the spool loop, which hands
// it out again after its own backoff, so the worker takes the next event
// meanwhile (one survey's failing events do not hold the workers).
func (r *Receiver) worker(ctx context.Context, stop <-chan struct{}, out chan<- completion) {
	for {
		w, ok := r.queue.pop(stop)
		if !ok {
			return
		}
		c, res := r.attempt(ctx, w)
		if res == attemptStopping {
			return // the event stays in the spool
		}
		r.resident.Add(-w.size)
		o := outcomeReq{seq: w.ev.Seq, survey: w.ev.Parsed.SurveyID, done: res == attemptDone, attempts: w.attempts}
		if res == attemptRetry {
			o.attempts++
		}
		r.outcomes <- o
		if res == attemptDone {
			out <- c
		}
	}
}

type attemptResult int

const (
	attemptDone     attemptResult = iota // processed, rejected or ignored: log it, mark it done
	attemptRetry                         // failed transiently: retry after a backoff
	attemptStopping                      // the receiver stops: the event stays in the spool
)

// attempt calls Process once for ev.
func (r *Receiver) attempt(ctx context.Context, w work) (completion, attemptResult) {
	ev := w.ev
	kind := ev.Kind()
	attempt := w.attempts + 1
	done := func(outcome string, err error, attempts int) (completion, attemptResult) {
		r.m.event(kind, outcome)
		return completion{
			entry: logEntry(ev, outcome, err, attempts, r.s.Now().UTC()),
			mark:  doneMark{seq: ev.Seq, id: ev.ID},
		}, attemptDone
	}
	if kind == KindUnknown {
		return done(OutcomeIgnored, nil, 0)
	}
	start := r.s.Now()
	err := r.proc.Process(ctx, ev)
	r.m.processDur.Observe(r.s.Now().Sub(start).Seconds())
	switch {
	case err == nil:
		return done(OutcomeProcessed, nil, attempt)
	case permanent.Is(err):
		r.rejectLog.Log(slog.LevelWarn, "webhook event rejected by the processor; not retried", err,
			"event", ev.Name, "event_id", ev.ID, "survey_id", ev.Parsed.SurveyID, "attempts", attempt, "error", err)
		return done(OutcomeRejected, err, attempt)
	case ctx.Err() != nil:
		return completion{}, attemptStopping
	}
	r.m.event(kind, evRetried)
	level := slog.LevelDebug // many events retrying through an outage: warn on the 1st, 11th, 21st… attempt
	if attempt%10 == 1 {
		level = slog.LevelWarn
	}
	r.s.logger.Log(ctx, level, "webhook event processing failed; it and its survey's other events wait, then are retried",
		"event", ev.Name, "event_id", ev.ID, "survey_id", ev.Parsed.SurveyID, "attempt", attempt, "error", err)
	return completion{}, attemptRetry
}

// logger batches completions into the EventLog, then hands their done
// marks to the spool loop. A batch whose log write fails is retried until
// stop; past stop it gets one last attempt and otherwise stays in the spool.
// It returns when in is closed, or on abandon (stuck workers still hold in).
func (r *Receiver) logger(stop, abandon <-chan struct{}, in <-chan completion) {
	s := r.s
	var batch []completion
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	flush := func(final bool) {
		armed = false
		if len(batch) == 0 {
			return
		}
		if r.elog != nil && !r.writeLog(batch, stop, final) {
			batch = batch[:0]
			return
		}
		marks := make([]doneMark, len(batch))
		for i, c := range batch {
			marks[i] = c.mark
		}
		r.doneCh <- marks
		batch = batch[:0]
	}
	for {
		select {
		case c, ok := <-in:
			if !ok {
				flush(true)
				return
			}
			batch = append(batch, c)
			if r.elog == nil || len(batch) >= s.LogBatch {
				flush(false)
			} else if !armed {
				timer.Reset(s.LogInterval)
				armed = true
			}
		case <-timer.C:
			flush(false)
		case <-abandon:
			for {
				select {
				case c := <-in:
					batch = append(batch, c)
					continue
				default:
				}
				break
			}
			flush(true)
			return
		}
	}
}

// writeLog writes batch to the EventLog, retrying with backoff until it
// succeeds or the receiver stops. It reports whether the events may be
// marked done: after a success, or a Permanent error (the log can never
// take them; holding them would only fill the spool).
func (r *Receiver) writeLog(batch []completion, stop <-chan struct{}, final bool) bool {
	entries := make([]LogEntry, len(batch))
	for i, c := range batch {
		entries[i] = c.entry
	}
	for failures := 1; ; failures++ {
		ctx, cancel := context.WithTimeout(context.Background(), r.s.ShutdownTimeout)
		err := r.elog.LogEvents(ctx, entries)
		cancel()
		if err == nil {
			return true
		}
		r.m.logFailures.Inc()
		if permanent.Is(err) {
			r.s.logger.Error("webhook event log rejected a batch permanently; the events are marked done without a log row",
				"events", len(entries), "error", err)
			return true
		}
		select {
		case <-stop:
			final = true
		default:
		}
		if final {
			r.s.logger.Warn("webhook event log write failed while stopping; the events stay in the spool", "events", len(entries), "error", err)
			return false
		}
		wait := r.retry.Delay(failures)
		r.s.logger.Warn("webhook event log write failed; will retry", "events", len(entries), "retry_in", wait.Round(time.Millisecond), "error", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
	}
}

// workQueue is the FIFO of spooled events waiting for a worker.
type workQueue struct {
	mu    sync.Mutex
	items []work
	head  int
	wake  chan struct{}
}

func newWorkQueue() *workQueue { return &workQueue{wake: make(chan struct{}, 1)} }

func (q *workQueue) push(evs ...work) {
	if len(evs) == 0 {
		return
	}
	q.mu.Lock()
	q.items = append(q.items, evs...)
	q.mu.Unlock()
	q.signal()
}

func (q *workQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest event, waiting for one; false once stop is closed.
func (q *workQueue) pop(stop <-chan struct{}) (work, bool) {
	for {
		select {
		case <-stop:
			return work{}, false
		default:
		}
		q.mu.Lock()
		if q.head < len(q.items) {
			ev := q.items[q.head]
			q.items[q.head] = work{}
			q.head++
			more := q.head < len(q.items)
			if q.head > 1024 && q.head*2 > len(q.items) {
				q.items = append(q.items[:0], q.items[q.head:]...)
				q.head = 0
			}
			q.mu.Unlock()
			if more {
				q.signal()
			}
			return ev, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-stop:
			return work{}, false
		}
	}
}
