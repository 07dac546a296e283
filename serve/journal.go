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

	"github.com/lm2lm/lm2lm/records"
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
// between the checkpoint's rename and the removal of the entries it
// covers) are skipped, never applied twice. A checkpoint begins by setting
// the journal's entries aside (renaming the file to journal.log.aside and
// starting a new one, which numbers on), and they are removed once the
// checkpoint that covers them is on disk; a restart reads the entries set
// aside, then the journal. An entry is acknowledged only after it is
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
	path string
	size int64  // bytes of whole entries
	seq  uint64 // number of the last entry written or read
	// aside is set while entries set aside (asidePath) await the
	// checkpoint that covers them.
	aside bool
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

func asidePath(path string) string { return path + ".aside" }

// readJournal checks the journal at path, after the entries set aside
// beside it when there are any, and calls apply on each entry numbered
// above after, in order. It drops a final entry of the journal cut short
// (truncating the file to its whole entries), restores the newline of a
// final entry missing only that, and returns the journal opened for
// appending. The entries set aside were whole when set aside: any damage
// there refuses.
func readJournal(path string, after uint64, apply func(seq uint64, payload []byte) error) (*journal, error) {
	r := journalReader{after: after, apply: apply}
	aside, err := os.ReadFile(asidePath(path))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	default:
		off, missingNL, err := r.read(asidePath(path), aside)
		if err == nil && (off < int64(len(aside)) || missingNL) {
			err = &JournalError{Path: asidePath(path), Offset: off, Entry: r.entries + 1, Reason: "entries set aside end cut short"}
		}
		if err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	off, repair, err := r.read(path, data)
	if err != nil {
		return nil, err
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
	if err := records.SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return &journal{f: f, path: path, size: off, seq: max(after, r.prev), dropped: int64(len(data)) - whole,
		aside: aside != nil}, nil
}

// journalReader checks the entries of one or more files in sequence.
type journalReader struct {
	after   uint64
	apply   func(seq uint64, payload []byte) error
	entries int    // entries read so far
	prev    uint64 // the number of the last entry read
}

// read checks the entries of data, the file at path, applying those
// numbered above after. It returns the offset after the last whole entry
// and whether that entry lacks only its newline; a final entry cut short
// ends the reading there.
func (r *journalReader) read(path string, data []byte) (off int64, missingNL bool, err error) {
	for entry := 1; off < int64(len(data)); entry++ {
		n, payload, size, nl, err := parseEntry(data[off:])
		if errors.Is(err, errTorn) {
			break // a write cut short: never acknowledged
		}
		damaged := func(format string, args ...any) error {
			return &JournalError{Path: path, Offset: off, Entry: entry, Reason: fmt.Sprintf(format, args...)}
		}
		if err != nil {
			return 0, false, damaged("%s", err.Error())
		}
		switch {
		case r.entries == 0 && n > r.after+1:
			return 0, false, damaged("entry %d follows a checkpoint at entry %d: entries are missing", n, r.after)
		case r.entries > 0 && n != r.prev+1:
			return 0, false, damaged("entry %d follows entry %d", n, r.prev)
		}
		if n > r.after {
			if err := r.apply(n, payload); err != nil {
				return 0, false, fmt.Errorf("%w: journal %s entry %d (byte %d): %w", ErrState, path, entry, off, err)
			}
		}
		r.prev = n
		r.entries++
		off += int64(size)
		missingNL = nl
	}
	return off, missingNL, nil
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

// rotate sets the journal's entries aside for a checkpoint that covers
// them: the file is renamed aside and a new one started, numbering on.
// Entries already aside (their checkpoint failed) stay there, and the
// journal too: the next checkpoint covers both. Afterwards, or when the
// new file cannot be opened, the journal is broken.
func (j *journal) rotate() error {
	if j.broken != nil || j.aside {
		return j.broken
	}
	if err := os.Rename(j.path, asidePath(j.path)); err != nil {
		return err
	}
	_ = testHook("journal-set-aside")
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		err = records.SyncDir(filepath.Dir(j.path))
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		j.broken = fmt.Errorf("%w: journal: a new file after setting the entries aside: %w", ErrState, err)
		return j.broken
	}
	old := j.f
	j.f, j.size, j.aside = f, 0, true
	return old.Close()
}

// dropAside removes the entries set aside once a checkpoint covers them.
// It touches only the file aside, so it runs off the service's lock while
// the journal is appended to.
func (j *journal) dropAside() error {
	if err := os.Remove(asidePath(j.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return records.SyncDir(filepath.Dir(j.path))
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
	return records.SyncDir(filepath.Dir(path))
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
