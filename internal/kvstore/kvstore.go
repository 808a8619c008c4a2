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
		return nil, fmt.Errorf("%s %s is in use by another process (a running surveysync?); each process needs its own", what, path)
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
