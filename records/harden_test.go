package records_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

// TestFileStoreTailGarbage: a final fragment that no interrupted Append
// could have written is corruption, never a torn tail: OpenFile fails with
// ErrCorrupt and the file, with every record in it, is left untouched.
func TestFileStoreTailGarbage(t *testing.T) {
	clean := writeStore(t, filepath.Join(t.TempDir(), "clean"), fixture(0, 2), fixture(2, 3))
	lines := bytes.SplitAfter(clean, []byte{'\n'})
	last := lines[2]
	junk := bytes.Repeat([]byte("junk, not a store "), 10<<20/18)
	tests := []struct {
		name string
		data []byte
	}{
		{"complete line, one junk byte, no newline", append(bytes.Join(lines[:2], nil), append(bytes.Clone(last[:len(last)-1]), 'x')...)},
		{"complete line, then a junk byte", append(bytes.Clone(clean), 'x')},
		{"complete line, then a record's start at the wrong batch position", append(bytes.Clone(clean), []byte("0123abcd 2/2 {\"ta")...)},
		{"complete line, then a control byte", append(bytes.Clone(clean), last[:20]...)},
		{"a config file without a final newline", []byte("listen = 127.0.0.1\nport = 8080")},
		{"a one-line config file", []byte("port = 8080")},
		{"10 MB of junk", junk},
	}
	tests[3].data = append(tests[3].data, '\x01')
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.jsonl")
			require.NoError(t, os.WriteFile(path, tt.data, 0o644))
			for _, cfg := range []records.FileConfig{records.DefaultFileConfig(), {ReadOnly: true}} {
				_, err := records.OpenFile(path, cfg)
				require.ErrorIs(t, err, records.ErrCorrupt)
				require.Less(t, len(err.Error()), 400, "the error quotes no junk")
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(tt.data, after), "a corrupt store is never modified")
		})
	}
}

// TestFileStoreNotRegular: a path naming a FIFO or a device (directly or
// through a symlink) is refused at once, neither hanging nor reading
// without bound.
func TestFileStoreNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(fifo, link))
	for _, path := range []string{fifo, zero, link, dir} {
		for _, cfg := range []records.FileConfig{records.DefaultFileConfig(), {ReadOnly: true}} {
			done := make(chan error, 1)
			go func() {
				s, err := records.OpenFile(path, cfg)
				if err == nil {
					s.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if path == dir {
					require.Error(t, err)
					continue
				}
				require.ErrorIs(t, err, records.ErrNotRegular, "%s read-only=%v", path, cfg.ReadOnly)
			case <-time.After(time.Minute):
				t.Fatalf("OpenFile(%s, read-only=%v) hangs", path, cfg.ReadOnly)
			}
		}
	}
}

// TestFileStoreMaxLineBytes: lines are bounded both ways: Append refuses a
// record whose line is too long, OpenFile reports a too long line as
// corruption without buffering it.
func TestFileStoreMaxLineBytes(t *testing.T) {
	require.Error(t, records.FileConfig{Perm: 0o644, MaxLineBytes: -1}.Validate())
	require.Error(t, records.FileConfig{Perm: 0o644, MaxLineBytes: 10}.Validate())
	require.Equal(t, records.DefaultMaxLineBytes, records.DefaultFileConfig().MaxLineBytes)

	path := filepath.Join(t.TempDir(), "r.jsonl")
	big := storetest.Record(1)
	big.Proposal.Text = strings.Repeat("x", 5000)
	writeStore(t, path, fixture(0, 1), []records.Record{big})

	small := records.DefaultFileConfig()
	small.MaxLineBytes = 4096
	_, err := records.OpenFile(path, small)
	require.ErrorIs(t, err, records.ErrCorrupt)
	require.Contains(t, err.Error(), "MaxLineBytes")

	path2 := filepath.Join(t.TempDir(), "r.jsonl")
	s, err := records.OpenFile(path2, small)
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.Append(context.Background(), big), records.ErrInvalid)
	require.NoError(t, s.Append(context.Background(), fixture(0, 1)...))
	require.Equal(t, 1, s.Len())
}

// TestFileStorePathChanged: the lock protects the path. Once the path is
// unlinked (and a second process may create and lock a new file there) or
// replaced, the first writer's Appends fail with ErrPathChanged instead of
// acknowledging records that no later open of the path would find.
func TestFileStorePathChanged(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"unlink", "replace"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.jsonl")
			s := openFile(t, path)
			require.NoError(t, s.Append(ctx, fixture(0, 2)...))
			switch how {
			case "unlink":
				require.NoError(t, os.Remove(path))
				other, err := records.OpenFile(path, records.DefaultFileConfig())
				require.NoError(t, err, "a second writer creates a new file at the path")
				defer other.Close()
			case "replace":
				tmp := path + ".new"
				writeStore(t, tmp, fixture(5, 6))
				require.NoError(t, os.Rename(tmp, path))
			}
			err := s.Append(ctx, fixture(2, 3)...)
			require.ErrorIs(t, err, records.ErrPathChanged)
			require.ErrorIs(t, s.Append(ctx, fixture(3, 4)...), records.ErrPathChanged, "the store stays broken")
			require.Equal(t, 2, s.Len(), "nothing acknowledged after the change")
		})
	}
}

