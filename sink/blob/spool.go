package blob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// spoolPattern names a download's temporary file in the spool folder.
const spoolPattern = "surveysync-file-*.part"

// RemoveSpoolLeftovers removes from dir the temporary files of downloads a
// killed process left (they may hold uploaded files of responses erased
// since; the copier downloads again what it did not store) and returns how
// many. Call it before the copier runs. On Unix a file removed while
// another process writes it stays that process's until it closes it.
func RemoveSpoolLeftovers(dir string) (int, error) {
	paths, err := filepath.Glob(filepath.Join(dir, spoolPattern))
	if err != nil {
		return 0, err
	}
	for i, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return i, fmt.Errorf("remove a former download %s: %w", p, err)
		}
	}
	return len(paths), nil
}

// spool holds one download until it is complete and hashed: in memory up to
// memMax bytes (buffers are pooled), then in a temporary file. This is what
// keeps memory flat whatever the file size, and what lets the object be
// written in one go with its SHA-256 in the metadata.
type spool struct {
	dir    string
	memMax int
	pool   *sync.Pool
	buf    *bytes.Buffer
	f      *os.File
	n      int64
}

func newSpool(dir string, memMax int, pool *sync.Pool) *spool {
	return &spool{dir: dir, memMax: memMax, pool: pool}
}

func (s *spool) Write(p []byte) (int, error) {
	if s.f == nil {
		if s.buf == nil {
			s.buf = s.pool.Get().(*bytes.Buffer)
			s.buf.Reset()
		}
		if s.buf.Len()+len(p) <= s.memMax {
			s.n += int64(len(p))
			return s.buf.Write(p)
		}
		f, err := os.CreateTemp(s.dir, spoolPattern)
		if err != nil {
			return 0, fmt.Errorf("spool: %w", err)
		}
		s.f = f
		if _, err := f.Write(s.buf.Bytes()); err != nil {
			return 0, fmt.Errorf("spool %s: %w", f.Name(), err)
		}
		s.release()
	}
	n, err := s.f.Write(p)
	s.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("spool %s: %w", s.f.Name(), err)
	}
	return n, nil
}

// ReaderAt returns the spooled bytes (the temporary file, or the memory
// buffer); it is valid until Close.
func (s *spool) ReaderAt() io.ReaderAt {
	if s.f != nil {
		return s.f
	}
	if s.buf == nil {
		return bytes.NewReader(nil)
	}
	return bytes.NewReader(s.buf.Bytes())
}

func (s *spool) release() {
	if s.buf != nil {
		if s.buf.Cap() <= 2*s.memMax {
			s.pool.Put(s.buf)
		}
		s.buf = nil
	}
}

// Close removes the temporary file, if any, and returns the buffer.
func (s *spool) Close() error {
	s.release()
	if s.f == nil {
		return nil
	}
	name := s.f.Name()
	err := s.f.Close()
	if rerr := os.Remove(name); rerr != nil && err == nil {
		err = rerr
	}
	s.f = nil
	return err
}
