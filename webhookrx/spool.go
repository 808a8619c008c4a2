package webhookrx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/internal/atomicfile"
)

// The spool is a write-ahead log in SpoolDir:
//
//	wal-<first seq, 20 digits>.log   segments of records, appended and fdatasync'ed
//	done.log                         "<seq> <id>" per processed event (the dedupe index)
//	lock                             flock'ed while a receiver runs
//
// A record is [len uint32][crc32c uint32][payload]; the payload is
// [seq uint64][received_at unix ns int64][len(id) uint16][id][body]. A batch
// of records is written with one write and one fdatasync before any of its
// requests is answered (group commit); a new segment file's directory entry
// is fsync'ed too. A torn or corrupt record ends its segment on replay: it
// can only be the tail of a batch that was never acknowledged. A segment is
// deleted once every event in it is done, and a closed one that is three
// quarters done is rewritten with its waiting events only.
const (
	segPrefix  = "wal-"
	segSuffix  = ".log"
	doneName   = "done.log"
	retryName  = "retries.log"
	lockName   = "lock"
	recHdrLen  = 8
	payloadFix = 8 + 8 + 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segment is one WAL file.
type segment struct {
	name    string
	first   uint64
	f       *os.File // open while the segment is the active one
	rf      *os.File // opened to read events back, closed with the segment
	size    int64
	live    int // events in it not yet done
	records int // events written in it (live and done)
}

// spooled is an accepted event not yet done: only its index entry stays in
// memory; the body is read back from its segment when a worker needs it
// (read), so the spool's memory does not grow with the events waiting.
type spooled struct {
	seq        uint64
	id         string
	survey     int64 // for the feeder's gates
	receivedAt time.Time
	seg        *segment
	off        int64 // of the record in seg
	size       int64 // of the record
}

// spool is owned by one goroutine (the receiver's spool loop); it is not
// safe for concurrent use.
type spool struct {
	dir      string
	segBytes int64
	log      *slog.Logger
	lock     *os.File
	dirf     *os.File
	segs     []*segment
	active   *segment
	nextSeq  uint64
	bySeq    map[uint64]*spooled
	byID     map[string]*spooled
	order    []uint64 // seqs in acceptance order; order[head:] may hold done ones
	head     int
	bytes    int64
	done     *doneIndex
	// doneAtLoad counts, by kind, the events found in segments at start
	// that were already done (a crash between done.log and the deletion).
	doneAtLoad map[string]int
	// replayedKinds counts, by kind, the events found waiting at start.
	replayedKinds map[string]int
	// attempts are the failed Process calls of waiting events recorded in
	// retries.log ("<seq> <attempts>" per failed attempt, best effort, not
	// synced): so an event's attempt count and backoff survive a restart.
	attempts map[uint64]int
	retryF   *os.File
}

// openSpool locks dir, loads the done index and the segments, and returns
// the sequence numbers of the events still to process, in spool order
// (read their bodies with read).
func openSpool(dir string, segBytes int64, dedupeIDs int, log *slog.Logger) (*spool, []uint64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("webhookrx: spool dir: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	s := &spool{
		dir: dir, segBytes: segBytes, log: log, lock: lock,
		bySeq: map[uint64]*spooled{}, byID: map[string]*spooled{}, doneAtLoad: map[string]int{}, replayedKinds: map[string]int{},
	}
	fail := func(err error) (*spool, []uint64, error) {
		s.close()
		return nil, nil, err
	}
	if s.dirf, err = os.Open(dir); err != nil {
		return fail(fmt.Errorf("webhookrx: spool dir: %w", err))
	}
	if s.done, err = openDoneIndex(dir, dedupeIDs); err != nil {
		return fail(err)
	}
	names, err := segmentNames(dir)
	if err != nil {
		return fail(err)
	}
	if stale, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f) // a compaction cut short; the original is still there
		}
	}
	maxSeq := s.done.maxSeq
	var evs []uint64
	for _, name := range names {
		seg, loaded, last, err := s.loadSegment(name)
		if err != nil {
			return fail(err)
		}
		maxSeq = max(maxSeq, last)
		if seg.live == 0 {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fail(fmt.Errorf("webhookrx: spool: remove done segment: %w", err))
			}
			continue
		}
		s.segs = append(s.segs, seg)
		evs = append(evs, loaded...)
	}
	s.nextSeq = maxSeq + 1
	if err := s.openRetries(); err != nil {
		return fail(err)
	}
	return s, evs, nil
}

