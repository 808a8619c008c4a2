// Package atomicfile replaces files so that a reader, and the disk after a
// crash, shows the old content or the new, never a mix: write a temporary
// file in the same folder, fsync it, rename it over the target, fsync the
// folder.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const (
	tmpPrefix = "."
	tmpSuffix = ".tmp"
)

// IsTemp reports whether name (a base name) looks like a temporary file of
// Write: ".<target name>-<random>.tmp". Callers remove such files that a
// crash left behind; no reader glob ending in the target's extension
// matches them.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, tmpPrefix) && strings.HasSuffix(name, tmpSuffix)
}

// Write replaces path with what fn writes to f, a temporary file in path's
// folder; the file gets mode perm. It returns nil once the new content and
// its name are durable. On error path is untouched and the temporary file
// is removed. fn must not close f.
func Write(path string, perm fs.FileMode, fn func(f *os.File) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tmpPrefix+filepath.Base(path)+"-*"+tmpSuffix)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := fn(f); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// WriteFile replaces path with data, as Write.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// SyncDir fsyncs the folder dir, so that the entries created, renamed or
// removed in it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync folder %s: %w", dir, err)
	}
	return nil
}

// DirMode is the mode of the folders MkdirAll creates.
const DirMode = 0o750

// MkdirAll creates dir and its missing parents (mode 0750: the data is
// private to the daemon's user, and its group may list it), fsyncing the
// parent of each folder it creates so that the new entries survive a
// crash.
func MkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a folder", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, DirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // created concurrently
		}
		return err
	}
	return SyncDir(parent)
}

// probeBytes is what ProbeWritable writes: a block, so that a full disk
// fails the probe (an empty file needs an inode only).
const probeBytes = 4096

// ProbeWritable reports whether files can be written durably in dir now:
// it writes a block to a temporary file (named like Write's, so a crash
// leaves one that the callers' clean-up removes), syncs it and removes it.
// A read-only folder or file system, a full disk or missing permissions
// fail it. Used by readiness checks, which must see the cause gone as
// soon as it is, without waiting for the next real write.
func ProbeWritable(dir string) error {
	f, err := os.CreateTemp(dir, tmpPrefix+"probe-*"+tmpSuffix)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, probeBytes))
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close(), os.Remove(f.Name()))
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}
