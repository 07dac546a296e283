package records_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) records.Store { return records.NewMemStore() })
}

func TestFileStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) records.Store {
		s, err := records.OpenFile(filepath.Join(t.TempDir(), "records.jsonl"), records.DefaultFileConfig())
		require.NoError(t, err)
		return s
	})
}

// TestFileStoreReopenedConformance runs the suite on stores that are closed
// and reopened after every append, so every Scan reads what is on disk.
func TestFileStoreReopenedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) records.Store {
		return &reopening{path: filepath.Join(t.TempDir(), "records.jsonl")}
	})
}

// reopening is a Store that opens its file for every call. Appends take
// turns, since the file lock admits one writer at a time; scans open the
// file read-only and may run during an append.
type reopening struct {
	mu   sync.Mutex
	path string
}

func (r *reopening) Append(ctx context.Context, rs ...records.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := records.OpenFile(r.path, records.DefaultFileConfig())
	if err != nil {
		return err
	}
	err = s.Append(ctx, rs...)
	return errors.Join(err, s.Close())
}

func (r *reopening) Scan(ctx context.Context, f records.Filter) ([]records.Record, error) {
	s, err := records.OpenFile(r.path, records.FileConfig{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Scan(ctx, f)
}

var cmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

func openFile(t *testing.T, path string) *records.FileStore {
	t.Helper()
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func fixture(from, to int) []records.Record {
	var out []records.Record
	for i := from; i < to; i++ {
		out = append(out, storetest.Record(i))
	}
	return out
}

func scanAll(t *testing.T, s records.Store) []records.Record {
	t.Helper()
	rs, err := s.Scan(context.Background(), records.Filter{})
	require.NoError(t, err)
	return rs
}

// writeStore writes a store of rs (one batch per record) and returns its
// bytes.
func writeStore(t testing.TB, path string, batches ...[]records.Record) []byte {
	t.Helper()
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	for _, b := range batches {
		require.NoError(t, s.Append(context.Background(), b...))
	}
	require.NoError(t, s.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func TestFileStoreReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	want := fixture(0, 30)
	data := writeStore(t, path, want[:1], want[1:10], want[10:])
	require.Equal(t, 30, bytes.Count(data, []byte{'\n'}), "one line per record")

	s := openFile(t, path)
	require.Zero(t, s.TornBytes())
	require.Equal(t, 30, s.Len())
	if diff := cmp.Diff(want, scanAll(t, s), cmpOpts...); diff != "" {
		t.Fatalf("reopened store (-want +got):\n%s", diff)
	}
	// Appends continue after the old records.
	more := fixture(30, 33)
	require.NoError(t, s.Append(context.Background(), more...))
	require.NoError(t, s.Close())
	s = openFile(t, path)
	if diff := cmp.Diff(append(want, more...), scanAll(t, s), cmpOpts...); diff != "" {
		t.Fatalf("store after second session (-want +got):\n%s", diff)
	}
}

// TestFileStoreTornTail: what a crash can leave at the end of the file is
// dropped and truncated away; later appends are clean.
func TestFileStoreTornTail(t *testing.T) {
	dir := t.TempDir()
	clean := writeStore(t, filepath.Join(dir, "clean"), fixture(0, 3), fixture(3, 4))
	lines := bytes.SplitAfter(clean, []byte{'\n'}) // 4 lines and an empty tail
	require.Len(t, lines, 5)
	batch := writeStore(t, filepath.Join(dir, "batch"), fixture(10, 13))
	batchLines := bytes.SplitAfter(batch, []byte{'\n'})
	last := lines[3]
	badSum := append([]byte("00000000"), last[8:len(last)-1]...)

	tests := []struct {
		name string
		tail []byte
	}{
		{"half a line", last[:len(last)/2]},
		{"line without its newline", last[:len(last)-1]},
		{"checksum only", last[:8]},
		{"bad checksum, no newline", badSum},
		{"NUL bytes", make([]byte, 300)},
		{"batch cut after line 1 of 3", batchLines[0]},
		{"batch cut after line 2 of 3", bytes.Join(batchLines[:2], nil)},
		{"batch cut inside line 3 of 3", append(bytes.Join(batchLines[:2], nil), batchLines[2][:20]...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.jsonl")
			good := bytes.Join(lines[:3], nil) // the batch of 3 records
			require.NoError(t, os.WriteFile(path, append(append([]byte(nil), good...), tt.tail...), 0o644))

			s := openFile(t, path)
			require.Equal(t, int64(len(tt.tail)), s.TornBytes())
			if diff := cmp.Diff(fixture(0, 3), scanAll(t, s), cmpOpts...); diff != "" {
				t.Fatalf("records (-want +got):\n%s", diff)
			}
			onDisk, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, good, onDisk, "torn tail truncated")

			require.NoError(t, s.Append(context.Background(), fixture(20, 22)...))
			require.NoError(t, s.Close())
			s = openFile(t, path)
			require.Zero(t, s.TornBytes())
			if diff := cmp.Diff(append(fixture(0, 3), fixture(20, 22)...), scanAll(t, s), cmpOpts...); diff != "" {
				t.Fatalf("records after append (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFileStoreCorrupt: damage anywhere but a torn tail is an error naming
// the line, never silently skipped.
func TestFileStoreCorrupt(t *testing.T) {
	dir := t.TempDir()
	clean := writeStore(t, filepath.Join(dir, "clean"), fixture(0, 1), fixture(1, 2), fixture(2, 4), fixture(4, 5))
	lines := bytes.SplitAfter(clean, []byte{'\n'})[:5] // batches: 1/1, 1/1, 1/2 2/2, 1/1
	flip := func(l []byte, at int) []byte {
		c := append([]byte(nil), l...)
		c[at] ^= 0x04
		return c
	}
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, nil) }
	invalid := records.Record{Task: storetest.Tasks[0], Proposal: records.Proposal{Mechanism: "x"}, Source: "imagined"}
	invalidLine := lineFor(t, invalid)

	tests := []struct {
		name  string
		data  []byte
		line  int
		cause string
	}{
		{"flipped JSON byte in line 2", join(lines[0], flip(lines[1], 40), lines[2], lines[3], lines[4]), 2, "checksum"},
		{"flipped checksum in line 1", join(flip(lines[0], 3), lines[1]), 1, "checksum"},
		{"bad checksum on the last full line", join(lines[0], flip(lines[1], 30)), 2, "checksum"},
		{"empty line", join(lines[0], []byte("\n"), lines[1]), 2, "short"},
		{"garbage line", join(lines[0], lines[1], []byte("hello world, this is not a record\n"), lines[4]), 3, "malformed"},
		{"missing batch line", join(lines[0], lines[1], lines[3], lines[4]), 3, "without line 1"},
		{"batch interrupted", join(lines[0], lines[2], lines[4]), 3, "after line 1/2"},
		{"record fails validation", join(lines[0], invalidLine), 2, "unknown source"},
		{"torn line in the middle", join(lines[0], lines[1][:30], []byte("\n"), lines[4]), 2, "checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.jsonl")
			require.NoError(t, os.WriteFile(path, tt.data, 0o644))
			for _, cfg := range []records.FileConfig{records.DefaultFileConfig(), {ReadOnly: true}} {
				_, err := records.OpenFile(path, cfg)
				require.ErrorIs(t, err, records.ErrCorrupt)
				var ce *records.CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tt.line, ce.Line, "error %v", err)
				require.Equal(t, path, ce.Path)
				require.Contains(t, err.Error(), "line ")
				require.Contains(t, err.Error(), tt.cause)
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tt.data, after, "a corrupt store is never modified")
		})
	}
}

// lineFor encodes r as a one-record batch even if r is invalid, by writing
// a valid record and patching it: the checksum stays valid.
func lineFor(t *testing.T, r records.Record) []byte {
	t.Helper()
	good := r
	good.Source = records.Predicted // valid whatever its loss and gain
	data := writeStore(t, filepath.Join(t.TempDir(), "one"), []records.Record{good})
	line := strings.Replace(string(data[9:len(data)-1]), `"source":"predicted"`, `"source":"`+string(r.Source)+`"`, 1)
	return []byte(crc32c(line) + " " + line + "\n")
}

func TestFileStoreLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	s := openFile(t, path)
	_, err := records.OpenFile(path, records.DefaultFileConfig())
	require.ErrorIs(t, err, records.ErrLocked)
	require.Contains(t, err.Error(), path)

	// Readers need no lock and see a snapshot.
	require.NoError(t, s.Append(context.Background(), fixture(0, 2)...))
	ro, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	require.Equal(t, 2, ro.Len())
	require.ErrorIs(t, ro.Append(context.Background(), storetest.Record(5)), records.ErrReadOnly)
	require.NoError(t, s.Append(context.Background(), fixture(2, 3)...))
	require.Equal(t, 2, ro.Len(), "read-only store is a snapshot")

	require.NoError(t, s.Close())
	s2, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err, "lock released by Close")
	require.Equal(t, 3, s2.Len())
	require.NoError(t, s2.Close())
}

func TestFileStoreReadOnly(t *testing.T) {
	dir := t.TempDir()
	_, err := records.OpenFile(filepath.Join(dir, "missing"), records.FileConfig{ReadOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist)

	path := filepath.Join(dir, "r.jsonl")
	data := writeStore(t, path, fixture(0, 2))
	torn := append(append([]byte(nil), data...), data[:25]...)
	require.NoError(t, os.WriteFile(path, torn, 0o644))
	ro, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	require.Equal(t, 2, ro.Len())
	require.Equal(t, int64(25), ro.TornBytes())
	require.NoError(t, ro.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, torn, after, "read-only open leaves the torn tail alone")
}

func TestFileConfigValidate(t *testing.T) {
	require.NoError(t, records.DefaultFileConfig().Validate())
	require.NoError(t, records.FileConfig{ReadOnly: true}.Validate())
	require.Error(t, records.FileConfig{Perm: 0o444}.Validate(), "writable store needs owner rw")
	require.Error(t, records.FileConfig{Perm: os.ModeDir | 0o644}.Validate())
	_, err := records.OpenFile(filepath.Join(t.TempDir(), "x"), records.FileConfig{})
	require.Error(t, err, "zero Perm is not quietly replaced")
}

func TestFileStoreNotUTF8(t *testing.T) {
	r := storetest.Record(1)
	r.Proposal.Text = "bad \xff byte"
	for _, s := range []records.Store{records.NewMemStore(), openFile(t, filepath.Join(t.TempDir(), "r"))} {
		require.ErrorIs(t, s.Append(context.Background(), r), records.ErrInvalid)
	}
}

func TestSeen(t *testing.T) {
	for name, s := range map[string]records.Store{
		"mem":  records.NewMemStore(),
		"file": openFile(t, filepath.Join(t.TempDir(), "r")),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			base := storetest.Record(0)
			base.Source = records.Real
			base.Seeds = []uint64{7}
			pred := base
			pred.Source = records.Predicted
			pred.Seeds = []uint64{8}
			infeasible := base
			infeasible.Seeds = []uint64{9, 10}
			infeasible.Infeasible = "diverged"
			infeasible.Gain, infeasible.Loss = 0, 0
			require.NoError(t, s.Append(ctx, pred, base, infeasible))

			// The key of a reformatted proposal finds the record.
			p := records.Proposal{Mechanism: "LR-SCALE", Params: map[string]string{"schedule": "COSINE", "value": ".5"}}
			for _, tt := range []struct {
				task string
				key  string
				seed uint64
				want bool
				inf  string
			}{
				{base.Task.ID, p.Key(), 7, true, ""},
				{base.Task.ID, p.Key(), 10, true, "diverged"},
				{base.Task.ID, p.Key(), 8, false, ""}, // predicted records are not runs
				{base.Task.ID, p.Key(), 11, false, ""},
				{"other", p.Key(), 7, false, ""},
				{base.Task.ID, records.Proposal{Mechanism: "lr-scale"}.Key(), 7, false, ""},
			} {
				r, ok, err := records.Seen(ctx, s, tt.task, tt.key, tt.seed)
				require.NoError(t, err)
				require.Equal(t, tt.want, ok, "Seen(%s, %s, %d)", tt.task, tt.key, tt.seed)
				if ok {
					require.True(t, r.HasSeed(tt.seed))
					require.Equal(t, tt.inf, r.Infeasible)
				}
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, _, err := records.Seen(cctx, s, base.Task.ID, p.Key(), 7)
			require.ErrorIs(t, err, context.Canceled)
		})
	}
}

// TestFileStoreCloseDuringAppends: Appends racing with Close either succeed
// (and their records are on disk) or fail with ErrClosed.
func TestFileStoreCloseDuringAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				err := s.Append(context.Background(), storetest.Record(w*100+i))
				if err != nil {
					if !errors.Is(err, records.ErrClosed) {
						t.Errorf("Append during Close = %v, want nil or ErrClosed", err)
					}
					return
				}
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
wait:
	for s.Len() < 20 {
		select {
		case <-done:
			break wait
		default:
			runtime.Gosched()
		}
	}
	require.NoError(t, s.Close())
	<-done
	require.ErrorIs(t, s.Close(), records.ErrClosed, "second Close")
	s = openFile(t, path)
	require.Equal(t, ok, s.Len(), "every successful Append is on disk, nothing else")
}

// TestFileStoreLongLine: a record longer than the reader's 1 MiB buffer
// reads back intact, also when it is the torn tail.
func TestFileStoreLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	big := storetest.Record(1)
	big.Proposal.Text = strings.Repeat("long rationale ✓ ", 200_000) // ≈ 3.6 MB
	want := []records.Record{storetest.Record(0), big, storetest.Record(2)}
	data := writeStore(t, path, want[:1], want[1:2], want[2:])
	s := openFile(t, path)
	if diff := cmp.Diff(want, scanAll(t, s), cmpOpts...); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	require.NoError(t, s.Close())

	lines := bytes.SplitAfter(data, []byte{'\n'})
	require.NoError(t, os.WriteFile(path, append(bytes.Clone(lines[0]), lines[1][:len(lines[1])-1]...), 0o644))
	s = openFile(t, path)
	require.Equal(t, int64(len(lines[1])-1), s.TornBytes())
	if diff := cmp.Diff(want[:1], scanAll(t, s), cmpOpts...); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