// openRetries loads retries.log, keeps the counts of events still waiting,
// and rewrites it with them.
func (s *spool) openRetries() error {
	s.attempts = map[uint64]int{}
	path := filepath.Join(s.dir, retryName)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("webhookrx: spool: read %s: %w", retryName, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		a, b, ok := strings.Cut(line, " ")
		seq, err1 := strconv.ParseUint(a, 10, 64)
		n, err2 := strconv.Atoi(b)
		if ok && err1 == nil && err2 == nil && n > 0 && s.bySeq[seq] != nil {
			s.attempts[seq] = max(s.attempts[seq], n)
		}
	}
	var b strings.Builder
	for seq, n := range s.attempts {
		fmt.Fprintf(&b, "%d %d\n", seq, n)
	}
	if err := atomicfile.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("webhookrx: spool: rewrite %s: %w", retryName, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("webhookrx: spool: open %s: %w", retryName, err)
	}
	s.retryF = f
	return nil
}

// noteAttempts records that the event seq has failed n times (best
// effort: a lost line only resets a count).
func (s *spool) noteAttempts(seq uint64, n int) {
	if s.retryF == nil {
		return
	}
	if _, err := fmt.Fprintf(s.retryF, "%d %d\n", seq, n); err != nil {
		s.log.Warn("webhook spool: cannot record an attempt count", "error", err)
	}
}

func segmentNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("webhookrx: spool dir: %w", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, segPrefix) && strings.HasSuffix(n, segSuffix) {
			names = append(names, n)
		}
	}
	sort.Strings(names) // zero-padded sequence numbers sort in order
	return names, nil
}

func segmentName(first uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, first, segSuffix) }

// loadSegment reads one segment's valid records, registering the events not
// yet done. It returns their sequence numbers and the highest one seen.
func (s *spool) loadSegment(name string) (*segment, []uint64, uint64, error) {
	path := filepath.Join(s.dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("webhookrx: spool: read %s: %w", name, err)
	}
	first, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 10, 64)
	seg := &segment{name: name, first: first, size: int64(len(data))}
	var evs []uint64
	var last uint64
	off := 0
	for off < len(data) {
		ev, n, err := decodeRecord(data[off:])
		if err != nil {
			s.log.Warn("webhook spool: ignoring the unreadable tail of a segment (a batch never acknowledged, or disk damage)",
				"segment", name, "offset", off, "bytes", len(data)-off, "error", err)
			break
		}
		at := off
		off += n
		seg.records++
		last = max(last, ev.Seq)
		if s.done.has(ev.ID) || s.byID[ev.ID] != nil {
			s.doneAtLoad[ev.Kind()]++
			continue
		}
		sp := &spooled{seq: ev.Seq, id: ev.ID, survey: ev.Parsed.SurveyID, receivedAt: ev.ReceivedAt, seg: seg, off: int64(at), size: int64(n)}
		s.add(sp)
		s.replayedKinds[ev.Kind()]++
		evs = append(evs, ev.Seq)
	}
	return seg, evs, last, nil
}

func (s *spool) add(sp *spooled) {
	s.bySeq[sp.seq] = sp
	s.byID[sp.id] = sp
	s.order = append(s.order, sp.seq)
	s.bytes += sp.size
	sp.seg.live++
}

// read reads a waiting event back from its segment.
func (s *spool) read(seq uint64) (Event, error) {
	sp := s.bySeq[seq]
	if sp == nil {
		return Event{}, fmt.Errorf("webhookrx: spool: event %d is not waiting", seq)
	}
	seg := sp.seg
	if seg.rf == nil {
		f, err := os.Open(filepath.Join(s.dir, seg.name))
		if err != nil {
			return Event{}, fmt.Errorf("webhookrx: spool: open %s: %w", seg.name, err)
		}
		seg.rf = f
	}
	buf := make([]byte, sp.size)
	if _, err := seg.rf.ReadAt(buf, sp.off); err != nil {
		return Event{}, fmt.Errorf("webhookrx: spool: read %s at %d: %w", seg.name, sp.off, err)
	}
	ev, _, err := decodeRecord(buf)
	if err != nil {
		return Event{}, fmt.Errorf("webhookrx: spool: read %s at %d: %w", seg.name, sp.off, err)
	}
	if ev.Seq != seq {
		return Event{}, fmt.Errorf("webhookrx: spool: %s at %d holds event %d, want %d", seg.name, sp.off, ev.Seq, seq)
	}
	return ev, nil
}

