package webhookrx

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/internal/kvstore"
	"github.com/surveysync/surveysync/survey"
)

// Personal data in the spool (issue 32, docs/privacy.md, "The webhook
// spool"):
//
//   - Options.Redact rewrites a body before it is spooled (the privacy
//     field rules: a contact id hashed or dropped never reaches the file).
//     At start, bodies spooled under other rules (RedactRules differs from
//     the one recorded) are rewritten.
//   - Options.Erased: a webhook about an erased response is acknowledged
//     and not spooled; the waiting events of a response erased later are
//     deleted (purge, at start and on Receiver.Scrub).
//   - bbolt keeps the bytes of deleted values in its free pages until it
//     reuses them: the file is rewritten without them (compact) at start,
//     and after a purge or the done mark of an erased response's event,
//     at most once per scrubInterval.

// redactBodies rewrites the waiting events' bodies with redact, unless the
// spool records that they were rewritten under rules already. It returns
// how many changed.
func (s *spool) redactBodies(redact func([]byte) []byte, rules string, force bool) (int, error) {
	var recorded []byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		recorded = bytes.Clone(tx.Bucket(bucketMeta).Get(keyRedacted))
		return nil
	}); err != nil {
		return 0, err
	}
	if !force && recorded != nil && string(recorded) == rules {
		return 0, nil
	}
	changed := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		type put struct {
			k, v []byte
			size int64
		}
		var puts []put
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			seq := kvstore.Uint(k)
			ev, err := decodeEvent(seq, v, true)
			if err != nil {
				continue // kept as it is: load reported it
			}
			body := redact(ev.Body)
			if bytes.Equal(body, ev.Body) {
				continue
			}
			ev.Body = body
			puts = append(puts, put{k: bytes.Clone(k), v: encodeEvent(&ev), size: eventSize(ev.ID, len(body))})
		}
		for _, p := range puts {
			if err := b.Put(p.k, p.v); err != nil {
				return err
			}
		}
		changed = len(puts)
		if err := tx.Bucket(bucketMeta).Put(keyRedacted, []byte(rules)); err != nil {
			return err
		}
		for _, p := range puts {
			if sp := s.bySeq[kvstore.Uint(p.k)]; sp != nil {
				s.bytes += p.size - sp.size
				sp.size = p.size
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("webhookrx: spool %s: apply the privacy rules to the waiting events: %w", s.dir, err)
	}
	return changed, nil
}

// RewriteSpool is the spool's part of surveysync privacy apply: it applies
// rewrite to the body of every event waiting in the spool at dir, records
// rules as those the bodies are now under (Options.RedactRules: the next
// start does not rewrite them again), and rewrites the file without its
// free pages. It takes the spool's lock: the receiver must not run. A
// directory without a spool is left alone. It returns how many bodies
// changed.
func RewriteSpool(dir string, rewrite func([]byte) []byte, rules string, log *slog.Logger) (int, error) {
	if _, err := os.Stat(filepath.Join(dir, dbName)); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sp, _, err := openSpool(dir, defaultDedupeIDs, log)
	if err != nil {
		return 0, err
	}
	defer sp.close()
	n, err := sp.redactBodies(rewrite, rules, true)
	if err != nil {
		return n, err
	}
	if _, err := sp.compactNow(); err != nil {
		return n, err
	}
	return n, nil
}

// purge deletes the waiting events whose response erased reports erased.
// An event handed out meanwhile is processed (the pipeline skips an
// erased response) and its done mark ignored.
func (s *spool) purge(erased func(int64, survey.GUID) bool) (int, error) {
	var gone []*spooled
	for _, sp := range s.bySeq {
		if sp.response != "" && erased(sp.survey, sp.response) {
			gone = append(gone, sp)
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, sp := range gone {
			k := kvstore.Key(sp.seq)
			if err := tx.Bucket(bucketEvents).Delete(k); err != nil {
				return err
			}
			if err := tx.Bucket(bucketRetries).Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("webhookrx: spool %s: delete the events of erased responses: %w", s.dir, err)
	}
	for _, sp := range gone {
		delete(s.bySeq, sp.seq)
		delete(s.byID, sp.id)
		delete(s.retryAt, sp.seq)
		delete(s.attempts, sp.seq)
		delete(s.pending, sp.seq)
		s.bytes -= sp.size
	}
	return len(gone), nil
}

// compactNow rewrites the database without its free pages (where bbolt
// keeps the bytes of what was deleted) when it has any. It reports
// whether it did. The copy is written and synced beside the file, then
// renamed over it and used in its place; the database in use is closed
// only then, so a failure at any step leaves the spool working on one
// whole file (and a crash, one or the other on disk).
func (s *spool) compactNow() (bool, error) {
	if !kvstore.HasFreePages(s.db) {
		return false, nil
	}
	path := filepath.Join(s.dir, dbName)
	tmp := path + ".compact"
	_ = os.Remove(tmp)
	dst, err := kvstore.Open(tmp, "webhookrx: spool copy")
	if err != nil {
		return false, err
	}
	fail := func(err error) (bool, error) {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return false, fmt.Errorf("webhookrx: spool %s: rewrite without free pages: %w", s.dir, err)
	}
	if err := bolt.Compact(dst, s.db, 32<<20); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		s.log.Warn("webhook spool: sync the folder after rewriting the file", "dir", s.dir, "error", err)
	}
	old := s.db
	s.db = dst
	if err := old.Close(); err != nil {
		s.log.Warn("webhook spool: close the file replaced by its rewrite", "dir", s.dir, "error", err)
	}
	return true, nil
}
