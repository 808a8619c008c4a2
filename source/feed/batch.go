package feed

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/survey"
)

// RowResult is the outcome of one row of a batch.
type RowResult struct {
	Line      int64  `json:"line"` // file line (CSV, JSONL), array index + 1 (http), row number (query)
	Key       string `json:"key,omitempty"`
	Outcome   string `json:"outcome"`
	Field     string `json:"field,omitempty"`
	Reason    string `json:"reason,omitempty"`
	ContactID int64  `json:"contact_id,omitempty"`
	SurveyURL string `json:"survey_url,omitempty"`
}

// Summary counts a batch's rows by outcome.
type Summary struct {
	BatchID   string     `json:"batch_id"`
	Rows      int64      `json:"rows"`
	Pushed    int64      `json:"pushed"`
	Skipped   int64      `json:"skipped"`
	Failed    int64      `json:"failed"`
	Invalid   int64      `json:"invalid"`
	Uncertain int64      `json:"uncertain"`
	Send      *SendEntry `json:"send,omitempty"`
}

func (s *Summary) add(outcome string) {
	s.Rows++
	switch outcome {
	case OutcomePushed:
		s.Pushed++
	case OutcomeSkipped:
		s.Skipped++
	case OutcomeFailed:
		s.Failed++
	case OutcomeInvalid:
		s.Invalid++
	case OutcomeUncertain:
		s.Uncertain++
	}
}

// sourceRow is one row read from a source. problem is set when the row
// could not even be parsed (a CSV quoting error, a JSONL line that is not an
// object); get is nil then.
type sourceRow struct {
	line    int64
	get     func(col string) (string, bool)
	problem *rowProblem
}

// rowIter returns the next row, or io.EOF after the last one. Any other
// error aborts the batch (the source became unreadable).
type rowIter func() (sourceRow, error)

// in-memory key states
const (
	kPushed    uint8 = 1
	kUncertain uint8 = 2
	kInflight  uint8 = 3
)

type keyID [16]byte

func keyDigest(distributionID int64, key string) keyID {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(distributionID))
	h.Write(b[:])
	h.Write([]byte(key))
	var id keyID
	copy(id[:], h.Sum(nil))
	return id
}

// feed is one configured feed with its in-memory view of the ledger: a
// 17-byte entry per key ever pushed or uncertain, so that 100k+ keys load in
// well under a second and cost a few MB.
type feed struct {
	opts    Options
	mapper  *mapper
	api     API
	ledger  Ledger
	m       *metrics
	log     *slog.Logger
	now     func() time.Time
	grace   time.Duration
	classes func(error) (state, msg string, systemic bool)
	calls   chan struct{} // create-contact calls in flight, Concurrency slots
	leading func() bool   // RunnerOptions.Leading; nil: always

	loadMu    sync.Mutex
	loaded    bool // loaded for real runs (open intents recorded as uncertain)
	loadedDry bool // loaded for dry runs only

	mu          sync.Mutex
	keys        map[keyID]uint8
	batchPushed map[string]int64  // pushed rows per batch id, for a resumed batch's send
	sends       map[string]string // batch id → send state
	lastVersion uint64
	uncertainN  int64
}

// version returns a strictly increasing version (nanoseconds), so a later
// ledger record always wins in a ReplacingMergeTree. f.mu must be held.
func (f *feed) version(t time.Time) uint64 {
	v := uint64(t.UnixNano())
	if v <= f.lastVersion {
		v = f.lastVersion + 1
	}
	f.lastVersion = v
	return v
}

func (f *feed) isLeading() bool { return f.leading == nil || f.leading() }

