// Package erase is the erasure use case (issue 23, docs/privacy.md): a
// response deleted at the source (sync.erase_deleted) or named by an
// operator (surveysync erase) is removed physically from the warehouse
// (warehouse.Eraser) and the files store, and an audit row records it.
//
// Each erasure goes through two durable states:
//
//  1. started: the audit row, which is also the tombstone, is written
//     first. From then on the pipeline does not write the response again
//     (Service.Erased), in this process and, after its next refresh, in a
//     daemon running beside an erase command.
//  2. done: once the rows (EraseRows) and the objects are gone, the audit
//     row is written again with what was removed.
//
// Every step is idempotent, so a run killed anywhere is completed by the
// next one: the daemon at start and at every refresh (Run), and the next
// erase command (Resume), carry every started erasure through. Erasures
// completed within the last Settle are erased once more at each refresh:
// a write that was in flight when the tombstone appeared (a batch being
// written, a file being copied, a webhook being logged) is removed too.
package erase

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Objects removes the stored files of a response (sink/blob's Store).
type Objects interface {
	DeleteResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (int, error)
}

// Options configure a Service.
type Options struct {
	Warehouse warehouse.Eraser // required
	Objects   Objects          // nil when no files are copied
	// HashContact gives the contact_id_hash of a contact id when
	// privacy.fields.contact_id is hash; nil otherwise.
	HashContact func(int64) string
	// Refresh is how often Run reloads the tombstones and finishes started
	// erasures (10 s).
	Refresh time.Duration
	// Settle is how long after its completion an erasure is swept again
	// (2 min).
	Settle time.Duration
	// MaxBatch bounds how many responses one EraseRows call removes
	// (1000): one mutation per table per batch.
	MaxBatch int
	Logger   *slog.Logger
	Now      func() time.Time
}

// Defaults of zero Options fields.
const (
	DefaultRefresh  = 10 * time.Second
	DefaultSettle   = 2 * time.Minute
	DefaultMaxBatch = 1000
)

func (o *Options) setDefaults() {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Service erases responses and answers whether one is erased.
type Service struct {
	o Options

	mu    sync.Mutex
	tombs map[warehouse.ResponseKey]warehouse.Erasure // latest audit row of each erased response

	queue   chan warehouse.ResponseKey // responses deleted at the source, erased by Run
	pending atomic.Int64               // queued or being erased by Run

	onErased atomic.Pointer[func()] // OnErased's f
}

// OnErased sets f, called (without waiting for it to act: the webhook
// receiver's Scrub) whenever the tombstone set grows: an erasure started
// here, or found at a reload (an erase command, another daemon).
func (s *Service) OnErased(f func()) { s.onErased.Store(&f) }

func (s *Service) notify() {
	if f := s.onErased.Load(); f != nil {
		(*f)()
	}
}

// New returns a Service; call Load before the pipeline consults Erased.
func New(o Options) (*Service, error) {
	if o.Warehouse == nil {
		return nil, errors.New("erase: the warehouse cannot erase")
	}
	o.setDefaults()
	return &Service{o: o, tombs: map[warehouse.ResponseKey]warehouse.Erasure{}, queue: make(chan warehouse.ResponseKey, 4096)}, nil
}

// Load reads every audit row into the tombstone set.
func (s *Service) Load(ctx context.Context) error {
	es, err := s.o.Warehouse.Erasures(ctx)
	if err != nil {
		return fmt.Errorf("erase: load tombstones: %w", err)
	}
	grew := false
	s.mu.Lock()
	for _, e := range es {
		if _, ok := s.tombs[e.ResponseKey]; !ok {
			grew = true
		}
		s.tombs[e.ResponseKey] = e
	}
	s.mu.Unlock()
	if grew {
		s.notify()
	}
	return nil
}

// Erased reports whether a response has a tombstone (the pipeline skips it).
func (s *Service) Erased(surveyID int64, id survey.GUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tombs[warehouse.ResponseKey{SurveyID: surveyID, ResponseID: normalize(id)}]
	return ok
}

// normalize is the form ids are compared in: lowercase.
func normalize(id survey.GUID) survey.GUID { return survey.GUID(strings.ToLower(string(id))) }

// Deleted queues a response deleted at the source for erasure by Run
// (sync.erase_deleted). When the queue is full it writes the tombstone
// at once instead, and Run's next refresh finishes the erasure.
func (s *Service) Deleted(ctx context.Context, surveyID int64, id survey.GUID) {
	k := warehouse.ResponseKey{SurveyID: surveyID, ResponseID: normalize(id)}
	s.pending.Add(1)
	select {
	case s.queue <- k:
	default:
		s.pending.Add(-1)
		// Full: the tombstone makes the next refresh finish it.
		if err := s.start(ctx, []warehouse.ResponseKey{k}, warehouse.ReasonDeletedAtSource); err != nil {
			s.o.Logger.Warn("erase: could not record a deleted response's tombstone; it stays as a deletion row", "survey_id", surveyID, "response_id", k.ResponseID, "err", err)
		}
	}
}

// Report says what an erasure removed.
type Report struct {
	Responses int              // responses erased
	Rows      map[string]int64 // rows removed per table
	Objects   int              // objects removed from the files store
	Contacts  int64            // pushed_contacts rows removed (erase --contact)
}

func (r Report) String() string {
	return fmt.Sprintf("%d responses; %s", r.Responses, formatCounts(r.Rows, r.Objects))
}

// formatCounts is Erasure.Erased: "table=rows" in a fixed order.
func formatCounts(rows map[string]int64, objects int) string {
	var keys []string
	for k := range rows {
		keys = append(keys, k)
	}
	order := []string{"responses", "answers", "uploaded_files", "webhook_events", "rejects"}
	sort.Slice(keys, func(i, j int) bool {
		a, b := slices.Index(order, keys[i]), slices.Index(order, keys[j])
		if a < 0 {
			a = len(order)
		}
		if b < 0 {
			b = len(order)
		}
		if a != b {
			return a < b
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, rows[k]))
	}
	parts = append(parts, fmt.Sprintf("objects=%d", objects))
	return strings.Join(parts, " ")
}

// start writes the tombstones of keys (state started) unless they have
// one, and adds them to the set.
func (s *Service) start(ctx context.Context, keys []warehouse.ResponseKey, reason string) error {
	now := s.o.Now().UTC().Truncate(time.Second)
	var fresh []warehouse.Erasure
	s.mu.Lock()
	for _, k := range keys {
		if _, ok := s.tombs[k]; ok {
			continue
		}
		fresh = append(fresh, warehouse.Erasure{ResponseKey: k, Reason: reason, State: warehouse.ErasureStarted, RequestedAt: now})
	}
	s.mu.Unlock()
	if err := s.o.Warehouse.RecordErasures(ctx, fresh); err != nil {
		return err
	}
	s.mu.Lock()
	for _, e := range fresh {
		s.tombs[e.ResponseKey] = e
	}
	s.mu.Unlock()
	if len(fresh) > 0 {
		s.notify()
	}
	return nil
}

// Erase erases responses: tombstones first, then rows and objects, then
// the done audit rows. Responses already erased are erased again (nothing
// is found) and keep their first audit row's reason and time.
func (s *Service) Erase(ctx context.Context, keys []warehouse.ResponseKey, reason string) (Report, error) {
	for i := range keys {
		keys[i].ResponseID = normalize(keys[i].ResponseID)
		if _, err := survey.ParseGUID(string(keys[i].ResponseID)); err != nil {
			return Report{}, fmt.Errorf("erase: response of survey %d: not a GUID", keys[i].SurveyID)
		}
	}
	if err := s.start(ctx, keys, reason); err != nil {
		return Report{}, fmt.Errorf("erase: record tombstones: %w", err)
	}
	rep := Report{Rows: map[string]int64{}}
	for b := range slices.Chunk(keys, s.o.MaxBatch) {
		r, err := s.finish(ctx, b)
		rep.Responses += r.Responses
		rep.Objects += r.Objects
		for k, v := range r.Rows {
			rep.Rows[k] += v
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// finish removes the rows and objects of keys (tombstoned) and writes
// their done audit rows.
func (s *Service) finish(ctx context.Context, keys []warehouse.ResponseKey) (Report, error) {
	rows, err := s.o.Warehouse.EraseRows(ctx, keys)
	if err != nil {
		return Report{}, fmt.Errorf("erase %d responses: %w", len(keys), err)
	}
	rep := Report{Responses: len(keys), Rows: rows}
	perKey := map[warehouse.ResponseKey]int{}
	if s.o.Objects != nil {
		for _, k := range keys {
			n, err := s.o.Objects.DeleteResponse(ctx, k.SurveyID, k.ResponseID)
			if err != nil {
				return rep, fmt.Errorf("erase the files of response %s of survey %d: %w", k.ResponseID, k.SurveyID, err)
			}
			perKey[k] = n
			rep.Objects += n
		}
	}
	now := s.o.Now().UTC().Truncate(time.Second)
	var done []warehouse.Erasure
	s.mu.Lock()
	for _, k := range keys {
		e := s.tombs[k]
		if e.State == warehouse.ErasureDone && perKey[k] == 0 && allZero(rows) {
			continue // a sweep that found nothing: the audit row stands
		}
		e.ResponseKey, e.State, e.CompletedAt = k, warehouse.ErasureDone, now
		if len(keys) == 1 {
			e.Erased = mergeCounts(e.Erased, formatCounts(rows, perKey[k]))
		} else {
			// One mutation per table for the batch: the rows are counted
			// for the batch, not per response.
			e.Erased = mergeCounts(e.Erased, fmt.Sprintf("batch_of=%d %s", len(keys), formatCounts(rows, perKey[k])))
		}
		done = append(done, e)
	}
	s.mu.Unlock()
	if err := s.o.Warehouse.RecordErasures(ctx, done); err != nil {
		return rep, fmt.Errorf("erase: record %d audit rows: %w", len(done), err)
	}
	s.mu.Lock()
	for _, e := range done {
		s.tombs[e.ResponseKey] = e
	}
	s.mu.Unlock()
	return rep, nil
}

func allZero(m map[string]int64) bool {
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// mergeCounts keeps what an earlier run found when a later one finds
// nothing more: "before; then after".
func mergeCounts(before, after string) string {
	if before == "" {
		return after
	}
	return before + "; then " + after
}

// EraseContact erases every response of a contact, and its feed ledger
// rows.
func (s *Service) EraseContact(ctx context.Context, contactID int64) (Report, error) {
	hash := ""
	if s.o.HashContact != nil {
		hash = s.o.HashContact(contactID)
	}
	keys, err := s.o.Warehouse.ResponsesOfContact(ctx, contactID, hash)
	if err != nil {
		return Report{}, fmt.Errorf("erase a contact: %w", err)
	}
	rep, err := s.Erase(ctx, keys, warehouse.ReasonContactRequest)
	if err != nil {
		return rep, err
	}
	n, err := s.o.Warehouse.EraseContact(ctx, contactID, hash)
	if err != nil {
		return rep, fmt.Errorf("erase a contact's feed ledger rows: %w", err)
	}
	rep.Contacts = n
	return rep, nil
}

// Resume reloads the tombstones and finishes every started erasure (and,
// with sweep, erases again those completed within Settle).
func (s *Service) Resume(ctx context.Context, sweep bool) (Report, error) {
	if err := s.Load(ctx); err != nil {
		return Report{}, err
	}
	now := s.o.Now()
	var keys []warehouse.ResponseKey
	s.mu.Lock()
	for k, e := range s.tombs {
		if e.State != warehouse.ErasureDone || (sweep && now.Sub(e.CompletedAt) < s.o.Settle) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].SurveyID != keys[j].SurveyID {
			return keys[i].SurveyID < keys[j].SurveyID
		}
		return keys[i].ResponseID < keys[j].ResponseID
	})
	rep := Report{Rows: map[string]int64{}}
	for b := range slices.Chunk(keys, s.o.MaxBatch) {
		r, err := s.finish(ctx, b)
		rep.Responses += r.Responses
		rep.Objects += r.Objects
		for k, v := range r.Rows {
			rep.Rows[k] += v
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Run erases the responses Deleted queues, in batches, and every Refresh
// reloads the tombstones (an erase command may have added some), finishes
// started erasures and sweeps recent ones. It returns when ctx ends.
// Failures are logged and retried at the next refresh.
func (s *Service) Run(ctx context.Context) error {
	tick := time.NewTicker(s.o.Refresh)
	defer tick.Stop()
	s.resume(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-s.queue:
			keys := []warehouse.ResponseKey{k}
		more:
			for len(keys) < s.o.MaxBatch {
				select {
				case k := <-s.queue:
					keys = append(keys, k)
				default:
					break more
				}
			}
			rep, err := s.Erase(ctx, keys, warehouse.ReasonDeletedAtSource)
			s.pending.Add(-int64(len(keys)))
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.o.Logger.Warn("erasing responses deleted at the source failed; retried at the next refresh", "responses", len(keys), "err", err)
				continue
			}
			s.o.Logger.Info("erased responses deleted at the source", "responses", rep.Responses, "erased", formatCounts(rep.Rows, rep.Objects))
		case <-tick.C:
			s.resume(ctx)
		}
	}
}

// Watch reloads the tombstones every Refresh until ctx ends, while skip
// (nil: never) says no: a daemon that does not run Run (an ha follower)
// honours an erasure made meanwhile by another process — when it receives
// a webhook about the response, or becomes the leader — within Refresh.
func (s *Service) Watch(ctx context.Context, skip func() bool) {
	tick := time.NewTicker(s.o.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if skip != nil && skip() {
				continue
			}
			if err := s.Load(ctx); err != nil && ctx.Err() == nil {
				s.o.Logger.Warn("reloading the tombstones failed; tried again at the next refresh", "err", err)
			}
		}
	}
}

// Idle reports whether no response Deleted queued waits for Run (a
// one-shot run waits for it before it stops; a failed erasure counts as
// done here: its tombstone makes the next start finish it).
func (s *Service) Idle() bool { return s.pending.Load() == 0 }

func (s *Service) resume(ctx context.Context) {
	rep, err := s.Resume(ctx, true)
	if err != nil {
		if ctx.Err() == nil {
			s.o.Logger.Warn("finishing erasures failed; retried at the next refresh", "err", err)
		}
		return
	}
	if !allZero(rep.Rows) || rep.Objects > 0 {
		s.o.Logger.Info("finished erasures", "responses", rep.Responses, "erased", formatCounts(rep.Rows, rep.Objects))
	}
}