func (seg *segment) closeRead() {
	if seg.rf != nil {
		_ = seg.rf.Close()
		seg.rf = nil
	}
}

// events and bytes waiting in the spool.
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

func encodeRecord(buf *bytes.Buffer, ev *Event) int {
	plen := payloadFix + len(ev.ID) + len(ev.Body)
	var hdr [recHdrLen + payloadFix]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(plen))
	binary.BigEndian.PutUint64(hdr[8:], ev.Seq)
	binary.BigEndian.PutUint64(hdr[16:], uint64(ev.ReceivedAt.UnixNano()))
	binary.BigEndian.PutUint16(hdr[24:], uint16(len(ev.ID)))
	start := buf.Len()
	buf.Write(hdr[:])
	buf.WriteString(ev.ID)
	buf.Write(ev.Body)
	rec := buf.Bytes()[start:]
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(rec[recHdrLen:], castagnoli))
	return len(rec)
}

func decodeRecord(b []byte) (Event, int, error) {
	var ev Event
	if len(b) < recHdrLen {
		return ev, 0, errors.New("truncated record header")
	}
	plen := int(binary.BigEndian.Uint32(b))
	if plen < payloadFix || len(b)-recHdrLen < plen {
		return ev, 0, fmt.Errorf("truncated record (length %d)", plen)
	}
	p := b[recHdrLen : recHdrLen+plen]
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return ev, 0, errors.New("checksum mismatch")
	}
	ev.Seq = binary.BigEndian.Uint64(p)
	ev.ReceivedAt = time.Unix(0, int64(binary.BigEndian.Uint64(p[8:]))).UTC()
	idLen := int(binary.BigEndian.Uint16(p[16:]))
	if payloadFix+idLen > plen {
		return ev, 0, errors.New("bad id length")
	}
	ev.ID = string(p[payloadFix : payloadFix+idLen])
	ev.Body = bytes.Clone(p[payloadFix+idLen:])
	// The handler accepted only bodies that parse; should one not, it keeps
	// what parsed (at worst an unknown event with the raw body).
	ev.Parsed, _ = parseEvent(ev.Body)
	ev.Name = ev.Parsed.EventName
	return ev, recHdrLen + plen, nil
}

// appendResult is the fate of one submitted event.
type appendResult int

const (
	resAccepted appendResult = iota
	resDuplicate
	resFull
	resError
)

// append writes the events that are neither duplicates nor over the caps as
// one batch, synced before it returns. It sets each accepted event's Seq.
func (s *spool) append(evs []*Event, maxEvents int, maxBytes int64) ([]appendResult, error) {
	res := make([]appendResult, len(evs))
	var buf bytes.Buffer
	var acc []*spooled
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
		size := int64(recHdrLen + payloadFix + len(ev.ID) + len(ev.Body))
		if s.events()+addEvents+1 > maxEvents || s.bytes+addBytes+size > maxBytes {
			res[i] = resFull
			continue
		}
		ev.Seq = s.nextSeq
		s.nextSeq++
		rel := int64(buf.Len())
		encodeRecord(&buf, ev)
		inBatch[ev.ID] = true
		addEvents++
		addBytes += size
		acc = append(acc, &spooled{seq: ev.Seq, id: ev.ID, survey: ev.Parsed.SurveyID, receivedAt: ev.ReceivedAt, off: rel, size: size})
	}
	if len(acc) == 0 {
		return res, nil
	}
	seg, base, err := s.write(acc[0].seq, buf.Bytes())
	if err != nil {
		for i := range res {
			if res[i] == resAccepted {
				res[i] = resError
			}
		}
		// A second delivery of an event of this batch must not hear 200
		// when the first's write failed: nothing of it reached the disk.
		for _, i := range dupInBatch {
			res[i] = resError
		}
		return res, err
	}
	for _, sp := range acc {
		sp.seg = seg
		sp.off += base
		s.add(sp)
	}
	seg.records += len(acc)
	return res, nil
}

