//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package webhookrx

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive, non-blocking lock on dir/lock. The kernel
// drops it when the process dies, so a SIGKILL leaves no stale lock.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir+"/"+lockName, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("webhookrx: spool lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("webhookrx: spool dir %s is in use by another process (each receiver needs its own spool_dir)", dir)
		}
		return nil, fmt.Errorf("webhookrx: spool lock %s: %w", dir, err)
	}
	return f, nil
}