// ensureLoaded reads the ledger once. Intents found without a settlement
// are recorded as uncertain (unless dry).
func (f *feed) ensureLoaded(ctx context.Context, dry bool) error {
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	if f.loaded || (dry && f.loadedDry) {
		return nil
	}
	keys := make(map[keyID]uint8)
	batchPushed := map[string]int64{}
	open := map[keyID]ContactEntry{} // intents not (yet) settled
	start := f.now()
	var n int64
	err := f.ledger.LoadContacts(ctx, f.opts.Name, func(e ContactEntry) error {
		n++
		id := keyDigest(e.DistributionID, e.Key)
		switch e.State {
		case StatePushed:
			keys[id] = kPushed
			batchPushed[e.BatchID]++
			delete(open, id)
		case StateUncertain:
			keys[id] = kUncertain
			delete(open, id)
		case StateIntent:
			keys[id] = kUncertain
			open[id] = e
		case StateFailed:
			delete(keys, id)
			delete(open, id)
		case StateReleased:
			// A release undoes only the open intent it follows (its
			// version is that intent's + 1). A ledger that keeps every
			// record (the file ledger) may hold it after a later leader's
			// record of the key (uncertain, pushed, or the intent of a
			// leader that read the ledger before ours): that record
			// stands. (ClickHouse returns only the latest record
			// by version, and a release's version follows its intent's.)
			if o, ok := open[id]; ok && o.Version+1 == e.Version {
				delete(keys, id)
				delete(open, id)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("feed %s: load ledger: %w", f.opts.Name, err)
	}
	sends := map[string]string{}
	openSends := map[string]SendEntry{}
	err = f.ledger.LoadSends(ctx, f.opts.Name, func(e SendEntry) error {
		switch e.State {
		case SendReleased: // never called: the batch may still send (as for contacts, only an open intent is undone)
			if o, ok := openSends[e.BatchID]; ok && o.Version+1 == e.Version {
				delete(sends, e.BatchID)
				delete(openSends, e.BatchID)
			}
		case SendIntent:
			sends[e.BatchID] = e.State
			openSends[e.BatchID] = e
		default:
			sends[e.BatchID] = e.State
			delete(openSends, e.BatchID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("feed %s: load sends: %w", f.opts.Name, err)
	}
	var uncertain int64
	for _, s := range keys {
		if s == kUncertain {
			uncertain++
		}
	}
	f.mu.Lock()
	f.keys, f.batchPushed, f.sends, f.uncertainN = keys, batchPushed, sends, uncertain
	f.mu.Unlock()
	if !dry {
		f.m.uncertain.WithLabelValues(f.opts.Name).Set(float64(uncertain))
		if err := f.markUncertain(ctx, open, openSends); err != nil {
			return err
		}
	}
	f.log.Info("feed ledger loaded", "feed", f.opts.Name, "records", n, "keys", len(keys),
		"uncertain", uncertain, "took", f.now().Sub(start).Round(time.Millisecond))
	if dry {
		f.loadedDry = true // a real run loads again and settles open intents
	} else {
		f.loaded = true
	}
	return nil
}

const uncertainReason = "the process stopped between recording the intent and the service's answer: the contact may or may not exist (docs/feeds.md: resolving uncertain rows)"

func (f *feed) markUncertain(ctx context.Context, open map[keyID]ContactEntry, openSends map[string]SendEntry) error {
	if len(open) == 0 && len(openSends) == 0 {
		return nil
	}
	now := f.now().UTC()
	entries := make([]ContactEntry, 0, len(open))
	f.mu.Lock()
	for _, e := range open {
		e.State, e.Error, e.UpdatedAt, e.Version = StateUncertain, uncertainReason, now, f.version(now)
		entries = append(entries, e)
	}
	f.mu.Unlock()
	if err := f.ledger.RecordContacts(ctx, entries); err != nil {
		return fmt.Errorf("feed %s: record uncertain rows: %w", f.opts.Name, err)
	}
	if len(entries) > 0 {
		f.log.Warn("feed rows uncertain after an interrupted run: not pushed again, resolve them (docs/feeds.md)",
			"feed", f.opts.Name, "rows", len(entries))
	}
	for _, e := range openSends {
		f.mu.Lock()
		e.State, e.Error, e.At, e.Version = SendUncertain, "the process stopped during the send call: not repeated", now, f.version(now)
		f.sends[e.BatchID] = SendUncertain
		f.mu.Unlock()
		if err := f.ledger.RecordSend(ctx, e); err != nil {
			return fmt.Errorf("feed %s: record uncertain send: %w", f.opts.Name, err)
		}
		f.log.Warn("feed send uncertain after an interrupted run: not repeated", "feed", f.opts.Name, "batch", e.BatchID)
	}
	return nil
}

type pending struct {
	line    int64
	key     string
	id      keyID
	contact survey.Contact
}

// batchRun is one batch in progress.
type batchRun struct {
	f       *feed
	id      string
	file    string
	emit    func(RowResult)
	dry     bool
	dryKeys map[keyID]bool

	mu  sync.Mutex // guards sum and calls to emit
	sum Summary

	// chunks runs each chunk from its intents to its outcomes,
	// pipelineDepth at a time; failed ends at its first error (or the hard
	// stop), and then no chunk starts.
	chunks *errgroup.Group
	failed context.Context
}

// pipelineDepth is how many chunks may be between their intent and their
// outcomes at once: the intents of the next chunk are written while the
// previous chunk's calls run. After a crash at most this many chunks of
// rows can be uncertain.
const pipelineDepth = 2

// runBatch reads rows from next until io.EOF, validates, pushes new ones in
// chunks, and triggers the send. emit gets every row's result (from one
// goroutine at a time, not in line order). ctx is the stop signal: when it
// ends, no new chunk starts, the chunks in flight finish within the grace
// period, and runBatch returns ctx's error.
func (f *feed) runBatch(ctx context.Context, batchID, file string, next rowIter, emit func(RowResult), dry bool) (Summary, error) {
	return f.runBatchStop(ctx, ctx, batchID, file, next, emit, dry)
}

// runBatchStop is runBatch with two signals: when ctx ends no new chunk
// starts (an http client that went away); only when shutdown ends does the
// grace period start, after which the calls in flight are cancelled. So a
// client disconnect lets the chunks already started finish (their calls are
// bounded by the API client's timeout) and their outcomes be recorded.
func (f *feed) runBatchStop(ctx, shutdown context.Context, batchID, file string, next rowIter, emit func(RowResult), dry bool) (Summary, error) {
	b := &batchRun{f: f, id: batchID, file: file, emit: emit, dry: dry, sum: Summary{BatchID: batchID}}
	if dry {
		b.dryKeys = map[keyID]bool{}
	}
	if err := f.ensureLoaded(ctx, dry); err != nil {
		return b.sum, err
	}
	// Work that has started (intents recorded) is finished even when ctx
	// ends, within the grace period: a soft stop leaves nothing uncertain.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(shutdown, func() { time.AfterFunc(f.grace, cancelWork) })
	defer stop()

	b.chunks, b.failed = errgroup.WithContext(work)
	b.chunks.SetLimit(pipelineDepth)
	err := b.read(ctx, work, next)
	if cerr := b.chunks.Wait(); err == nil {
		err = cerr
	}
	if err == nil {
		err = b.send(work)
	}
	return b.sum, err
}

// read reads, validates and claims rows and dispatches full chunks.
func (b *batchRun) read(ctx, work context.Context, next rowIter) error {
	f := b.f
	chunk := make([]pending, 0, f.opts.ChunkRows)
	release := func(chunk []pending) {
		f.mu.Lock()
		for _, p := range chunk {
			delete(f.keys, p.id)
		}
		f.mu.Unlock()
	}
	dispatch := func() {
		c := chunk
		chunk = make([]pending, 0, f.opts.ChunkRows)
		b.chunks.Go(func() error { // waits for one of the pipelineDepth slots
			if b.failed.Err() != nil { // a chunk failed meanwhile, or the hard stop
				release(c)
				return work.Err()
			}
			if !b.dry && !f.isLeading() {
				release(c)
				return ErrNotLeading
			}
			entries, err := b.begin(work, c)
			if err != nil {
				return err
			}
			return b.finish(work, c, entries)
		})
	}
	for {
		if err := ctx.Err(); err != nil {
			release(chunk)
			return err
		}
		if b.failed.Err() != nil {
			release(chunk)
			return work.Err() // nil when a chunk failed: Wait reports its error
		}
		row, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		var ur *errUnreadable
		if errors.As(err, &ur) && len(chunk) > 0 {
			// The file cannot be read past here (a record over the cap)
			// and goes to failed/: the rows before it are pushed, as
			// those of the chunks already dispatched.
			dispatch()
			return err
		}
		if err != nil {
			release(chunk)
			return err
		}
		if row.problem != nil {
			b.result(RowResult{Line: row.line, Outcome: OutcomeInvalid, Field: row.problem.Field, Reason: row.problem.Reason})
			continue
		}
		c, key, prob := f.mapper.mapRow(row.get)
		if prob != nil {
			b.result(RowResult{Line: row.line, Key: key, Outcome: OutcomeInvalid, Field: prob.Field, Reason: prob.Reason})
			continue
		}
		id := keyDigest(f.opts.DistributionID, key)
		if outcome, reason := b.claim(id); outcome != "" {
			b.result(RowResult{Line: row.line, Key: key, Outcome: outcome, Reason: reason})
			continue
		}
		if b.dry {
			b.result(RowResult{Line: row.line, Key: key, Outcome: OutcomePushed, Reason: "would push " + describe(&c)})
			continue
		}
		chunk = append(chunk, pending{line: row.line, key: key, id: id, contact: c})
		if len(chunk) == cap(chunk) {
			dispatch()
		}
	}
	if len(chunk) > 0 {
		dispatch()
	}
	return nil
}

// claim decides whether a key may be pushed by this batch and marks it in
// flight. It returns a non-empty outcome when the row must not be pushed.
func (b *batchRun) claim(id keyID) (outcome, reason string) {
	f := b.f
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.keys[id] {
	case kPushed:
		return OutcomeSkipped, "already pushed"
	case kUncertain:
		return OutcomeUncertain, "an earlier push of this key has an unknown outcome: not pushed again until resolved (docs/feeds.md)"
	case kInflight:
		return OutcomeSkipped, "key repeated in this batch or being pushed by another batch"
	}
	if b.dry {
		if b.dryKeys[id] {
			return OutcomeSkipped, "key repeated in this batch"
		}
		b.dryKeys[id] = true
		return "", ""
	}
	f.keys[id] = kInflight
	return "", ""
}

func (b *batchRun) result(r RowResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sum.add(r.Outcome)
	if !b.dry {
		b.f.m.rows.WithLabelValues(b.f.opts.Name, r.Outcome).Inc()
	}
	if b.emit != nil {
		b.emit(r)
	}
}

// begin records the intents of a chunk durably. On error the chunk's keys
// are released (nothing was called).
func (b *batchRun) begin(ctx context.Context, chunk []pending) ([]ContactEntry, error) {
	f := b.f
	now := f.now().UTC()
	entries := make([]ContactEntry, len(chunk))
	f.mu.Lock()
	for i, p := range chunk {
		entries[i] = ContactEntry{Feed: f.opts.Name, Key: p.key, DistributionID: f.opts.DistributionID,
			State: StateIntent, BatchID: b.id, File: b.file, Line: p.line, UpdatedAt: now, Version: f.version(now)}
	}
	f.mu.Unlock()
	if err := f.ledger.RecordContacts(ctx, entries); err != nil {
		// Nothing was called: the rows may be pushed by a later batch.
		f.mu.Lock()
		for _, p := range chunk {
			delete(f.keys, p.id)
		}
		f.mu.Unlock()
		return nil, fmt.Errorf("feed %s: record intents: %w", f.opts.Name, err)
	}
	return entries, nil
}

// finish calls create-contact for every row of a chunk whose intents are
// recorded, then records the outcomes. Calls of all chunks of the feed
// share f.calls (Concurrency slots).
func (b *batchRun) finish(ctx context.Context, chunk []pending, entries []ContactEntry) error {
	f := b.f

	var wg sync.WaitGroup
	systemic := make([]bool, len(chunk))
	// The lease once more once the intents are durable: their write may
	// have outlasted it, and a next leader that read the ledger before
	// them would push the same rows. With the lease held here, any next
	// leader reads these intents (it starts a session timeout after our
	// last contact with ZooKeeper, we stop at half of it), so the calls
	// below are safe even if they run late. Rows not called are released
	// (finishNotLeading): the next leader pushes them, or, having read the
	// ledger before them, has pushed them already; never a second create.
	if !b.dry && !f.isLeading() {
		return b.finishNotLeading(ctx, chunk, entries)
	}
	for i := range chunk {
		f.calls <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-f.calls }()
			e := &entries[i]
			created, err := f.api.CreateContact(ctx, f.opts.DistributionID, chunk[i].contact)
			switch {
			case err == nil && created != nil:
				e.State, e.ContactID, e.SurveyURL = StatePushed, created.ID, created.SurveyURL
			case err == nil:
				e.State, e.Error = StateUncertain, "the service answered without a contact"
			default:
				e.State, e.Error, systemic[i] = f.classes(err)
			}
		}()
	}
	wg.Wait()
	pushed, outage := 0, 0
	for i := range entries {
		if entries[i].State == StatePushed {
			pushed++
		}
		if systemic[i] {
			outage++
		}
	}

	now := f.now().UTC()
	f.mu.Lock()
	for i := range entries {
		entries[i].UpdatedAt, entries[i].Version = now, f.version(now)
		switch entries[i].State {
		case StatePushed:
			f.keys[chunk[i].id] = kPushed
			f.batchPushed[b.id]++
		case StateUncertain:
			f.keys[chunk[i].id] = kUncertain
			f.uncertainN++
		default:
			delete(f.keys, chunk[i].id)
		}
	}
	uncertain := f.uncertainN
	f.mu.Unlock()
	f.m.uncertain.WithLabelValues(f.opts.Name).Set(float64(uncertain))

	settleErr := b.settle(ctx, entries)
	for i, e := range entries {
		r := RowResult{Line: chunk[i].line, Key: e.Key, ContactID: e.ContactID, SurveyURL: e.SurveyURL, Reason: e.Error}
		switch e.State {
		case StatePushed:
			r.Outcome = OutcomePushed
		case StateUncertain:
			r.Outcome = OutcomeUncertain
		default:
			r.Outcome = OutcomeFailed
		}
		b.result(r)
	}
	if settleErr != nil {
		return settleErr
	}
	if pushed == 0 && outage > 0 {
		return fmt.Errorf("feed %s: no row of a chunk could be pushed (%d failed on the service or the connection, e.g. %s): batch stopped, retried later",
			f.opts.Name, outage, firstSystemic(entries, systemic))
	}
	return nil
}

// errNotCalled is the reason of a row whose intent was recorded but whose
// create call was not made: the lease lapsed in between.
const (
	errNotCalled    = "not pushed: this daemon lost the lead after recording the intent and before the call; released, the next leader pushes it (docs/feeds.md)"
	errNotReleased  = "not pushed: this daemon lost the lead after recording the intent and before the call, and could not record that (%v); the next leader reports it uncertain (docs/feeds.md)"
	releaseAttempts = 3
)

// finishNotLeading ends a chunk not called because the lease lapsed while
// its intents were written: no create call of it was made, so its intents
// are released (StateReleased) and its rows fail with errNotCalled; a later
// batch, or the next leader, pushes them. The chunk fails with
// ErrNotLeading.
//
// A release has the version of its intent + 1: it overrides that intent
// and nothing a next leader records later (its records are a lease's
// length younger), so a next leader that marked the intent uncertain, or
// read the ledger before the intent and pushed the row itself, keeps its
// record. If the release cannot be recorded the intents stay open and the
// rows uncertain, as after a crash.
func (b *batchRun) finishNotLeading(ctx context.Context, chunk []pending, entries []ContactEntry) error {
	f := b.f
	now := f.now().UTC()
	released := make([]ContactEntry, len(entries))
	f.mu.Lock()
	for i, e := range entries {
		e.State, e.Error, e.UpdatedAt, e.Version = StateReleased, errNotCalled, now, e.Version+1
		released[i] = e
		if e.Version > f.lastVersion {
			f.lastVersion = e.Version // our own later records of these keys come after
		}
	}
	f.mu.Unlock()
	err := b.record(ctx, released, releaseAttempts)
	f.mu.Lock()
	for _, p := range chunk {
		if err == nil {
			delete(f.keys, p.id)
		} else {
			f.keys[p.id] = kUncertain
			f.uncertainN++
		}
	}
	uncertain := f.uncertainN
	f.mu.Unlock()
	if err != nil {
		f.m.uncertain.WithLabelValues(f.opts.Name).Set(float64(uncertain))
		f.log.Warn("feed: the lead was lost before a chunk's calls and its release could not be recorded: its rows are uncertain",
			"feed", f.opts.Name, "rows", len(chunk), "err", err)
	}
	for _, p := range chunk {
		r := RowResult{Line: p.line, Key: p.key, Outcome: OutcomeFailed, Reason: errNotCalled}
		if err != nil {
			r.Outcome, r.Reason = OutcomeUncertain, fmt.Sprintf(errNotReleased, err)
		}
		b.result(r)
	}
	return ErrNotLeading
}

func firstSystemic(entries []ContactEntry, systemic []bool) string {
	for i, s := range systemic {
		if s {
			return entries[i].Error
		}
	}
	return ""
}

// recordTimeout bounds the recording of outcomes already known (a chunk's
// settlement, a send's outcome). It runs on a context detached from the
// batch's: a client that disconnects, or the end of the shutdown grace,
// must not turn contacts the service created into uncertain rows.
const recordTimeout = 30 * time.Second

// settleAttempts is how many times settle tries to record a chunk's
// outcomes, waiting internal/backoff's schedule from 500 ms between them.
const settleAttempts = 5

// detached returns a context that is not cancelled with ctx (it keeps its
// values) and ends after recordTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// settle records the chunk's outcomes, retrying a few times: a lost
// settlement turns pushed rows into uncertain ones at the next start. The
// outcomes are known, so they are recorded even when ctx has ended (the
// client disconnected, the grace ran out), within recordTimeout.
func (b *batchRun) settle(ctx context.Context, entries []ContactEntry) error {
	if err := b.record(ctx, entries, settleAttempts); err != nil {
		return fmt.Errorf("feed %s: record outcomes (the rows will show as uncertain at the next start): %w", b.f.opts.Name, err)
	}
	return nil
}

// record records entries whose content is known, up to attempts times,
// waiting internal/backoff's schedule from 500 ms between them, on a
// context detached from ctx (bounded by recordTimeout).
func (b *batchRun) record(ctx context.Context, entries []ContactEntry, attempts int) error {
	rctx, cancel := detached(ctx)
	defer cancel()
	retry := backoff.Policy{Initial: 500 * time.Millisecond, Max: 4 * time.Second}
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		if err = b.f.ledger.RecordContacts(rctx, entries); err == nil {
			return nil
		}
		if attempt == attempts {
			break
		}
		wait := retry.Delay(attempt)
		b.f.log.Warn("feed: recording rows failed, retrying", "feed", b.f.opts.Name, "attempt", attempt, "retry_in", wait, "err", err)
		if backoff.Sleep(rctx, wait) != nil {
			break
		}
	}
	return err
}

// send triggers the feed's message once for a batch that pushed at least
// one new contact (counting rows pushed before an interruption of the same
// batch).
func (b *batchRun) send(ctx context.Context) error {
	f := b.f
	o := f.opts.Send
	if o.MessageID == 0 {
		return nil
	}
	f.mu.Lock()
	pushed := f.batchPushed[b.id]
	prior, sentBefore := f.sends[b.id]
	f.mu.Unlock()
	if b.dry {
		if b.sum.Pushed > 0 && !sentBefore {
			when, _ := o.Schedule.next(f.now())
			e := &SendEntry{Feed: f.opts.Name, BatchID: b.id, DistributionID: f.opts.DistributionID, MessageID: o.MessageID, ScheduledDate: when, Contacts: b.sum.Pushed}
			b.sum.Send = e
		}
		return nil
	}
	if pushed == 0 {
		return nil
	}
	if sentBefore {
		f.log.Info("feed: send already triggered for this batch", "feed", f.opts.Name, "batch", b.id, "state", prior)
		return nil
	}
	if !f.isLeading() {
		return ErrNotLeading
	}
	now := f.now()
	when, err := o.Schedule.next(now)
	if err != nil {
		return fmt.Errorf("feed %s: schedule: %w", f.opts.Name, err)
	}
	f.mu.Lock()
	e := SendEntry{Feed: f.opts.Name, BatchID: b.id, DistributionID: f.opts.DistributionID, MessageID: o.MessageID,
		State: SendIntent, ScheduledDate: when, Contacts: pushed, At: now.UTC(), Version: f.version(now)}
	f.sends[b.id] = SendIntent
	f.mu.Unlock()
	if err := f.ledger.RecordSend(ctx, e); err != nil {
		f.mu.Lock()
		delete(f.sends, b.id)
		f.mu.Unlock()
		return fmt.Errorf("feed %s: record send intent: %w", f.opts.Name, err)
	}
	if !f.isLeading() {
		// The lease lapsed while the intent was written: the call is not
		// made, and the intent is released (version + 1, as in
		// finishNotLeading) so that the next leader triggers the send; if
		// that cannot be recorded the intent stays open and the next leader
		// reports it uncertain. Never two sends.
		f.mu.Lock()
		rel := e
		rel.State, rel.Error, rel.Version = SendReleased, "not sent: this daemon lost the lead after recording the intent and before the call", e.Version+1
		if rel.Version > f.lastVersion {
			f.lastVersion = rel.Version
		}
		f.mu.Unlock()
		rctx, cancel := detached(ctx)
		defer cancel()
		if err := f.ledger.RecordSend(rctx, rel); err != nil {
			f.log.Warn("feed: the lead was lost before a send and its release could not be recorded: the send is uncertain",
				"feed", f.opts.Name, "batch", b.id, "err", err)
			return ErrNotLeading
		}
		f.mu.Lock()
		delete(f.sends, b.id)
		f.mu.Unlock()
		return ErrNotLeading
	}
	req := survey.SendRequest{}
	if when != nil {
		req.ScheduledDate = survey.TimeOf(*when)
	}
	res, err := f.api.SendMessage(ctx, f.opts.DistributionID, o.MessageID, req)
	now = f.now()
	f.mu.Lock()
	e.At, e.Version = now.UTC(), f.version(now)
	switch {
	case err == nil && res != nil:
		e.State = SendSent
		e.Pending, e.Sent, e.Bounces = res.ContactsCount.Pending, res.ContactsCount.Sent, res.ContactsCount.Bounces
	case err == nil:
		e.State = SendSent
	default:
		state, msg, _ := f.classes(err)
		e.State, e.Error = SendFailed, msg
		if state == StateUncertain {
			e.State = SendUncertain
		}
	}
	f.sends[b.id] = e.State
	f.mu.Unlock()
	if e.State == SendSent {
		f.m.sends.WithLabelValues(f.opts.Name).Inc()
		f.m.sendContacts.WithLabelValues(f.opts.Name, "pending").Set(float64(e.Pending))
		f.m.sendContacts.WithLabelValues(f.opts.Name, "sent").Set(float64(e.Sent))
		f.m.sendContacts.WithLabelValues(f.opts.Name, "bounces").Set(float64(e.Bounces))
		f.log.Info("feed: message send triggered", "feed", f.opts.Name, "batch", b.id, "message", o.MessageID,
			"scheduled", when, "pending", e.Pending, "sent", e.Sent, "bounces", e.Bounces)
	} else {
		f.m.sendFailures.WithLabelValues(f.opts.Name).Inc()
		f.log.Error("feed: message send failed; not repeated for this batch (the next batch's send covers these contacts)",
			"feed", f.opts.Name, "batch", b.id, "message", o.MessageID, "state", e.State, "err", e.Error)
	}
	b.sum.Send = &e
	// The call's outcome is known: record it even if ctx ended meanwhile.
	rctx, cancel := detached(ctx)
	defer cancel()
	if err := b.f.ledger.RecordSend(rctx, e); err != nil {
		return fmt.Errorf("feed %s: record send outcome: %w", f.opts.Name, err)
	}
	return nil
}

// describe is a short human text of a contact for dry runs.
func describe(c *survey.Contact) string {
	s := ""
	add := func(k, v string) {
		if v != "" {
			if s != "" {
				s += " "
			}
			s += k + "=" + clip(v)
		}
	}
	add("email", c.Email)
	add("phone", c.Phone)
	add("first_name", c.FirstName)
	add("last_name", c.LastName)
	if c.ImportNumber != nil {
		add("import_number", fmt.Sprint(int64(*c.ImportNumber)))
	}
	return s
}
