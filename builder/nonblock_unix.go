//go:build unix

package builder

import "syscall"

// openNonblock opens a result file without blocking, so that a FIFO in its
// place cannot hang ReadResultFile.
const openNonblock = syscall.O_NONBLOCK
