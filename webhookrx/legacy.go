package webhookrx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/internal/kvstore"
)

// The spool's former format (until issue 18), read once to import it:
//
//	wal-<first seq, 20 digits>.log   records [len uint32][crc32c uint32][payload],
//	                                 payload [seq uint64][received_at unix ns int64][len(id) uint16][id][body]
//	done.log                         "<seq> <id>" per processed event
//	retries.log                      "<seq> <attempts>" per failed Process call
//	*.tmp                            a compaction cut short
const (
	legacySegPrefix  = "wal-"
	legacySegSuffix  = ".log"
	legacyDoneName   = "done.log"
	legacyRetryName  = "retries.log"
	legacyRecHdrLen  = 8
	legacyPayloadFix = 8 + 8 + 2
	// legacyImportBatch bounds the events of one import transaction.
	legacyImportBatch = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// importLegacy moves a spool of the former format in s.dir into the
// database: its waiting events (with their sequence numbers), the last
// dedupeIDs done marks and the retry counts, then removes the old files.
// The events go in transactions of legacyImportBatch, the rest and a
// marker in a last one, so a crash part-way imports again from the start
// (an event's key is its sequence number: putting it twice is harmless),
// and a crash after the marker only removes the files.
func (s *spool) importLegacy(dedupeIDs int) error {
	segs, err := filepath.Glob(filepath.Join(s.dir, legacySegPrefix+"*"+legacySegSuffix))
	if err != nil {
		return fmt.Errorf("webhookrx: spool %s: %w", s.dir, err)
	}
	sort.Strings(segs) // zero-padded sequence numbers sort in order
	tmps, _ := filepath.Glob(filepath.Join(s.dir, "*.tmp"))
	files := append(segs, tmps...)
	for _, name := range []string{legacyDoneName, legacyRetryName} {
		if _, err := os.Stat(filepath.Join(s.dir, name)); err == nil {
			files = append(files, filepath.Join(s.dir, name))
		}
	}
	if len(files) == 0 {
		return nil
	}
	var imported bool
	if err := s.db.View(func(tx *bolt.Tx) error {
		imported = tx.Bucket(bucketMeta).Get(keyImported) != nil
		return nil
	}); err != nil {
		return fmt.Errorf("webhookrx: spool %s: %w", s.dir, err)
	}
	if !imported {
		if err := s.importLegacyFiles(segs, dedupeIDs); err != nil {
			return fmt.Errorf("webhookrx: spool %s: import the former log files: %w", s.dir, err)
		}
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("webhookrx: spool: remove imported %s: %w", f, err)
		}
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("webhookrx: spool %s: %w", s.dir, err)
	}
	return nil
}

func (s *spool) importLegacyFiles(segs []string, dedupeIDs int) error {
	doneIDs := map[string]bool{}
	var window []doneMark // the last dedupeIDs marks, in file order
	maxSeq := uint64(0)
	data, err := os.ReadFile(filepath.Join(s.dir, legacyDoneName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lines := strings.Split(string(data), "\n")
	for _, line := range lines[:len(lines)-1] { // the last one is empty or torn
		seqStr, id, ok := strings.Cut(line, " ")
		seq, perr := strconv.ParseUint(seqStr, 10, 64)
		if !ok || perr != nil || !validID(id) {
			continue
		}
		doneIDs[id] = true
		maxSeq = max(maxSeq, seq)
		window = append(window, doneMark{seq: seq, id: id})
	}
	window = window[max(0, len(window)-max(dedupeIDs, 0)):]

	attempts := map[uint64]int{}
	if data, err := os.ReadFile(filepath.Join(s.dir, legacyRetryName)); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			a, b, ok := strings.Cut(line, " ")
			seq, err1 := strconv.ParseUint(a, 10, 64)
			n, err2 := strconv.Atoi(b)
			if ok && err1 == nil && err2 == nil && n > 0 {
				attempts[seq] = max(attempts[seq], n)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}

	seen := map[string]bool{}
	var batch []*Event
	events := 0
	put := func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		for _, ev := range batch {
			if err := b.Put(kvstore.Key(ev.Seq), encodeEvent(ev)); err != nil {
				return err
			}
			if n := attempts[ev.Seq]; n > 0 {
				if err := tx.Bucket(bucketRetries).Put(kvstore.Key(ev.Seq), encodeRetry(retryState{attempts: n})); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, path := range segs {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for off := 0; off < len(data); {
			ev, n, err := decodeLegacyRecord(data[off:])
			if err != nil {
				s.log.Warn("webhook spool: ignoring the unreadable tail of a former segment (a batch never acknowledged, or disk damage)",
					"segment", filepath.Base(path), "offset", off, "bytes", len(data)-off, "error", err)
				break
			}
			off += n
			maxSeq = max(maxSeq, ev.Seq)
			if doneIDs[ev.ID] || seen[ev.ID] {
				s.doneAtLoad[ev.Kind()]++
				continue
			}
			seen[ev.ID] = true
			batch = append(batch, &ev)
			if len(batch) == legacyImportBatch {
				if err := s.db.Update(put); err != nil {
					return err
				}
				events += len(batch)
				batch = batch[:0]
			}
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx); err != nil {
			return err
		}
		db := tx.Bucket(bucketDone)
		for _, m := range window {
			n, err := db.NextSequence()
			if err != nil {
				return err
			}
			if err := db.Put(kvstore.Key(n), encodeDone(m)); err != nil {
				return err
			}
		}
		b := tx.Bucket(bucketEvents)
		if err := b.SetSequence(max(b.Sequence(), maxSeq)); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyImported, binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())))
	})
	if err != nil {
		return err
	}
	events += len(batch)
	s.log.Info("webhook spool: imported the former log files into "+dbName,
		"dir", s.dir, "waiting", events, "done_marks", len(window), "already_done", len(doneIDs))
	return nil
}

// decodeLegacyRecord decodes one record of a former segment.
func decodeLegacyRecord(b []byte) (Event, int, error) {
	var ev Event
	if len(b) < legacyRecHdrLen {
		return ev, 0, errors.New("truncated record header")
	}
	plen := int(binary.BigEndian.Uint32(b))
	if plen < legacyPayloadFix || len(b)-legacyRecHdrLen < plen {
		return ev, 0, fmt.Errorf("truncated record (length %d)", plen)
	}
	p := b[legacyRecHdrLen : legacyRecHdrLen+plen]
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return ev, 0, errors.New("checksum mismatch")
	}
	ev.Seq = binary.BigEndian.Uint64(p)
	ev.ReceivedAt = time.Unix(0, int64(binary.BigEndian.Uint64(p[8:]))).UTC()
	idLen := int(binary.BigEndian.Uint16(p[16:]))
	if legacyPayloadFix+idLen > plen {
		return ev, 0, errors.New("bad id length")
	}
	ev.ID = string(p[legacyPayloadFix : legacyPayloadFix+idLen])
	ev.Body = append([]byte(nil), p[legacyPayloadFix+idLen:]...)
	ev.Parsed, _ = parseEvent(ev.Body)
	ev.Name = ev.Parsed.EventName
	return ev, legacyRecHdrLen + plen, nil
}
