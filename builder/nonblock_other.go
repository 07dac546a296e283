//go:build !unix

package builder

// openNonblock is 0 where there is no non-blocking open; ReadResultFile
// still refuses a file that is not regular once it is open.
const openNonblock = 0
