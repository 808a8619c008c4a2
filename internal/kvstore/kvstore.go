// Package kvstore opens the embedded databases that hold surveysync's
// durable queues and ledgers: the webhook spool (webhookrx) and, without
// ClickHouse, the feed ledger and the uploaded-files index (sink/parquet).
//
// They are go.etcd.io/bbolt files (the B+tree store under etcd): a write
// transaction is durable when Commit returns (its pages, then its meta
// page, each fdatasync'ed), a crash at any point leaves the last committed
// transaction (copy-on-write pages, two checksummed meta pages), and one
// process holds a file at a time (flock). That replaces the hand-written
// logs with torn-tail repair, checksums and compaction these parts had;
// docs/architecture.md, "Durable queues and ledgers", says why bbolt.
package kvstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrInUse is Open's error when another process holds the file.
var ErrInUse = errors.New("is in use by another process")

// LockTimeout is how long Open waits for another process to release the
// file before it gives up.
const LockTimeout = 2 * time.Second

// Open opens (creating it and its folder) the database at path. what names
// the store in errors ("webhook spool", "feed ledger").
func Open(path, what string) (*bolt.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: LockTimeout,
		// The free-page list is rebuilt by a scan at open instead of being
		// written with every commit: one page less per commit.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%s %s %w (a running surveysync?); each process needs its own", what, path, ErrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return db, nil
}

// Key is the big-endian form of n: keys sort in numeric order.
func Key(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Uint is the inverse of Key (0 for a key of another length).
func Uint(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// HasFreePages reports whether db has free pages, which may keep the
// bytes of deleted entries until Compact.
func HasFreePages(db *bolt.DB) bool {
	st := db.Stats()
	return st.FreePageN+st.PendingPageN > 0
}

// Compact rewrites the database at path without its free pages, whose
// bytes keep what was deleted (an erasure, a dropped value) until bbolt
// reuses them: a copy is written, synced and renamed over the original,
// so a crash leaves one or the other whole. db is closed; the database
// opened again is returned.
func Compact(db *bolt.DB, path, what string) (*bolt.DB, error) {
	tmp := path + ".compact"
	_ = os.Remove(tmp)
	dst, err := Open(tmp, what+" copy")
	if err != nil {
		return db, err
	}
	err = bolt.Compact(dst, db, 32<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return db, fmt.Errorf("%s %s: compact: %w", what, path, err)
	}
	if err := db.Close(); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("%s %s: compact: %w", what, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("%s %s: compact: %w", what, path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return Open(path, what)
}
