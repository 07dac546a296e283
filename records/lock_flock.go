//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package records

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock(2) on f. The lock belongs
// to f's open file description: a second open of the same file, in this
// process or another, fails to take it, and the kernel drops it when f is
// closed or its process dies.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		default:
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
	}
}

// openNonblock opens a store without blocking: a FIFO at the path must not
// hang OpenFile before it can see that the file is not regular.
const openNonblock = syscall.O_NONBLOCK
