package records

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// FileConfig parameterises OpenFile.
type FileConfig struct {
	// ReadOnly opens an existing store for reading only: no lock is taken,
	// the file is never modified (a torn tail is ignored, not truncated), the
	// records are a snapshot of the file at open time, and Append returns
	// ErrReadOnly. Default false. Library choice: lets a report or a second
	// process read a store while its owner keeps appending.
	ReadOnly bool
	// Perm is the permission of a newly created store file. Default 0o644.
	// Library choice: the usual mode for data files; records carry no
	// secrets. Must include owner read and write unless ReadOnly.
	Perm fs.FileMode
	// MaxLineBytes bounds one line of the file (one encoded record with
	// its newline): OpenFile reports a longer line as corruption instead
	// of buffering it, and Append refuses (ErrInvalid) a record whose line
	// would be longer, so that the store can always read back what it
	// wrote. 0 means DefaultMaxLineBytes.
	MaxLineBytes int
}

// DefaultMaxLineBytes is FileConfig.MaxLineBytes' default, 16 MiB. Library
// choice: a record with a long free-text rationale is a few KiB, so this
// leaves three orders of magnitude of room while bounding what a hostile or
// foreign file can make OpenFile allocate for one line.
const DefaultMaxLineBytes = 16 << 20

// DefaultFileConfig returns the configuration for a writable store.
func DefaultFileConfig() FileConfig {
	return FileConfig{Perm: 0o644, MaxLineBytes: DefaultMaxLineBytes}
}

func (c FileConfig) maxLine() int {
	if c.MaxLineBytes == 0 {
		return DefaultMaxLineBytes
	}
	return c.MaxLineBytes
}

// Validate reports a configuration OpenFile cannot use.
func (c FileConfig) Validate() error {
	if c.Perm&^fs.ModePerm != 0 {
		return fmt.Errorf("records: FileConfig.Perm = %v, want permission bits only", c.Perm)
	}
	if !c.ReadOnly && c.Perm&0o600 != 0o600 {
		return fmt.Errorf("records: FileConfig.Perm = %#o, want owner read and write", uint32(c.Perm))
	}
	if c.MaxLineBytes < 0 || (c.MaxLineBytes > 0 && c.MaxLineBytes < minLineBytes) {
		return fmt.Errorf("records: FileConfig.MaxLineBytes = %d, want 0 (default) or ≥ %d", c.MaxLineBytes, minLineBytes)
	}
	return nil
}

// CorruptError reports a store file that cannot be read: a line other than
// a torn last one that does not decode. It matches both ErrCorrupt and its
// cause under errors.Is.
type CorruptError struct {
	Path string // the store file
	Line int    // 1-based line number
	Err  error  // what is wrong with the line
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("records: corrupt store %s: line %d: %v", e.Path, e.Line, e.Err)
}

// Unwrap returns ErrCorrupt and the cause.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// FileStore is a durable, append-only Store kept in one file. Append
// returns only after the records are written and fsynced; a crash at any
// byte loses at most the records of Appends that had not returned, all or
// none of each. All records are also held in memory, indexed by task and by
// proposal key, so Scan does no I/O.
//
// A writable FileStore holds an exclusive flock(2) on its file until Close:
// a second writable open of the same file, from this process or another,
// fails with ErrLocked. (flock is advisory and may not work across NFS.)
// The lock holds the file, not its name, so every Append also checks, before
// writing and again after the fsync, that the path still names the locked
// file: once it was unlinked, renamed away or replaced (where a second
// process could create and lock a new file), that Append and every later
// one fail with ErrPathChanged instead of acknowledging records that no
// later open of the path would find. The path must name a regular file
// (ErrNotRegular otherwise; a FIFO or device never blocks or floods the
// open). FileStore is safe for concurrent use.
//
// # File format (version 1)
//
// The file holds one record per line, each line ending in '\n':
//
//	<crc> SP <i>/<n> SP <json> LF
//
// <json> is the Record as encoding/json writes it (compact, so it holds no
// raw newline). <i>/<n> place the line in the Append call that wrote it: a
// call with n records writes lines 1/n … n/n back to back in one write, so
// a reader can tell a complete batch from one cut short by a crash. <i> and
// <n> are decimal without sign or leading zeros, 1 ≤ i ≤ n. <crc> is the
// CRC-32C (Castagnoli) of the bytes from <i> to the end of <json>, as 8
// lower-case hex digits. For example (JSON shortened):
//
//	9f0c2e51 1/1 {"task":{"id":"ar-prose/0",...},"proposal":{"mechanism":"lr-scale","params":{"factor":"2"}},"gain":0.03125,...}
//
// On open, a last batch with fewer than n lines, and a last fragment
// without its '\n' that could be the start of the next line of the file
// (it fits the grammar above as far as it goes, continues the batch, and
// has no bytes after a complete JSON object; or it is NUL bytes alone), are
// the trace of an Append that never returned: they are dropped and the file
// is truncated to the end of the last complete batch. Anything else that
// does not decode is corruption: a line that does not decode (including a
// bad checksum on a complete last line), a line longer than
// FileConfig.MaxLineBytes, a final fragment that no Append could have
// written (a complete line followed by junk, a file that is not a store),
// make OpenFile fail with a *CorruptError naming the line, and the file is
// left untouched for a person to inspect.
type FileStore struct {
	path    string
	ro      bool
	maxLine int

	wmu    sync.Mutex // serialises writes and Close
	f      *os.File   // guarded by wmu
	size   int64      // bytes of complete batches; guarded by wmu
	broken error      // a failed write left the file in doubt; guarded by wmu

	mu     sync.RWMutex // guards idx and closed
	idx    *index
	closed bool

	torn int64 // bytes dropped from the tail on open
}