// FuzzFileStoreOpen opens arbitrary file contents. Either OpenFile fails
// and the file is unchanged, or it succeeds, keeps a prefix of the file
// that reopens to the same records with no torn bytes, and only a tail of
// the kind an interrupted Append leaves was dropped.
func FuzzFileStoreOpen(f *testing.F) {
	dir := f.TempDir()
	clean := writeStore(f, filepath.Join(dir, "seed"), fixture(0, 2), fixture(2, 3))
	f.Add(clean)
	f.Add(clean[:len(clean)-7])
	f.Add(append(bytes.Clone(clean), 'x'))
	f.Add(append(bytes.Clone(clean), clean[:40]...))
	f.Add(append(bytes.Clone(clean), 0, 0, 0))
	f.Add([]byte("port = 8080"))
	f.Add([]byte{})
	// fsync on a shared disk can take seconds: fuzz on a memory file
	// system when there is one.
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir, err := os.MkdirTemp(base, "fuzz-store-")
		require.NoError(t, err)
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "r.jsonl")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		cfg := records.DefaultFileConfig()
		cfg.MaxLineBytes = 1 << 12
		s, err := records.OpenFile(path, cfg)
		after, rerr := os.ReadFile(path)
		require.NoError(t, rerr)
		if err != nil {
			require.ErrorIs(t, err, records.ErrCorrupt)
			require.Equal(t, data, after, "a refused file is never modified")
			return
		}
		defer s.Close()
		kept := int64(len(data)) - s.TornBytes()
		require.Equal(t, data[:kept], after)
		got := scanAll(t, s)
		require.NoError(t, s.Close())
		s2, err := records.OpenFile(path, cfg)
		require.NoError(t, err)
		defer s2.Close()
		require.Zero(t, s2.TornBytes())
		if diff := cmp.Diff(got, scanAll(t, s2), cmpOpts...); diff != "" {
			t.Fatalf("reopened (-first +second):\n%s", diff)
		}
	})
}

// TestProposalOutOfRange: a parameter that overflows float64 parses to ±Inf
// with a range error; it is not finite, so the proposal is invalid and no
// record holding it can be stored.
func TestProposalOutOfRange(t *testing.T) {
	for _, v := range []string{"1e999", "-1e999", "0x1p99999", " 1E400 ", "inf", "NaN"} {
		p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": v}}
		require.ErrorIs(t, p.Validate(), records.ErrInvalid, "value %q", v)
		r := storetest.Record(0)
		r.Proposal = p
		require.ErrorIs(t, records.NewMemStore().Append(context.Background(), r), records.ErrInvalid, "value %q", v)
	}
	for _, v := range []string{"1e-400", "1e308", "0x1p-2", "fast"} {
		p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": v}}
		require.NoError(t, p.Validate(), "value %q", v)
	}
}

// TestErrorsQuoteBoundedPrefix: an error about a megabyte of outside input
// quotes at most records.MaxExcerpt bytes of it.
func TestErrorsQuoteBoundedPrefix(t *testing.T) {
	huge := strings.Repeat("é", 1<<19) // 1 MiB
	bad := []records.Proposal{
		{Mechanism: huge, Params: map[string]string{" ": "1"}},
		{Mechanism: "m", Params: map[string]string{huge: "inf"}},
		{Mechanism: "m", Params: map[string]string{"a": huge + "1e999", "A": "2"}},
	}
	for _, p := range bad {
		err := p.Validate()
		require.ErrorIs(t, err, records.ErrInvalid)
		require.Less(t, len(err.Error()), 400, "%.200s", err)
	}
	r := storetest.Record(0)
	r.Task.ID = huge
	r.Source = "imagined"
	err := r.Validate()
	require.ErrorIs(t, err, records.ErrInvalid)
	require.Less(t, len(err.Error()), 400, "%.200s", err)
	_, err = records.NewEvidence(records.Record{Task: r.Task, Proposal: records.Proposal{Mechanism: huge}, Source: records.Predicted})
	require.ErrorIs(t, err, records.ErrNotEvidence)
	require.Less(t, len(err.Error()), 400, "%.200s", err)

	require.Equal(t, "short", records.Excerpt("short"))
	ex := records.Excerpt(huge)
	require.True(t, strings.HasPrefix(huge, strings.TrimSuffix(ex, "…(1048576 bytes)")), ex)
	require.LessOrEqual(t, len(strings.TrimSuffix(ex, "…(1048576 bytes)")), records.MaxExcerpt)
}
