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
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrInUse is Open's error when another process holds the file.
var ErrInUse = errors.New("is in use by another process")

// LockTimeout is how long Open waits for another process to release the
// file before it gives up.
const LockTimeout = 2 * time.Second

// ErrDamaged is what a DamagedError matches with errors.Is.
var ErrDamaged = errors.New("is damaged")

// DamagedError is Open's error for a file that is not a readable database:
// zero-filled or cut short (a full disk, a copy cut short), noise over some
// pages (a disk fault, a hand edit). Whoever owns the store decides what
// losing it costs: set it aside (SetAside) and start empty, or refuse and
// tell the operator.
type DamagedError struct {
	What string // the store, as Open was told ("feed ledger")
	Path string
	Err  error // what the check found
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%s %s is damaged (%v)", e.What, e.Path, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// Open opens (creating it and its folder) the database at path. what names
// the store in errors ("webhook spool", "feed ledger").
//
// An existing file is checked first (Check): a damaged one is a
// *DamagedError, never a panic. bbolt trusts its pages: a page that does
// not say what it is panics when it is read, and the scan of free pages
// that a writable open runs panics on some damage in a goroutine of its
// own, where nothing can recover it; so the file is read whole, read-only,
// before it is opened for writing.
func Open(path, what string) (*bolt.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		if err := Check(path, what); err != nil {
			return nil, err
		}
	}
	return openRW(path, what)
}

var options = bolt.Options{
	Timeout: LockTimeout,
	// The free-page list is rebuilt by a scan at open instead of being
	// written with every commit: one page less per commit.
	NoFreelistSync: true,
	FreelistType:   bolt.FreelistMapType,
}

func openRW(path, what string) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, &DamagedError{What: what, Path: path, Err: fmt.Errorf("%v", p)}
		}
	}()
	o := options
	db, err = bolt.Open(path, 0o600, &o)
	return db, openError(path, what, err)
}

// openError names a failed bolt.Open: nil, in use, damaged or other.
func openError(path, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%s %s %w (a running surveysync?); each process needs its own", what, path, ErrInUse)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch),
		strings.Contains(err.Error(), "file size too small"):
		return &DamagedError{What: what, Path: path, Err: err}
	}
	return fmt.Errorf("%s %s: %w", what, path, err)
}

// Check reads the whole database at path, read-only: its meta pages, every
// bucket's pages, keys (in order) and values, and that the file holds every
// page the meta page counts. A damaged file is a *DamagedError; the
// panics and memory faults bbolt raises on damaged pages are recovered
// here, in the caller's goroutine. A file in use by another process is
// ErrInUse.
func Check(path, what string) (err error) {
	damaged := func(e error) error { return &DamagedError{What: what, Path: path, Err: e} }
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = damaged(fmt.Errorf("%v", p))
		}
	}()
	o := options
	o.ReadOnly = true
	db, err := bolt.Open(path, 0o600, &o)
	if err != nil {
		return openError(path, what, err)
	}
	defer db.Close()
	// Scan too, under the read-only open's shared lock (no writer): plain
	// reads, and it finds what bbolt's free-page scan would panic on in a
	// goroutine of its own (a page referenced twice, keys out of their
	// parent's range).
	res, err := Scan(path, false)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	if res.Damaged() {
		return damaged(errors.New(res.Summary()))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fi.Size() {
			return damaged(fmt.Errorf("cut short: %d bytes of the %d its pages need", fi.Size(), tx.Size()))
		}
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error { return checkBucket(b, string(name)) })
		if err != nil {
			return damaged(err)
		}
		return nil
	})
}

// checkBucket reads every key and value of b and of its nested buckets,
// and checks that the keys are in order.
func checkBucket(b *bolt.Bucket, name string) error {
	var prev []byte
	var sum uint32
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("bucket %q: keys out of order", name)
		}
		prev = append(prev[:0], k...)
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				if err := checkBucket(nb, name+"/"+string(k)); err != nil {
					return err
				}
			}
			continue
		}
		sum = crc32.Update(sum, crc32.IEEETable, v) // every byte of the value is read
	}
	_ = sum
	return nil
}

// SetAside renames a damaged database to <name>.damaged-<UTC time> beside
// it (kept for a look, never read again) and syncs the folder; the next
// Open creates an empty one. It returns the new name.
func SetAside(path string) (string, error) {
	aside := path + ".damaged-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("set aside %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return aside, nil
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
