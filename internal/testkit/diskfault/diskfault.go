// Package diskfault gives tests a folder whose writes can be made to fail
// and succeed again: a small tmpfs that is filled up and freed ("disk
// full") when the test runs as root and may mount, else a folder made
// read-only and writable again (root ignores permissions, so it needs the
// tmpfs). Tests that need it skip when neither is possible.
package diskfault

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Dir is a folder whose writes can be broken (Break) and healed (Heal).
type Dir struct {
	Path  string
	tmpfs bool
}

// Kind says how Break breaks writes: "disk full" or "read-only".
func (d *Dir) Kind() string {
	if d.tmpfs {
		return "disk full"
	}
	return "read-only"
}

// New returns an empty folder of about sizeMB MiB on its own file system
// when it can mount one, else a plain temporary folder (not as root).
func New(t testing.TB, sizeMB int) *Dir {
	t.Helper()
	path := filepath.Join(t.TempDir(), "faulty")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Cleanup(func() { _ = os.Chmod(path, 0o755) })
		return &Dir{Path: path}
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(max(sizeMB, 1))+"m,mode=0755", "tmpfs", path).CombinedOutput()
	if err != nil {
		t.Skipf("diskfault: running as root and cannot mount a tmpfs (%v: %s): no way to make a folder unwritable", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", path).Run() })
	return &Dir{Path: path, tmpfs: true}
}

const filler = ".diskfault-filler"

// Break makes writes under the folder fail: the tmpfs is filled up to its
// last byte, or the folder and its subfolders are made read-only.
func (d *Dir) Break(t testing.TB) {
	t.Helper()
	if !d.tmpfs {
		walkDirs(t, d.Path, 0o555)
		return
	}
	f, err := os.OpenFile(filepath.Join(d.Path, filler), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := len(buf); n > 0; {
		if _, err := f.Write(buf[:n]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			n /= 2 // fill the last bytes too
		}
	}
}

// Heal makes writes succeed again: the filler is removed, or the folders
// are made writable.
func (d *Dir) Heal(t testing.TB) {
	t.Helper()
	if !d.tmpfs {
		walkDirs(t, d.Path, 0o755)
		return
	}
	if err := os.Remove(filepath.Join(d.Path, filler)); err != nil {
		t.Fatal(err)
	}
}

func walkDirs(t testing.TB, root string, mode os.FileMode) {
	t.Helper()
	// Writable first so the walk can enter; read-only last, deepest first.
	var dirs []string
	_ = os.Chmod(root, 0o755)
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			_ = os.Chmod(p, 0o755)
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], mode); err != nil {
			t.Fatal(err)
		}
	}
}
