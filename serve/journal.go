package serve

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// The journal holds the state-changing operations applied since the
// checkpoint, one entry a line:
//
//	<seq> <length> <header sum> <sum> <payload JSON>\n
//
// where the header sum (8 hex digits) covers the number and the length,
// and the sum (32 hex digits of SHA-256) covers the number, the length and
// the payload. Entries are numbered without gaps; the checkpoint records
// the last number it covers, so entries at or below it (left by a stop
// between the checkpoint's rename and the journal's truncation) are
// skipped, never applied twice. An entry is acknowledged only after it is
// written whole and synced, so the only damage a crash may leave is a
// final entry cut short: a whole header whose length runs past the end of
// the file (or a header itself cut short), which is dropped. A final entry
// complete but for its newline is applied and its newline restored. Any
// other damage (a sum that does not match, a malformed header, a missing
// terminator, a gap in the numbering) refuses to start with an error
// naming the byte offset.

// journal is the append side of the journal file.
type journal struct {
	f    *os.File
	size int64  // bytes of whole entries
	seq  uint64 // number of the last entry written or read
	// broken is set when a write failed and the file could not be put
	// back to its last whole entry: nothing more may be appended.
	broken error
	// dropped is how many bytes of a final entry cut short readJournal
	// truncated, at offset size.
	dropped int64
}

// maxHeader bounds an entry's header (two numbers and two sums).
const maxHeader = 20 + 1 + 20 + 1 + 8 + 1 + 32 + 1

func headerSum(seq uint64, n int) string {
	h := sha256.Sum256([]byte(strconv.FormatUint(seq, 10) + " " + strconv.Itoa(n)))
	return hex.EncodeToString(h[:4])
}

// entrySum is the checksum of an entry.
func entrySum(seq uint64, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(strconv.FormatUint(seq, 10) + " " + strconv.Itoa(len(payload)) + " "))
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// encodeEntry returns the line of an entry.
func encodeEntry(seq uint64, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payload) + maxHeader + 1)
	b.WriteString(strconv.FormatUint(seq, 10))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.WriteString(headerSum(seq, len(payload)))
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
	Entry  int // 1-based
	Reason string
}

func (e *JournalError) Error() string {
	return fmt.Sprintf("serve: journal %s damaged at byte %d (entry %d): %s", e.Path, e.Offset, e.Entry, e.Reason)
}

// Unwrap makes a JournalError match ErrState.
func (e *JournalError) Unwrap() error { return ErrState }

// errTorn marks a final entry cut short.
var errTorn = errors.New("torn")

// parseEntry reads the entry at the start of data: its number, payload
// and length on disk. missingNL reports a final entry whole but for its
// newline. errTorn: a final entry cut short.
func parseEntry(data []byte) (seq uint64, payload []byte, size int, missingNL bool, err error) {
	head := data[:min(len(data), maxHeader)]
	var fields [4][]byte
	rest := head
	for i := range fields {
		sp := bytes.IndexByte(rest, ' ')
		if sp < 0 {
			if len(data) < maxHeader && bytes.IndexByte(data, '\n') < 0 {
				return 0, nil, 0, false, errTorn
			}
			return 0, nil, 0, false, errors.New("malformed header")
		}
		fields[i], rest = rest[:sp], rest[sp+1:]
	}
	hdr := len(head) - len(rest)
	seq, err1 := strconv.ParseUint(string(fields[0]), 10, 64)
	n, err2 := strconv.Atoi(string(fields[1]))
	if err1 != nil || err2 != nil || n < 0 || len(fields[2]) != 8 || len(fields[3]) != 32 {
		return 0, nil, 0, false, errors.New("malformed header")
	}
	if string(fields[2]) != headerSum(seq, n) {
		return 0, nil, 0, false, errors.New("header checksum mismatch")
	}
	end := hdr + n
	switch {
	case end > len(data):
		return 0, nil, 0, false, errTorn
	case end == len(data):
		missingNL = true
	case data[end] != '\n':
		return 0, nil, 0, false, errors.New("entry not terminated by a newline")
	}
	payload = data[hdr:end]
	if string(fields[3]) != entrySum(seq, payload) {
		return 0, nil, 0, false, errors.New("checksum mismatch")
	}
	return seq, payload, end + 1, missingNL, nil
}

// readJournal checks the journal at path and calls apply on each entry
// numbered above after, in order. It drops a final entry cut short
// (truncating the file to its whole entries), restores the newline of a
// final entry missing only that, and returns the journal opened for
// appending.
func readJournal(path string, after uint64, apply func(seq uint64, payload []byte) error) (*journal, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	var off int64
	var prev uint64 // the number of the previous entry in the file
	var repair bool
	for entry := 1; off < int64(len(data)); entry++ {
		n, payload, size, missingNL, err := parseEntry(data[off:])
		if errors.Is(err, errTorn) {
			break // a write cut short: never acknowledged
		}
		damaged := func(format string, args ...any) error {
			return &JournalError{Path: path, Offset: off, Entry: entry, Reason: fmt.Sprintf(format, args...)}
		}
		if err != nil {
			return nil, damaged("%s", err.Error())
		}
		switch {
		case entry == 1 && n > after+1:
			return nil, damaged("entry %d follows a checkpoint at entry %d: entries are missing", n, after)
		case entry > 1 && n != prev+1:
			return nil, damaged("entry %d follows entry %d", n, prev)
		}
		if n > after {
			if err := apply(n, payload); err != nil {
				return nil, fmt.Errorf("%w: journal %s entry %d (byte %d): %w", ErrState, path, entry, off, err)
			}
		}
		prev = n
		off += int64(size)
		repair = missingNL
	}
	whole := min(off, int64(len(data)))
	if whole < int64(len(data)) {
		if err := os.Truncate(path, whole); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	if repair {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return &journal{f: f, size: off, seq: max(after, prev), dropped: int64(len(data)) - whole}, nil
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
	var err error
	if writeFault != nil {
		if n, fail := writeFault(len(line)); fail {
			_, _ = j.f.Write(line[:n])
			err = syscall.ENOSPC
		}
	}
	if err == nil {
		_, err = j.f.Write(line)
	}
	if err != nil {
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

// writeAtomicFunc writes path through a synced temporary file and a
// rename, so that path always holds a whole file; write writes the
// contents, through a buffer.
func writeAtomicFunc(path string, write func(w io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
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

// writeFault, set only by the package's tests, makes a journal write of n
// bytes write only its first k and fail as a full disk does.
var writeFault func(n int) (k int, fail bool)

func testHook(point string) error {
	if crashHook != nil {
		crashHook(point)
	}
	return nil
}
