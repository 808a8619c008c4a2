package webhookrx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/internal/kvstore"
	"github.com/surveysync/surveysync/survey"
)

// The spool is a bbolt database, SpoolDir/spool.db (internal/kvstore):
//
//	events   seq → [received_at unix ns int64][len(id) uint16][id][body]   the events waiting
//	done     n → [seq uint64][id]   the last DedupeIDs processed events, in the order they were done
//	retries  seq → [attempts uint32][next attempt unix ns int64]   failed Process calls of waiting events
//	meta     legacy_imported → unix ns   the former log files were imported (legacy.go)
//	         redacted_under → RedactRules   the waiting bodies were rewritten under these rules (privacy.go)
//
// The events bucket's sequence is the last sequence number given, so
// numbers keep increasing across restarts when the spool is empty.
// SpoolDir/lock is flock'ed while a receiver runs.
//
// A group of events is put in one write transaction, committed (written
// and fdatasync'ed) before any of its requests is answered (group commit).
// An event's done mark deletes it from events and adds it to done in one
// transaction; done marks and retry counts are committed together, in
// groups. A crash leaves the last committed transaction: nothing answered
// 200 is lost, nothing done is done twice, except the marks of the group
// being committed (those events are processed again).
const (
	dbName   = "spool.db"
	lockName = "lock"
	// compactFreeBytes: a spool file with more free space than this, and
	// three quarters of it free, is rewritten at start (compact).
	compactFreeBytes = 64 << 20
	// eventOverhead is what an event costs beyond its id and body when it
	// is counted against SpoolMaxBytes and the memory window: the record
	// header of the former log, kept so the caps mean what they meant.
	eventOverhead = 26
)

var (
	bucketEvents  = []byte("events")
	bucketDone    = []byte("done")
	bucketRetries = []byte("retries")
	bucketMeta    = []byte("meta")
	keyImported   = []byte("legacy_imported")
	keyRedacted   = []byte("redacted_under") // the RedactRules the waiting bodies were rewritten under (privacy.go)
)

// spooled is an accepted event not yet done: only its index entry stays in
// memory; the body is read back from the database when a worker needs it
// (read), so the spool's memory does not grow with the events waiting.
type spooled struct {
	seq        uint64
	id         string
	survey     int64       // for the feeder's gates
	response   survey.GUID // for erasure (purge)
	receivedAt time.Time
	size       int64 // id, body and eventOverhead
}

// retryState is a waiting event's failed attempts and when it may be
// tried again.
type retryState struct {
	attempts int
	next     time.Time
}

// spool is owned by one goroutine (the receiver's spool loop); it is not
// safe for concurrent use.
type spool struct {
	dir     string
	log     *slog.Logger
	lock    *os.File
	db      *bolt.DB
	nextSeq uint64
	bySeq   map[uint64]*spooled
	byID    map[string]*spooled
	order   []uint64 // seqs in acceptance order; order[head:] may hold done ones
	head    int
	bytes   int64
	done    *doneIndex
	// doneAtLoad counts, by kind, the events found at start that were
	// already done (only in a spool of the former format, legacy.go).
	doneAtLoad map[string]int
	// replayedKinds counts, by kind, the events found waiting at start.
	replayedKinds map[string]int
	// attempts are the failed Process calls of waiting events (the
	// feeder's map): so an event's attempt count survives a restart.
	attempts map[uint64]int
	// retryAt is, for the events loaded at start that failed before, when
	// they may be tried again (their own backoff survives a restart).
	retryAt map[uint64]time.Time
	// pending are attempt counts noted since the last commit of marks.
	pending map[uint64]retryState
}