// write appends data to the active segment (starting a new one named first
// when needed) and syncs it. It returns the segment and data's offset in it.
func (s *spool) write(first uint64, data []byte) (*segment, int64, error) {
	if s.active != nil && s.active.size >= s.segBytes {
		s.seal()
	}
	created := false
	if s.active == nil {
		name := segmentName(first)
		f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, 0, fmt.Errorf("webhookrx: spool: create segment: %w", err)
		}
		s.active = &segment{name: name, first: first, f: f}
		s.segs = append(s.segs, s.active)
		created = true
	}
	seg := s.active
	_, err := seg.f.Write(data)
	if err == nil {
		err = datasync(seg.f)
	}
	if err == nil && created {
		err = s.dirf.Sync()
	}
	if err != nil {
		// The tail may be torn: never append after it. Replay ignores it.
		_ = seg.f.Truncate(seg.size)
		s.seal()
		return nil, 0, fmt.Errorf("webhookrx: spool: write segment %s: %w", seg.name, err)
	}
	base := seg.size
	seg.size += int64(len(data))
	return seg, base, nil
}

// seal closes the active segment; it is removed now if nothing in it waits.
func (s *spool) seal() {
	seg := s.active
	if seg == nil {
		return
	}
	s.active = nil
	_ = seg.f.Close()
	seg.f = nil
	if seg.live == 0 {
		s.removeSegment(seg)
	}
}