// OpenFile opens the store at path, creating it when it does not exist and
// cfg is not ReadOnly; a writable open fsyncs the file's directory so that
// the file's entry is durable before any record is appended. It reads every
// record into memory. A torn tail left by a crash (a last fragment without
// its newline, or a last batch cut short) is dropped and, unless ReadOnly,
// truncated away so that later appends start clean; any other line that
// does not decode makes OpenFile fail with a *CorruptError. OpenFile
// returns an error wrapping ErrLocked when another FileStore holds the file.
func OpenFile(path string, cfg FileConfig) (*FileStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &FileStore{path: path, ro: cfg.ReadOnly, maxLine: cfg.maxLine()}
	f, err := openLocked(path, cfg)
	if err != nil {
		return nil, err
	}
	idx, good, end, err := load(f, path, s.maxLine)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.torn = end - good
	if !cfg.ReadOnly && good < end {
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("records: open %s: drop torn tail: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("records: open %s: drop torn tail: %w", path, err)
		}
	}
	s.f, s.size, s.idx = f, good, idx
	return s, nil
}

// openLocked opens path as OpenFile describes: a regular file only (opened
// without blocking, so that a FIFO cannot hang the open), locked unless
// ReadOnly, and still the file that path names once locked.
func openLocked(path string, cfg FileConfig) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		f, err := openRegular(path, cfg)
		if err != nil || cfg.ReadOnly {
			return f, err
		}
		if err := lockFile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("records: open %s: %w", path, err)
		}
		// Another process may have unlinked or replaced the path between
		// our open and our lock: the lock must hold the file path names.
		if err := samePath(f, path); err != nil {
			f.Close()
			if attempt < 3 {
				continue
			}
			return nil, fmt.Errorf("records: open %s: %w", path, err)
		}
		return f, nil
	}
}

// openRegular opens (and for a writable store creates) path and checks it
// is a regular file.
func openRegular(path string, cfg FileConfig) (*os.File, error) {
	var f *os.File
	var err error
	if cfg.ReadOnly {
		f, err = os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	} else {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, cfg.Perm)
		if errors.Is(err, fs.ErrExist) {
			f, err = os.OpenFile(path, os.O_RDWR|openNonblock, 0)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("records: open: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w (mode %v)", ErrNotRegular, fi.Mode().Type())
	}
	if err == nil && !cfg.ReadOnly {
		// A new file's entry must be durable, and an existing file's
		// creator may have died before it fsynced the directory; without
		// this, records appended (and fsynced) here could vanish with the
		// entry on power loss.
		err = SyncDir(filepath.Dir(path))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("records: open %s: %w", path, err)
	}
	return f, nil
}

// samePath reports, wrapping ErrPathChanged, when path no longer names f's
// file (it was unlinked, renamed away or replaced).
func samePath(f *os.File, path string) error {
	held, err := f.Stat()
	if err != nil {
		return err
	}
	named, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPathChanged, err)
	}
	if !os.SameFile(held, named) {
		return fmt.Errorf("%w: the path names another file", ErrPathChanged)
	}
	return nil
}

// load reads a store file from its start. good is the end of the last
// complete batch, end the size of the file. A line longer than maxLine is
// corruption; a final fragment without '\n' is a torn tail only if it could
// be the start of the next line (see tornFragment).
func load(f *os.File, path string, maxLine int) (idx *index, good, end int64, err error) {
	idx = newIndex()
	br := bufio.NewReaderSize(f, min(maxLine, 1<<20))
	var (
		batch  []Record // lines of the current, incomplete batch
		batchN int      // its size
		lineNo int
		off    int64
		long   []byte
	)
	for {
		chunk, rerr := br.ReadSlice('\n')
		if len(long)+len(chunk) > maxLine {
			return nil, 0, 0, &CorruptError{Path: path, Line: lineNo + 1,
				Err: fmt.Errorf("%w: longer than MaxLineBytes = %d", errLineFormat, maxLine)}
		}
		if rerr == bufio.ErrBufferFull {
			long = append(long, chunk...)
			off += int64(len(chunk))
			continue
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		}
		off += int64(len(chunk))
		if rerr == io.EOF {
			if len(line) > 0 {
				if ferr := tornFragment(line, len(batch), batchN); ferr != nil {
					return nil, 0, 0, &CorruptError{Path: path, Line: lineNo + 1, Err: ferr}
				}
			}
			return idx, good, off, nil
		}
		if rerr != nil {
			return nil, 0, 0, fmt.Errorf("records: read %s: %w", path, rerr)
		}
		lineNo++
		r, i, n, derr := decodeLine(line[:len(line)-1])
		if derr == nil {
			derr = batchOrder(i, n, len(batch), batchN)
		}
		if derr != nil {
			return nil, 0, 0, &CorruptError{Path: path, Line: lineNo, Err: derr}
		}
		if len(r.Proposal.Params) == 0 {
			r.Proposal.Params = nil // as cloneRecord gives
		}
		if len(r.Seeds) == 0 {
			r.Seeds = nil
		}
		batch, batchN = append(batch, r), n
		if i == n {
			idx.addOwned(batch...) // freshly decoded: no copy needed
			batch = batch[:0]
			good = off
		}
	}
}

