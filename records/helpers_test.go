package records_test

import (
	"fmt"
	"hash/crc32"
)

// crc32c is the checksum of the store's line format, written here
// independently of the package.
func crc32c(s string) string {
	return fmt.Sprintf("%08x", crc32.Checksum([]byte(s), crc32.MakeTable(crc32.Castagnoli)))
}
