package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/kvstore"
	"github.com/surveysync/surveysync/record"
)

// FileLedger is the feed ledger (record.FeedLedger) for runs without
// ClickHouse: a bbolt database, <dir>/ledger.db (internal/kvstore), with a
// bucket per feed under "contacts" and under "sends", whose keys are the
// recording order and values the entries as JSON. Every Record* call is one
// transaction, durable when it returns. Ledgers of the former format
// (<dir>/<feed>.contacts.jsonl and .sends.jsonl) are imported when the
// ledger opens, then removed (importJSONL).
type FileLedger struct {
	dir string
	db  *bolt.DB
}

const ledgerDBName = "ledger.db"

var (
	bucketContacts = []byte("contacts")
	bucketSends    = []byte("sends")
	// bucketImported holds, per former file imported, the SHA-256 of its
	// content (importJSONL).
	bucketImported = []byte("imported")
)

// The former files' names.
const (
	contactsSuffix = ".contacts.jsonl"
	sendsSuffix    = ".sends.jsonl"
)

// NewFileLedger opens (creating) the ledger in dir. One process at a time
// may hold it (a second one waits kvstore.LockTimeout, then fails).
func NewFileLedger(dir string) (*FileLedger, error) {
	db, err := kvstore.Open(filepath.Join(dir, ledgerDBName), "feed ledger")
	if errors.Is(err, kvstore.ErrDamaged) {
		return nil, ledgerDamaged(filepath.Join(dir, ledgerDBName), err)
	}
	if err != nil {
		return nil, err
	}
	l := &FileLedger{dir: dir, db: db}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketContacts, bucketSends, bucketImported} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = l.importFormer()
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("feed ledger %s: %w", dir, err)
	}
	return l, nil
}

// ledgerDamaged is the refusal to use a damaged ledger: it is the only
// record of which contacts were pushed, so it is not replaced on its own.
func ledgerDamaged(path string, err error) error {
	return fmt.Errorf("%w. The feed ledger is the record of which contacts the feeds pushed and which pushes are uncertain: "+
		"without it, rows read again would be pushed again, so the feeds do not run. Restore it from a backup; or stop surveysync, "+
		"move it aside (mv %s %s.damaged) and start again with an empty ledger: rows of a feed file read again (one left in "+
		"processing/, or the same keys in a later file) are then pushed again, and the uncertain rows are forgotten (check in the "+
		"service that they exist) (docs/operations.md, \"Damaged local state\")", err, path, path)
}