// openSpool locks dir, opens the database (importing a spool of the former
// format first) and returns the sequence numbers of the events still to
// process, in spool order (read their bodies with read).
func openSpool(dir string, dedupeIDs int, log *slog.Logger) (*spool, []uint64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("webhookrx: spool dir: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	s := &spool{
		dir: dir, log: log, lock: lock,
		bySeq: map[uint64]*spooled{}, byID: map[string]*spooled{}, doneAtLoad: map[string]int{}, replayedKinds: map[string]int{},
		done: newDoneIndex(dedupeIDs), attempts: map[uint64]int{}, retryAt: map[uint64]time.Time{}, pending: map[uint64]retryState{},
	}
	fail := func(err error) (*spool, []uint64, error) {
		s.close()
		return nil, nil, err
	}
	path := filepath.Join(dir, dbName)
	s.db, err = kvstore.Open(path, "webhookrx: spool")
	if errors.Is(err, kvstore.ErrDamaged) {
		if err = s.recoverDamaged(path, err); err == nil {
			s.db, err = kvstore.Open(path, "webhookrx: spool")
		}
	}
	if err != nil {
		return fail(err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketEvents, bucketDone, bucketRetries, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fail(fmt.Errorf("webhookrx: spool %s: %w", dir, err))
	}
	if err := s.importLegacy(dedupeIDs); err != nil {
		return fail(err)
	}
	if err := s.compact(compactFreeBytes); err != nil {
		return fail(err)
	}
	evs, err := s.load()
	if err != nil {
		return fail(fmt.Errorf("webhookrx: spool %s: %w", dir, err))
	}
	return s, evs, nil
}

// compact rewrites the database without its free pages when more than
// minFree bytes and three quarters of the file are free (after an outage
// filled the spool, say): bbolt reuses free pages but never shrinks its
// file. The copy is synced and renamed over the original, so a crash
// leaves one or the other whole.
func (s *spool) compact(minFree int64) error {
	path := filepath.Join(s.dir, dbName)
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("webhookrx: spool: %w", err)
	}
	st := s.db.Stats()
	free := int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize)
	if free < minFree || free*4 < fi.Size()*3 {
		return nil
	}
	tmp := path + ".compact"
	_ = os.Remove(tmp)
	dst, err := kvstore.Open(tmp, "webhookrx: spool copy")
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, s.db, 32<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("webhookrx: spool %s: compact: %w", s.dir, err)
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("webhookrx: spool %s: compact: %w", s.dir, err)
	}
	s.db = nil
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("webhookrx: spool %s: compact: %w", s.dir, err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("webhookrx: spool %s: compact: %w", s.dir, err)
	}
	if s.db, err = kvstore.Open(path, "webhookrx: spool"); err != nil {
		return err
	}
	after, _ := os.Stat(path)
	if after != nil {
		s.log.Info("webhook spool: compacted its file", "dir", s.dir, "bytes_before", fi.Size(), "bytes_after", after.Size())
	}
	return nil
}

// load reads the done window, the waiting events and their retry states,
// and trims what is stale (done entries beyond the window, retry states of
// events no longer waiting).
func (s *spool) load() ([]uint64, error) {
	var evs []uint64
	var staleDone, staleRetries [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		done := tx.Bucket(bucketDone)
		total := done.Stats().KeyN
		c := done.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			m, ok := decodeDone(v)
			if total > s.done.max || !ok {
				staleDone = append(staleDone, append([]byte(nil), k...))
				total--
				continue
			}
			s.done.insert(m)
		}
		s.done.count = total
		b := tx.Bucket(bucketEvents)
		s.nextSeq = b.Sequence() + 1
		c = b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			ev, err := decodeEvent(kvstore.Uint(k), v, false)
			if err != nil {
				return err
			}
			s.nextSeq = max(s.nextSeq, ev.Seq+1)
			s.add(&spooled{seq: ev.Seq, id: ev.ID, survey: ev.Parsed.SurveyID, response: ev.Parsed.ResponseID, receivedAt: ev.ReceivedAt, size: eventSize(ev.ID, len(v)-eventHdrLen-len(ev.ID))})
			s.replayedKinds[ev.Kind()]++
			evs = append(evs, ev.Seq)
		}
		c = tx.Bucket(bucketRetries).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			seq := kvstore.Uint(k)
			st, ok := decodeRetry(v)
			if !ok || s.bySeq[seq] == nil {
				staleRetries = append(staleRetries, append([]byte(nil), k...))
				continue
			}
			s.attempts[seq] = st.attempts
			s.retryAt[seq] = st.next
		}
		return nil
	})
	if err != nil || len(staleDone)+len(staleRetries) == 0 {
		return evs, err
	}
	return evs, s.db.Update(func(tx *bolt.Tx) error {
		for _, k := range staleDone {
			if err := tx.Bucket(bucketDone).Delete(k); err != nil {
				return err
			}
		}
		for _, k := range staleRetries {
			if err := tx.Bucket(bucketRetries).Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *spool) add(sp *spooled) {
	s.bySeq[sp.seq] = sp
	s.byID[sp.id] = sp
	s.order = append(s.order, sp.seq)
	s.bytes += sp.size
}

// eventSize is what an event counts against the caps and the memory window.
func eventSize(id string, bodyLen int) int64 { return int64(eventOverhead + len(id) + bodyLen) }

const eventHdrLen = 8 + 2

func encodeEvent(ev *Event) []byte {
	b := make([]byte, 0, eventHdrLen+len(ev.ID)+len(ev.Body))
	b = binary.BigEndian.AppendUint64(b, uint64(ev.ReceivedAt.UnixNano()))
	b = binary.BigEndian.AppendUint16(b, uint16(len(ev.ID)))
	b = append(b, ev.ID...)
	return append(b, ev.Body...)
}

// decodeEvent decodes a value of the events bucket; the body is copied
// (a value is valid only inside its transaction) when withBody is set.
func decodeEvent(seq uint64, v []byte, withBody bool) (Event, error) {
	ev := Event{Seq: seq}
	if len(v) < eventHdrLen {
		return ev, fmt.Errorf("event %d: value of %d bytes", seq, len(v))
	}
	ev.ReceivedAt = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
	idLen := int(binary.BigEndian.Uint16(v[8:]))
	if eventHdrLen+idLen > len(v) {
		return ev, fmt.Errorf("event %d: bad id length %d", seq, idLen)
	}
	ev.ID = string(v[eventHdrLen : eventHdrLen+idLen])
	body := v[eventHdrLen+idLen:]
	// The handler accepted only bodies that parse; should one not, it keeps
	// what parsed (at worst an unknown event with the raw body).
	ev.Parsed, _ = parseEvent(body)
	ev.Name = ev.Parsed.EventName
	if withBody {
		ev.Body = append([]byte(nil), body...)
	}
	return ev, nil
}

func encodeRetry(st retryState) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(min(st.attempts, 1<<31)))
	return binary.BigEndian.AppendUint64(b, uint64(st.next.UnixNano()))
}

