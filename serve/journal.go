package serve

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The journal holds the state-changing operations applied since the
// checkpoint, one entry a line:
//
//	<seq> <sha256 of "<seq> <payload>", 32 hex digits> <payload JSON>\n
//
// Entries are numbered without gaps; the checkpoint records the last
// number it covers, so entries at or below it (left by a stop between the
// checkpoint's rename and the journal's truncation) are skipped, never
// applied twice. An entry is acknowledged only after its newline is
// written and synced: a final segment without a newline is a write cut
// short and is dropped; any other damage (a checksum that does not match, a
// malformed line, a gap in the numbering) refuses to start with an error
// naming the byte offset.

// journal is the append side of the journal file.
type journal struct {
	f    *os.File
	size int64  // bytes of whole entries
	seq  uint64 // number of the last entry written or read
	// broken is set when a write failed and the file could not be put
	// back to its last whole entry: nothing more may be appended.
	broken error
}

// entrySum is the checksum of an entry.
func entrySum(seq uint64, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(strconv.FormatUint(seq, 10)))
	h.Write([]byte{' '})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// encodeEntry returns the line of an entry.
func encodeEntry(seq uint64, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payload) + 56)
	b.WriteString(strconv.FormatUint(seq, 10))
	b.WriteByte(' ')
	b.WriteString(entrySum(seq, payload))
	b.WriteByte(' ')
	b.Write(payload)
	b.WriteByte('\n')
	return b.Bytes()
}

// JournalError is a damaged journal: the byte offset and number of the
// first entry that fails its check.
type JournalError struct {
	Path   string
	Offset int64
	Entry  int // 1-based line number
	Reason string
}

func (e *JournalError) Error() string {
	return fmt.Sprintf("serve: journal %s damaged at byte %d (entry %d): %s", e.Path, e.Offset, e.Entry, e.Reason)
}

// Unwrap makes a JournalError match ErrState.
func (e *JournalError) Unwrap() error { return ErrState }

// readJournal checks the journal at path and calls apply on each entry
// numbered above after, in order. It drops a final segment without a
// newline (truncating the file to its whole entries) and returns the
// journal opened for appending.
func readJournal(path string, after uint64, apply func(seq uint64, payload []byte) error) (*journal, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	var off int64
	var prev uint64 // the number of the previous entry in the file
	first := true
	for line := 1; off < int64(len(data)); line++ {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break // a write cut short: never acknowledged
		}
		entry := data[off : off+int64(nl)]
		damaged := func(format string, args ...any) error {
			return &JournalError{Path: path, Offset: off, Entry: line, Reason: fmt.Sprintf(format, args...)}
		}
		sp1 := bytes.IndexByte(entry, ' ')
		if sp1 < 1 || len(entry) < sp1+1+32+1 || entry[sp1+1+32] != ' ' {
			return nil, damaged("malformed entry")
		}
		n, err := strconv.ParseUint(string(entry[:sp1]), 10, 64)
		if err != nil {
			return nil, damaged("malformed entry number")
		}
		payload := entry[sp1+1+32+1:]
		if string(entry[sp1+1:sp1+1+32]) != entrySum(n, payload) {
			return nil, damaged("checksum mismatch")
		}
		switch {
		case first && n > after+1:
			return nil, damaged("entry %d follows a checkpoint at entry %d: entries are missing", n, after)
		case !first && n != prev+1:
			return nil, damaged("entry %d follows entry %d", n, prev)
		}
		first = false
		if n > after {
			if err := apply(n, payload); err != nil {
				return nil, fmt.Errorf("%w: journal %s entry %d (byte %d): %w", ErrState, path, line, off, err)
			}
		}
		prev = n
		off += int64(nl) + 1
	}
	if off < int64(len(data)) {
		if err := os.Truncate(path, off); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return &journal{f: f, size: off, seq: max(after, prev)}, nil
}

// append writes and syncs the next entry. A failed write is cut back to
// the last whole entry; if that fails too, the journal is broken.
func (j *journal) append(payload []byte) error {
	if j.broken != nil {
		return j.broken
	}
	line := encodeEntry(j.seq+1, payload)
	if crashHook != nil {
		// The crash tests stop the process with half an entry written.
		if _, err := j.f.Write(line[:len(line)/2]); err != nil {
			return err
		}
		crashHook("journal-mid-write")
		if err := j.f.Truncate(j.size); err != nil {
			return err
		}
	}
	if _, err := j.f.Write(line); err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			j.broken = fmt.Errorf("%w: journal write failed (%w) and could not be cut back: %w", ErrState, err, terr)
			return j.broken
		}
		return fmt.Errorf("%w: journal: %w", ErrState, err)
	}
	if err := j.f.Sync(); err != nil {
		// The entry may or may not be on disk: nothing more is certain.
		j.broken = fmt.Errorf("%w: journal sync: %w", ErrState, err)
		return j.broken
	}
	j.seq++
	j.size += int64(len(line))
	return nil
}

// reset empties the journal after a checkpoint that covers every entry.
func (j *journal) reset() error {
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	if err := j.f.Sync(); err != nil {
		return err
	}
	j.size = 0
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// writeAtomic writes b to path through a synced temporary file and a
// rename, so that path always holds a whole file.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := testHook("checkpoint-before-rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// crashHook, set only by the package's crash tests, is called between
// the steps of a checkpoint and of a journal write with the name of the
// point, so that a test can stop the process there as a SIGKILL would.
var crashHook func(point string)

func testHook(point string) error {
	if crashHook != nil {
		crashHook(point)
	}
	return nil
}
