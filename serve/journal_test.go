package serve

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeJournal writes n entries to a fresh journal and returns its path
// and payloads.
func writeJournal(t *testing.T, n int) (string, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.log")
	j, err := readJournal(path, 0, func(uint64, []byte) error { return nil })
	require.NoError(t, err)
	var want []string
	for i := range n {
		p := fmt.Sprintf(`{"op":"step","step":%d,"text":"<%s>"}`, i+1, bytes.Repeat([]byte{'a' + byte(i)}, i))
		require.NoError(t, j.append([]byte(p)))
		want = append(want, p)
	}
	require.NoError(t, j.close())
	return path, want
}

func replayJournal(path string, after uint64) ([]string, *journal, error) {
	var got []string
	j, err := readJournal(path, after, func(_ uint64, p []byte) error {
		got = append(got, string(p))
		return nil
	})
	if j != nil {
		j.close()
	}
	return got, j, err
}

// TestJournalRefusesDamage flips each bit pattern at every byte of a small
// journal: a restart either refuses with an error naming the offset, or
// (only when the flip is the final newline's, which an entry's length
// frames) applies exactly what was acknowledged. Damage is never applied
// and never drops an acknowledged entry.
func TestJournalRefusesDamage(t *testing.T) {
	path, want := writeJournal(t, 4)
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	refused := 0
	for off := range orig {
		for _, mask := range []byte{0x01, 0x20, 0x80, 0xff} {
			b := bytes.Clone(orig)
			b[off] ^= mask
			require.NoError(t, os.WriteFile(path, b, 0o600))
			got, _, err := replayJournal(path, 0)
			if err != nil {
				var je *JournalError
				require.ErrorAs(t, err, &je)
				require.ErrorIs(t, err, ErrState)
				require.LessOrEqual(t, je.Offset, int64(off))
				refused++
				continue
			}
			require.Equal(t, want, got, "flip %#x at byte %d of %d accepted", mask, off, len(orig))
		}
	}
	require.Greater(t, refused, 4*len(orig)-8, "all but the final newline's flips are refused")
}

// TestJournalTornTail cuts the journal at every length: the whole entries
// before the cut are applied, the cut entry is dropped and the file cut
// back, and an entry missing only its newline is applied and repaired.
func TestJournalTornTail(t *testing.T) {
	path, want := writeJournal(t, 3)
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	ends := []int{}
	for i, c := range orig {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	for cut := range len(orig) + 1 {
		require.NoError(t, os.WriteFile(path, orig[:cut], 0o600))
		got, j, err := replayJournal(path, 0)
		require.NoError(t, err, "cut at %d", cut)
		whole := 0
		for _, e := range ends {
			if e <= cut || e-1 == cut { // whole, or whole but its newline
				whole++
			}
		}
		require.Equal(t, want[:whole], append([]string{}, got...), "cut at %d", cut)
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		if whole == 0 {
			require.Empty(t, after)
		} else {
			require.Equal(t, orig[:ends[whole-1]], after, "cut at %d: the file is its whole entries", cut)
		}
		require.EqualValues(t, len(after), j.size)
	}
}

// TestJournalSkipsWhatTheCheckpointCovers: entries at or below the
// checkpoint's number are not applied again; a gap after it is damage.
func TestJournalSkipsWhatTheCheckpointCovers(t *testing.T) {
	path, want := writeJournal(t, 4)
	got, j, err := replayJournal(path, 2)
	require.NoError(t, err)
	require.Equal(t, want[2:], got)
	require.EqualValues(t, 4, j.seq)
	got, j, err = replayJournal(path, 9)
	require.NoError(t, err)
	require.Empty(t, got)
	require.EqualValues(t, 9, j.seq)

	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	second := bytes.IndexByte(orig, '\n') + 1
	require.NoError(t, os.WriteFile(path, orig[second:], 0o600)) // entry 1 lost
	_, _, err = replayJournal(path, 0)
	var je *JournalError
	require.ErrorAs(t, err, &je)
	require.Contains(t, je.Reason, "missing")
}

// TestJournalFullDisk: a write the disk cuts short is cut back, the
// request fails, and the entries acknowledged after it survive a restart.
func TestJournalFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.log")
	j, err := readJournal(path, 0, func(uint64, []byte) error { return nil })
	require.NoError(t, err)
	require.NoError(t, j.append([]byte(`{"op":"a"}`)))
	writeFault = func(n int) (int, bool) { return n / 2, true }
	err = j.append([]byte(`{"op":"lost"}`))
	writeFault = nil
	require.Error(t, err)
	require.Nil(t, j.broken, "the partial entry was cut back")
	for _, p := range []string{`{"op":"b"}`, `{"op":"c"}`, `{"op":"d"}`} {
		require.NoError(t, j.append([]byte(p)))
	}
	require.NoError(t, j.close())
	got, _, err := replayJournal(path, 0)
	require.NoError(t, err)
	require.Equal(t, []string{`{"op":"a"}`, `{"op":"b"}`, `{"op":"c"}`, `{"op":"d"}`}, got)
}