func decodeRetry(v []byte) (retryState, bool) {
	if len(v) != 12 {
		return retryState{}, false
	}
	return retryState{attempts: int(binary.BigEndian.Uint32(v)), next: time.Unix(0, int64(binary.BigEndian.Uint64(v[4:])))}, true
}

func encodeDone(m doneMark) []byte { return append(binary.BigEndian.AppendUint64(nil, m.seq), m.id...) }

func decodeDone(v []byte) (doneMark, bool) {
	if len(v) <= 8 {
		return doneMark{}, false
	}
	return doneMark{seq: binary.BigEndian.Uint64(v), id: string(v[8:])}, true
}

// read reads a waiting event back from the database.
func (s *spool) read(seq uint64) (Event, error) {
	if s.bySeq[seq] == nil {
		return Event{}, fmt.Errorf("webhookrx: spool: event %d is not waiting", seq)
	}
	var ev Event
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketEvents).Get(kvstore.Key(seq))
		if v == nil {
			return fmt.Errorf("event %d is not in the database", seq)
		}
		var err error
		ev, err = decodeEvent(seq, v, true)
		return err
	})
	if err != nil {
		return Event{}, fmt.Errorf("webhookrx: spool %s: read: %w", s.dir, err)
	}
	return ev, nil
}

// events waiting in the spool.
func (s *spool) events() int { return len(s.bySeq) }

// oldest returns the receive time of the oldest waiting event (zero if none).
func (s *spool) oldest() time.Time {
	for s.head < len(s.order) {
		if sp := s.bySeq[s.order[s.head]]; sp != nil {
			return sp.receivedAt
		}
		s.head++
	}
	s.order, s.head = s.order[:0], 0
	return time.Time{}
}

// contains reports whether id is waiting or was processed recently.
func (s *spool) contains(id string) bool { return s.byID[id] != nil || s.done.has(id) }

// appendResult is the fate of one submitted event.
type appendResult int

const (
	resAccepted appendResult = iota
	resDuplicate
	resFull
	resError
)

// append commits the events that are neither duplicates nor over the caps
// in one transaction, durable before it returns. It sets each accepted
// event's Seq.
func (s *spool) append(evs []*Event, maxEvents int, maxBytes int64) ([]appendResult, error) {
	res := make([]appendResult, len(evs))
	var acc []*spooled
	var vals [][]byte
	inBatch := map[string]bool{}
	var dupInBatch []int // duplicates of an event of this batch: they share its fate
	addEvents, addBytes := 0, int64(0)
	for i, ev := range evs {
		if s.contains(ev.ID) {
			res[i] = resDuplicate
			continue
		}
		if inBatch[ev.ID] {
			res[i] = resDuplicate
			dupInBatch = append(dupInBatch, i)
			continue
		}
		size := eventSize(ev.ID, len(ev.Body))
		if s.events()+addEvents+1 > maxEvents || s.bytes+addBytes+size > maxBytes {
			res[i] = resFull
			continue
		}
		ev.Seq = s.nextSeq
		s.nextSeq++
		inBatch[ev.ID] = true
		addEvents++
		addBytes += size
		acc = append(acc, &spooled{seq: ev.Seq, id: ev.ID, survey: ev.Parsed.SurveyID, response: ev.Parsed.ResponseID, receivedAt: ev.ReceivedAt, size: size})
		vals = append(vals, encodeEvent(ev))
	}
	if len(acc) == 0 {
		return res, nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		for i, sp := range acc {
			if err := b.Put(kvstore.Key(sp.seq), vals[i]); err != nil {
				return err
			}
		}
		return b.SetSequence(acc[len(acc)-1].seq)
	})
	if err != nil {
		for i := range res {
			if res[i] == resAccepted {
				res[i] = resError
			}
		}
		// A second delivery of an event of this batch must not hear 200
		// when the first's commit failed: nothing of it is durable.
		for _, i := range dupInBatch {
			res[i] = resError
		}
		return res, fmt.Errorf("webhookrx: spool %s: commit %d events: %w", s.dir, len(acc), err)
	}
	for _, sp := range acc {
		s.add(sp)
	}
	return res, nil
}

