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
