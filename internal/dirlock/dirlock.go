// Package dirlock keeps one surveysync daemon per folder: an exclusive
// flock(2) on FOLDER/.surveysync.lock. The kernel releases it when the
// process ends, however it ends (SIGKILL, a crash, a power cut), so a
// stale lock never blocks a restart. The holder writes who it is into the
// file (host, pid, start time), so a second daemon can name it.
//
// It calls flock directly (syscall.Flock, as the webhook spool's lock
// does) rather than through github.com/gofrs/flock: that library adds
// Windows (LockFileEx) and polling helpers, and surveysync is built for
// Linux only (mk/deploy.mk, the container, the .deb); one system call is
// not worth a module.
package dirlock

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// FileName is the lock file in the locked folder.
const FileName = ".surveysync.lock"

// Holder is who holds a lock, as written in its file.
type Holder struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// String names the holder for people: "host h, pid 42, started 2026-…Z".
func (h Holder) String() string {
	if h.Host == "" && h.PID == 0 {
		return "a process that did not say who it is"
	}
	return fmt.Sprintf("host %s, pid %d, started %s", h.Host, h.PID, h.Started.UTC().Format(time.RFC3339))
}

// Self is this process as a Holder, started now.
func Self(now time.Time) Holder {
	host, _ := os.Hostname()
	return Holder{Host: host, PID: os.Getpid(), Started: now.UTC().Truncate(time.Second)}
}

// HeldError is the error of Lock when another process holds the folder.
type HeldError struct {
	Dir    string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is in use by another surveysync daemon (%s): two daemons on one folder write every response twice and double the API calls; stop that one first (its lock is released when it exits, also by a crash)",
		e.Dir, e.Holder)
}

// Lock is a held lock; Unlock releases it.
type Lock struct {
	f *os.File
}

// Acquire locks dir (created when missing) for me, without waiting: a
// *HeldError when another process holds it.
func Acquire(dir string, me Holder) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	// A moment's wait: surveysync status may hold a shared lock for an
	// instant to see whether a daemon runs (Held).
	held, err := tryLock(f)
	for deadline := time.Now().Add(time.Second); err == nil && held && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		held, err = tryLock(f)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if held {
		h, _ := Read(dir)
		f.Close()
		return nil, &HeldError{Dir: dir, Holder: h}
	}
	b, _ := json.Marshal(me)
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err != nil {
		unlock(f)
		f.Close()
		return nil, fmt.Errorf("lock %s: write the holder: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Read is who holds (or last held) dir's lock, from its file.
func Read(dir string) (Holder, error) {
	var h Holder
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return h, err
	}
	err = json.Unmarshal(b, &h)
	return h, err
}

// Held reports whether a process holds dir's lock now, and who, without
// taking it (surveysync status).
func Held(dir string) (bool, Holder) {
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		return false, Holder{}
	}
	defer f.Close()
	held, err := tryLockShared(f)
	if err != nil || !held {
		return false, Holder{}
	}
	h, _ := Read(dir)
	return true, h
}

// Unlock releases the lock (the file stays: truncating it would race with
// the next holder's write).
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	unlock(l.f)
	err := l.f.Close()
	l.f = nil
	return err
}