// noteAttempts records that the event seq has failed n times and may be
// tried again at next; it is committed with the next done marks.
func (s *spool) noteAttempts(seq uint64, n int, next time.Time) {
	s.pending[seq] = retryState{attempts: n, next: next}
}

// dirty reports whether attempt counts wait to be committed.
func (s *spool) dirty() bool { return len(s.pending) > 0 }

// doneMark says the event with this seq and id is processed.
type doneMark struct {
	seq uint64
	id  string
}

// markDone commits marks (the events leave the spool and join the dedupe
// window) together with the attempt counts noted since the last call, then
// forgets the events. Marks for unknown sequence numbers are ignored.
func (s *spool) markDone(marks []doneMark) error {
	var known []doneMark
	for _, m := range marks {
		if s.bySeq[m.seq] != nil {
			known = append(known, m)
		}
	}
	if len(known) == 0 && len(s.pending) == 0 {
		return nil
	}
	d := s.done
	trim := 0
	if d.max > 0 {
		trim = max(0, d.count+len(known)-d.max)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		evb, rb, db := tx.Bucket(bucketEvents), tx.Bucket(bucketRetries), tx.Bucket(bucketDone)
		for seq, st := range s.pending {
			if s.bySeq[seq] == nil {
				continue
			}
			if err := rb.Put(kvstore.Key(seq), encodeRetry(st)); err != nil {
				return err
			}
		}
		for _, m := range known {
			k := kvstore.Key(m.seq)
			if err := evb.Delete(k); err != nil {
				return err
			}
			if err := rb.Delete(k); err != nil {
				return err
			}
			if d.max <= 0 {
				continue
			}
			n, err := db.NextSequence()
			if err != nil {
				return err
			}
			if err := db.Put(kvstore.Key(n), encodeDone(m)); err != nil {
				return err
			}
		}
		// The window keeps the newest d.max marks, as the memory's ring.
		var old [][]byte
		c := db.Cursor()
		for k, _ := c.First(); k != nil && len(old) < trim; k, _ = c.Next() {
			old = append(old, append([]byte(nil), k...))
		}
		for _, k := range old {
			if err := db.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("webhookrx: spool %s: commit %d done marks: %w", s.dir, len(known), err)
	}
	clear(s.pending)
	for _, m := range known {
		sp := s.bySeq[m.seq]
		delete(s.bySeq, m.seq)
		delete(s.byID, sp.id)
		delete(s.retryAt, m.seq)
		s.bytes -= sp.size
		d.insert(m)
	}
	if d.max > 0 {
		d.count += len(known) - trim
	}
	if len(s.order) > 4096 && s.head > len(s.order)/2 {
		s.order = append(s.order[:0], s.order[s.head:]...)
		s.head = 0
	}
	return nil
}

func (s *spool) close() {
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			s.log.Warn("webhook spool: close", "dir", s.dir, "error", err)
		}
		s.db = nil
	}
	if s.lock != nil {
		_ = s.lock.Close() // releases the flock
		s.lock = nil
	}
}

// doneIndex remembers the last max processed event ids, in memory (and in
// the done bucket): the dedupe window.
type doneIndex struct {
	max   int
	ids   map[string]uint64
	ring  []doneMark
	start int
	count int // entries in the done bucket
}

func newDoneIndex(maxIDs int) *doneIndex {
	return &doneIndex{max: maxIDs, ids: map[string]uint64{}}
}

func (d *doneIndex) has(id string) bool { _, ok := d.ids[id]; return ok }

func (d *doneIndex) insert(m doneMark) {
	if d.max <= 0 {
		return
	}
	if len(d.ring) < d.max {
		d.ring = append(d.ring, m)
	} else {
		old := d.ring[d.start]
		if d.ids[old.id] == old.seq {
			delete(d.ids, old.id)
		}
		d.ring[d.start] = m
		d.start = (d.start + 1) % d.max
	}
	d.ids[m.id] = m.seq
}
