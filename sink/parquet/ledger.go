package parquet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/surveysync/surveysync/record"
)

// FileLedger is the feed ledger (record.FeedLedger) in local append-only
// JSONL files, for runs without ClickHouse and for tests:
// <dir>/<feed>.contacts.jsonl and <dir>/<feed>.sends.jsonl. Every Record*
// call appends its lines in one write and fsyncs before returning. A torn last line (the process died mid-write)
// is cut off when the file is next opened.
type FileLedger struct {
	dir   string
	mu    sync.Mutex
	files map[string]*os.File // by file name
}

// NewFileLedger opens (creating) a file ledger in dir.
func NewFileLedger(dir string) (*FileLedger, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("file ledger: %w", err)
	}
	return &FileLedger{dir: dir, files: map[string]*os.File{}}, nil
}

// Close closes the ledger's files.
func (l *FileLedger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for name, f := range l.files {
		errs = append(errs, f.Close())
		delete(l.files, name)
	}
	return errors.Join(errs...)
}

func contactsFile(feed string) string { return feed + ".contacts.jsonl" }
func sendsFile(feed string) string    { return feed + ".sends.jsonl" }

// file returns the open append handle of name, repairing a torn tail on
// first open. l.mu must be held.
func (l *FileLedger) file(name string) (*os.File, error) {
	if f, ok := l.files[name]; ok {
		return f, nil
	}
	path := filepath.Join(l.dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("file ledger: %w", err)
	}
	if err := cutTornTail(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("file ledger %s: %w", path, err)
	}
	l.files[name] = f
	return f, nil
}

// cutTornTail truncates f after its last newline and leaves the offset at the end.
func cutTornTail(f *os.File) error {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil || size == 0 {
		return err
	}
	const block = 4096
	buf := make([]byte, block)
	end := size
	for end > 0 {
		start := max(end-block, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return nil
			}
			if err := f.Truncate(keep); err != nil {
				return err
			}
			_, err := f.Seek(keep, io.SeekStart)
			return err
		}
		end = start
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

func (l *FileLedger) appendLines(name string, lines []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := l.file(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(lines); err != nil {
		return fmt.Errorf("file ledger %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("file ledger %s: fsync: %w", name, err)
	}
	return nil
}

// RecordContacts appends entries durably.
func (l *FileLedger) RecordContacts(ctx context.Context, entries []record.ContactEntry) error {
	if len(entries) == 0 {
		return nil
	}
	byFeed := map[string]*bytes.Buffer{}
	for _, e := range entries {
		b := byFeed[e.Feed]
		if b == nil {
			b = &bytes.Buffer{}
			byFeed[e.Feed] = b
		}
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	for feed, b := range byFeed {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.appendLines(contactsFile(feed), b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// RecordSend appends e durably.
func (l *FileLedger) RecordSend(ctx context.Context, e record.SendEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return l.appendLines(sendsFile(e.Feed), append(line, '\n'))
}

// LoadContacts calls fn for every recorded entry of feed, in recording order.
func (l *FileLedger) LoadContacts(ctx context.Context, feed string, fn func(record.ContactEntry) error) error {
	return l.load(ctx, contactsFile(feed), func(b []byte) error {
		var e record.ContactEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		return fn(e)
	})
}

// LoadSends calls fn for every recorded send of feed, in recording order.
func (l *FileLedger) LoadSends(ctx context.Context, feed string, fn func(record.SendEntry) error) error {
	return l.load(ctx, sendsFile(feed), func(b []byte) error {
		var e record.SendEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		return fn(e)
	})
}

func (l *FileLedger) load(ctx context.Context, name string, fn func([]byte) error) error {
	// Open through the append handle first so a torn tail is cut before reading.
	l.mu.Lock()
	_, err := l.file(name)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	path := filepath.Join(l.dir, name)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("file ledger: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("file ledger %s line %d: %w", path, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("file ledger %s: %w", path, err)
	}
	return nil
}
