//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package dirlock

import "os"

// Without flock this platform cannot tell a second process: never held.
func tryLock(*os.File) (bool, error)       { return false, nil }
func tryLockShared(*os.File) (bool, error) { return false, nil }
func unlock(*os.File)                      {}