// TestCheckpointCoversItsJournal stops a service between the checkpoint's
// rename and the removal of the entries it covers: the restart skips them
// instead of applying them twice.
func TestCheckpointCoversItsJournal(t *testing.T) {
	path, _ := writeJournal(t, 3)
	var applied int
	j, err := readJournal(path, 3, func(uint64, []byte) error { applied++; return nil })
	require.NoError(t, err)
	require.Zero(t, applied)
	require.NoError(t, j.append([]byte(`{"op":"after"}`)))
	require.NoError(t, j.close())
	got, _, err := replayJournal(path, 3)
	require.NoError(t, err)
	require.Equal(t, []string{`{"op":"after"}`}, got)
}

func FuzzReadJournal(f *testing.F) {
	f.Add(encodeEntry(1, []byte(`{"op":"step","step":1}`)))
	f.Add(append(encodeEntry(1, []byte(`{}`)), encodeEntry(2, []byte(`{"a":1}`))...))
	f.Add([]byte("1 2 00000000 00000000000000000000000000000000 {}\n"))
	f.Add([]byte("999999999999999999999 -1 x y z\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "j")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		var got [][]byte
		j, err := readJournal(path, 0, func(_ uint64, p []byte) error { got = append(got, bytes.Clone(p)); return nil })
		if err != nil {
			require.True(t, errors.Is(err, ErrState))
			return
		}
		defer j.close()
		// What was applied re-encodes to the file's whole entries.
		re := []byte{}
		for i, p := range got {
			re = append(re, encodeEntry(uint64(i)+1+(j.seq-uint64(len(got))), p)...)
		}
		after, _ := os.ReadFile(path)
		require.Equal(t, re, append([]byte{}, after...))
	})
}

// TestJournalSetAside: entries set aside for a checkpoint are read before
// the journal, numbered on without a gap, whatever the checkpoint covers
// (none of them, the entries aside, or those and some after); once
// dropped, the journal alone follows the checkpoint; entries aside cut
// short, or a gap between the two files, refuse.
func TestJournalSetAside(t *testing.T) {
	path, want := writeJournal(t, 3)
	j, err := readJournal(path, 0, func(uint64, []byte) error { return nil })
	require.NoError(t, err)
	require.NoError(t, j.rotate())
	require.True(t, j.aside)
	require.NoError(t, j.rotate(), "entries already aside stay there")
	for _, p := range []string{`{"op":"d"}`, `{"op":"e"}`} {
		require.NoError(t, j.append([]byte(p)))
		want = append(want, p)
	}
	require.NoError(t, j.close())
	for _, after := range []uint64{0, 2, 3, 4} {
		got, j, err := replayJournal(path, after)
		require.NoError(t, err, "after %d", after)
		require.Equal(t, want[after:], got, "after %d", after)
		require.Equal(t, uint64(5), j.seq)
		require.True(t, j.aside)
	}
	aside, err := os.ReadFile(asidePath(path))
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(asidePath(path), aside[:len(aside)-3], 0o600))
	_, _, err = replayJournal(path, 0)
	var je *JournalError
	require.ErrorAs(t, err, &je, "entries aside cut short")
	require.Equal(t, asidePath(path), je.Path)

	first := bytes.IndexByte(aside, '\n') + 1
	require.NoError(t, os.WriteFile(asidePath(path), aside[:first], 0o600))
	_, _, err = replayJournal(path, 0)
	require.ErrorAs(t, err, &je, "entries 2 and 3 missing between the files")
	require.Equal(t, path, je.Path)
	require.Contains(t, je.Reason, "entry 4 follows entry 1")

	require.NoError(t, os.WriteFile(asidePath(path), aside, 0o600))
	j, err = readJournal(path, 3, func(uint64, []byte) error { return nil })
	require.NoError(t, err)
	require.NoError(t, j.dropAside())
	require.NoError(t, j.close())
	_, err = os.Stat(asidePath(path))
	require.ErrorIs(t, err, os.ErrNotExist)
	got, j, err := replayJournal(path, 3)
	require.NoError(t, err)
	require.Equal(t, want[3:], got)
	require.False(t, j.aside)
}
