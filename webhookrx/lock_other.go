//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package webhookrx

import (
	"fmt"
	"os"
)

// lockDir opens dir/lock; without flock this platform cannot detect a
// second process on the same spool dir.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir+"/"+lockName, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("webhookrx: spool lock: %w", err)
	}
	return f, nil
}