func (s *spool) removeSegment(seg *segment) {
	if seg.f != nil {
		_ = seg.f.Close()
		seg.f = nil
	}
	seg.closeRead()
	if s.active == seg {
		s.active = nil
	}
	if err := os.Remove(filepath.Join(s.dir, seg.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("webhook spool: cannot remove a finished segment; it is replayed and skipped at the next start", "segment", seg.name, "error", err)
	}
	for i, x := range s.segs {
		if x == seg {
			s.segs = append(s.segs[:i], s.segs[i+1:]...)
			break
		}
	}
}

// compactSegment rewrites a closed segment that holds mostly done events
// with only its waiting ones, named by the first of them (still below the
// next segment's first sequence). So a long-failing event does not keep
// thousands of done records on disk, whose ids the dedupe window may forget
// before the segment goes. Crash safety: the new file is synced and renamed
// into place before the old one is removed; if both survive a crash, the
// replay sees each waiting event twice and keeps the first.
func (s *spool) compactSegment(seg *segment) error {
	var live []*spooled
	for _, sp := range s.bySeq {
		if sp.seg == seg {
			live = append(live, sp)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].seq < live[j].seq })
	data, err := os.ReadFile(filepath.Join(s.dir, seg.name))
	if err != nil {
		return err
	}
	// The records are copied as they are (each carries its own checksum).
	var buf bytes.Buffer
	offs := make([]int64, len(live))
	for i, sp := range live {
		if sp.off+sp.size > int64(len(data)) {
			return fmt.Errorf("segment %s: event %d beyond its end", seg.name, sp.seq)
		}
		offs[i] = int64(buf.Len())
		buf.Write(data[sp.off : sp.off+sp.size])
	}
	name := segmentName(live[0].seq)
	if err := atomicfile.WriteFile(filepath.Join(s.dir, name), buf.Bytes(), 0o600); err != nil {
		return err
	}
	if name != seg.name {
		if err := os.Remove(filepath.Join(s.dir, seg.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	seg.closeRead()
	for i, sp := range live {
		sp.off = offs[i]
	}
	seg.name, seg.first, seg.size, seg.records = name, live[0].seq, int64(buf.Len()), len(live)
	return nil
}

// doneMark says the event with this seq and id is processed.
type doneMark struct {
	seq uint64
	id  string
}

// markDone records marks durably in done.log, then forgets the events and
// removes the segments left without waiting events. Marks for unknown
// sequence numbers are ignored.
func (s *spool) markDone(marks []doneMark) error {
	var known []doneMark
	for _, m := range marks {
		if s.bySeq[m.seq] != nil {
			known = append(known, m)
		}
	}
	if len(known) == 0 {
		return nil
	}
	if err := s.done.add(known); err != nil {
		return err
	}
	for _, m := range known {
		sp := s.bySeq[m.seq]
		delete(s.bySeq, m.seq)
		delete(s.byID, sp.id)
		s.bytes -= sp.size
		sp.seg.live--
		if sp.seg.live == 0 {
			s.removeSegment(sp.seg)
		}
	}
	for _, seg := range append([]*segment(nil), s.segs...) {
		if seg != s.active && seg.live > 0 && seg.records >= 16 && seg.live*4 <= seg.records {
			if err := s.compactSegment(seg); err != nil {
				s.log.Warn("webhook spool: cannot compact a segment; it stays as it is", "segment", seg.name, "error", err)
			}
		}
	}
	if len(s.order) > 4096 && s.head > len(s.order)/2 {
		s.order = append(s.order[:0], s.order[s.head:]...)
		s.head = 0
	}
	return s.done.maybeCompact()
}

func (s *spool) close() {
	if s.active != nil && s.active.f != nil {
		_ = s.active.f.Close()
		s.active.f = nil
	}
	for _, seg := range s.segs {
		seg.closeRead()
	}
	if s.retryF != nil {
		_ = s.retryF.Close()
		s.retryF = nil
	}
	if s.done != nil {
		s.done.close()
	}
	if s.dirf != nil {
		_ = s.dirf.Close()
	}
	if s.lock != nil {
		_ = s.lock.Close() // releases the flock
	}
}

// doneIndex remembers the last max processed event ids, in memory and in
// done.log. It is the dedupe window and carries the highest sequence number
// across restarts when the spool is empty.
type doneIndex struct {
	path   string
	f      *os.File
	max    int
	ids    map[string]uint64
	ring   []doneMark
	start  int
	lines  int
	maxSeq uint64
}

func openDoneIndex(dir string, maxIDs int) (*doneIndex, error) {
	d := &doneIndex{path: filepath.Join(dir, doneName), max: maxIDs, ids: map[string]uint64{}}
	data, err := os.ReadFile(d.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("webhookrx: spool: read %s: %w", doneName, err)
	default:
		lines := strings.Split(string(data), "\n")
		// The last element follows the last newline: empty, or a torn line.
		for _, line := range lines[:len(lines)-1] {
			seqStr, id, ok := strings.Cut(line, " ")
			seq, perr := strconv.ParseUint(seqStr, 10, 64)
			if !ok || perr != nil || !validID(id) {
				continue
			}
			d.insert(doneMark{seq: seq, id: id})
		}
	}
	// Rewrite at every start: drops a torn tail and old entries.
	if err := d.compact(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *doneIndex) has(id string) bool { _, ok := d.ids[id]; return ok }

func (d *doneIndex) insert(m doneMark) {
	d.maxSeq = max(d.maxSeq, m.seq)
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

func (d *doneIndex) add(marks []doneMark) error {
	var b strings.Builder
	for _, m := range marks {
		b.WriteString(strconv.FormatUint(m.seq, 10))
		b.WriteByte(' ')
		b.WriteString(m.id)
		b.WriteByte('\n')
	}
	if _, err := io.WriteString(d.f, b.String()); err != nil {
		return fmt.Errorf("webhookrx: spool: write %s: %w", doneName, err)
	}
	if err := datasync(d.f); err != nil {
		return fmt.Errorf("webhookrx: spool: sync %s: %w", doneName, err)
	}
	for _, m := range marks {
		d.insert(m)
	}
	d.lines += len(marks)
	return nil
}

func (d *doneIndex) maybeCompact() error {
	if d.lines <= 2*d.max+1024 {
		return nil
	}
	return d.compact()
}

// compact rewrites done.log with the remembered entries (at least the
// newest, so the highest sequence survives) and reopens it for appending.
func (d *doneIndex) compact() error {
	var b strings.Builder
	n := 0
	write := func(m doneMark) {
		b.WriteString(strconv.FormatUint(m.seq, 10))
		b.WriteByte(' ')
		b.WriteString(m.id)
		b.WriteByte('\n')
		n++
	}
	for i := range d.ring {
		write(d.ring[(d.start+i)%len(d.ring)])
	}
	if err := atomicfile.WriteFile(d.path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("webhookrx: spool: rewrite %s: %w", doneName, err)
	}
	if d.f != nil {
		d.f.Close()
	}
	f, err := os.OpenFile(d.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("webhookrx: spool: open %s: %w", doneName, err)
	}
	d.f, d.lines = f, n
	return nil
}

func (d *doneIndex) close() {
	if d.f != nil {
		_ = d.f.Close()
		d.f = nil
	}
}