// importFormer imports the former JSONL files of every feed.
func (l *FileLedger) importFormer() error {
	for _, kind := range []struct {
		suffix string
		bucket []byte
	}{{contactsSuffix, bucketContacts}, {sendsSuffix, bucketSends}} {
		paths, err := filepath.Glob(filepath.Join(l.dir, "*"+kind.suffix))
		if err != nil {
			return err
		}
		for _, path := range paths {
			feed := strings.TrimSuffix(filepath.Base(path), kind.suffix)
			err := importJSONL(l.db, path, func(tx *bolt.Tx, line []byte) error {
				if !json.Valid(line) {
					return nil // a line torn by a crash
				}
				b, err := tx.Bucket(kind.bucket).CreateBucketIfNotExists([]byte(feed))
				if err != nil {
					return err
				}
				return putNext(b, line)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes the database.
func (l *FileLedger) Close() error {
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("feed ledger %s: %w", l.dir, err)
	}
	return nil
}

// putNext appends v to b under the next key of b's sequence.
func putNext(b *bolt.Bucket, v []byte) error {
	n, err := b.NextSequence()
	if err != nil {
		return err
	}
	return b.Put(kvstore.Key(n), v)
}

// record appends the lines, by feed, in one transaction.
func (l *FileLedger) record(bucket []byte, byFeed map[string][][]byte) error {
	err := l.db.Update(func(tx *bolt.Tx) error {
		for feed, lines := range byFeed {
			b, err := tx.Bucket(bucket).CreateBucketIfNotExists([]byte(feed))
			if err != nil {
				return err
			}
			for _, line := range lines {
				if err := putNext(b, line); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("feed ledger %s: record %s: %w", l.dir, bucket, err)
	}
	return nil
}

// RecordContacts records entries durably.
func (l *FileLedger) RecordContacts(ctx context.Context, entries []record.ContactEntry) error {
	if len(entries) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	byFeed := map[string][][]byte{}
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("feed ledger %s: feed %s key %s: %w", l.dir, e.Feed, e.Key, err)
		}
		byFeed[e.Feed] = append(byFeed[e.Feed], line)
	}
	return l.record(bucketContacts, byFeed)
}

// RecordSend records e durably.
func (l *FileLedger) RecordSend(ctx context.Context, e record.SendEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("feed ledger %s: send of feed %s: %w", l.dir, e.Feed, err)
	}
	return l.record(bucketSends, map[string][][]byte{e.Feed: {line}})
}

// LoadContacts calls fn for every recorded entry of feed, in recording order.
func (l *FileLedger) LoadContacts(ctx context.Context, feed string, fn func(record.ContactEntry) error) error {
	return l.load(ctx, bucketContacts, feed, func(b []byte) error {
		var e record.ContactEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		return fn(e)
	})
}

// LoadSends calls fn for every recorded send of feed, in recording order.
func (l *FileLedger) LoadSends(ctx context.Context, feed string, fn func(record.SendEntry) error) error {
	return l.load(ctx, bucketSends, feed, func(b []byte) error {
		var e record.SendEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		return fn(e)
	})
}

// loadChunk is how many entries load reads per read transaction: fn runs
// outside of it, so it may record (a write transaction that grows the file
// waits for the read transactions to end).
const loadChunk = 4096

func (l *FileLedger) load(ctx context.Context, bucket []byte, feed string, fn func([]byte) error) error {
	var after []byte // the last key read
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var keys, vals [][]byte
		err := l.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucket).Bucket([]byte(feed))
			if b == nil {
				return nil
			}
			c := b.Cursor()
			k, v := c.First()
			if after != nil {
				if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			for ; k != nil && len(keys) < loadChunk; k, v = c.Next() {
				keys = append(keys, bytes.Clone(k))
				vals = append(vals, bytes.Clone(v))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("feed ledger %s: read %s of feed %s: %w", l.dir, bucket, feed, err)
		}
		for i, v := range vals {
			if err := fn(v); err != nil {
				err = fmt.Errorf("feed ledger %s: %s of feed %s, entry %d: %w", l.dir, bucket, feed, kvstore.Uint(keys[i]), err)
				if !json.Valid(v) { // noise inside a value, which bbolt does not checksum
					err = ledgerDamaged(filepath.Join(l.dir, ledgerDBName), err)
				}
				return err
			}
		}
		if len(keys) < loadChunk {
			return nil
		}
		after = keys[len(keys)-1]
	}
}

// RewriteContacts passes every contact entry of every feed to fn, which
// changes it in place and says whether it changed it or whether the entry
// is to be removed; the changed entries are written back in one
// transaction, and the file is compacted so that no free page keeps their
// former bytes. It returns the entries changed or removed. The caller
// holds the ledger alone (a daemon's feeds do not record meanwhile).
func (l *FileLedger) RewriteContacts(ctx context.Context, fn func(e *record.ContactEntry) (changed, remove bool)) (int64, error) {
	var n int64
	err := l.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketContacts)
		return root.ForEachBucket(func(feed []byte) error {
			b := root.Bucket(feed)
			var puts, dels [][]byte
			var vals [][]byte
			err := b.ForEach(func(k, v []byte) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				var e record.ContactEntry
				if json.Unmarshal(v, &e) != nil {
					return nil // not an entry of ours: left alone
				}
				changed, remove := fn(&e)
				switch {
				case remove:
					dels = append(dels, bytes.Clone(k))
				case changed:
					nv, err := json.Marshal(e)
					if err != nil {
						return err
					}
					puts, vals = append(puts, bytes.Clone(k)), append(vals, nv)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range dels {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			for i, k := range puts {
				if err := b.Put(k, vals[i]); err != nil {
					return err
				}
			}
			n += int64(len(dels) + len(puts))
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("feed ledger %s: rewrite contacts: %w", l.dir, err)
	}
	if n == 0 && !kvstore.HasFreePages(l.db) {
		return 0, nil // (free pages: a run killed before it compacted)
	}
	db, err := kvstore.Compact(l.db, filepath.Join(l.dir, ledgerDBName), "feed ledger")
	if db != nil {
		l.db = db
	}
	return n, err
}
