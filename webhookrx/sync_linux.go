package webhookrx

import (
	"os"
	"syscall"
)

// datasync flushes f's data (and the size) to stable storage.
func datasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
