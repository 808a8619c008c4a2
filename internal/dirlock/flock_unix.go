//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package dirlock

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes f's exclusive lock without waiting; held reports that
// another open file holds it.
func tryLock(f *os.File) (held bool, err error) {
	return flock(f, syscall.LOCK_EX)
}

// tryLockShared reports whether an exclusive lock is held on f by another
// open file; a shared lock taken to find out is released at once.
func tryLockShared(f *os.File) (held bool, err error) {
	held, err = flock(f, syscall.LOCK_SH)
	if err == nil && !held {
		unlock(f)
	}
	return held, err
}

func flock(f *os.File, how int) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
