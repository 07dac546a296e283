//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package records

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// lockFile reports that this platform has no file lock that FileStore
// trusts; a FileStore can only be opened read-only here.
func lockFile(f *os.File) error {
	return fmt.Errorf("records: lock %s: no flock on %s: %w", f.Name(), runtime.GOOS, errors.ErrUnsupported)
}

// openNonblock is 0 where FileStore cannot lock (its read-only open still
// refuses a file that is not regular once it is open).
const openNonblock = 0