// batchOrder checks that line i/n may follow the have lines already read of
// a batch of size haveN.
func batchOrder(i, n, have, haveN int) error {
	switch {
	case have == 0 && i != 1:
		return fmt.Errorf("%w: batch line %d/%d without line 1", errLineFormat, i, n)
	case have > 0 && (i != have+1 || n != haveN):
		return fmt.Errorf("%w: batch line %d/%d after line %d/%d", errLineFormat, i, n, have, haveN)
	}
	return nil
}

// SyncDir fsyncs a directory so that a new, renamed or removed entry in
// it is durable (a new store, or one replaced by rename).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path returns the file the store was opened from.
func (s *FileStore) Path() string { return s.path }

// TornBytes returns how many bytes of a torn tail OpenFile dropped (0 for a
// cleanly closed store).
func (s *FileStore) TornBytes() int64 { return s.torn }

// Len returns the number of records in the store.
func (s *FileStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.idx.recs)
}

// Append validates every record of rs, writes all of them as one batch,
// fsyncs the file and only then returns nil; when any record is invalid it
// writes none (an error wrapping ErrInvalid, or ErrImplausible for a
// feasible real record that fails Plausible, as Evidence would). If a write or fsync fails the
// records are not in the store; if the file cannot be restored after such a
// failure, every later Append fails and the store must be reopened.
// Concurrent Appends are serialised.
func (s *FileStore) Append(ctx context.Context, rs ...Record) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("records: append: %w", err)
	}
	if s.ro {
		return fmt.Errorf("records: append %s: %w", s.path, ErrReadOnly)
	}
	if err := validateBatch(rs); err != nil {
		return err
	}
	var buf []byte
	for i, r := range rs {
		start := len(buf)
		var err error
		if buf, err = encodeLine(buf, r, i+1, len(rs)); err != nil {
			return fmt.Errorf("records: append record %d of %d: %w", i, len(rs), err)
		}
		if n := len(buf) - start; n > s.maxLine {
			return fmt.Errorf("records: append record %d of %d: %w: line of %d bytes, MaxLineBytes = %d", i, len(rs), ErrInvalid, n, s.maxLine)
		}
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return fmt.Errorf("records: append: %w", ErrClosed)
	case s.broken != nil:
		return fmt.Errorf("records: append %s: store failed earlier: %w", s.path, s.broken)
	case len(rs) == 0:
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("records: append: %w", err)
	}
	if err := s.write(buf); err != nil {
		return fmt.Errorf("records: append %s: %w", s.path, err)
	}
	s.mu.Lock()
	s.idx.add(rs...)
	s.mu.Unlock()
	return nil
}

// write writes buf at the end of the file and fsyncs it. On failure it
// cuts the file back to its old size, or marks the store broken. The path
// must name the store's file before the write and still after the fsync:
// otherwise the records would go to a file nobody can open again, so the
// store is marked broken (ErrPathChanged) and they are not acknowledged.
func (s *FileStore) write(buf []byte) error {
	if err := samePath(s.f, s.path); err != nil {
		s.broken = err
		return err
	}
	_, err := s.f.WriteAt(buf, s.size)
	if err == nil {
		err = s.f.Sync()
	}
	if err == nil {
		if perr := samePath(s.f, s.path); perr != nil {
			s.broken = perr
			return perr
		}
		s.size += int64(len(buf))
		return nil
	}
	if terr := s.f.Truncate(s.size); terr != nil {
		s.broken = errors.Join(err, terr)
	} else if serr := s.f.Sync(); serr != nil {
		s.broken = errors.Join(err, serr)
	}
	return err
}

// Scan returns copies of the records that match f, in append order. A
// filter with TaskID or Key is answered from an index.
func (s *FileStore) Scan(ctx context.Context, f Filter) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("records: scan: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("records: scan: %w", ErrClosed)
	}
	return s.idx.scan(f), nil
}

// Close waits for a running Append, releases the lock and closes the file.
// Later calls to Append and Scan return ErrClosed; closing twice returns
// ErrClosed.
func (s *FileStore) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("records: close: %w", ErrClosed)
	}
	s.closed = true
	s.idx = newIndex()
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("records: close %s: %w", s.path, err)
	}
	return nil
}
