package corpus_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/quick"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab/corpus"
)

func TestFoldTable(t *testing.T) {
	tests := []struct {
		in   byte
		want byte
	}{
		{'\n', 0}, {' ', 1}, {'!', 2}, {'A', 'A' - 31}, {'~', 95},
		{'\t', 1}, {'\r', 1}, {'\v', 1}, {'\f', 1},
		{0x00, 95}, {0x1b, 95}, {0x7f, 95}, {0x80, 95}, {0xc3, 95}, {0xff, 95},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, corpus.Fold(tt.in), "Fold(%#x)", tt.in)
	}
}

func TestFoldProperties(t *testing.T) {
	inRange := func(b byte) bool { return corpus.Fold(b) < corpus.Symbols }
	require.NoError(t, quick.Check(inRange, nil))
	roundTrip := func(b byte) bool {
		if b != '\n' && (b < 0x20 || b > 0x7e) {
			return true
		}
		return corpus.Unfold(corpus.Fold(b)) == b
	}
	require.NoError(t, quick.Check(roundTrip, nil))
	// Every symbol is reached by some byte: the alphabet really has 96 symbols.
	seen := map[byte]bool{}
	for b := 0; b < 256; b++ {
		seen[corpus.Fold(byte(b))] = true
	}
	require.Len(t, seen, corpus.Symbols)
}

func TestSplitInterleaves(t *testing.T) {
	// 25 symbols, blocks of 2, every 3rd block (indices 2, 5, 8, 11) to validation.
	sym := make([]byte, 25)
	for i := range sym {
		sym[i] = byte(i)
	}
	train, val := corpus.Split(sym, 2, 3)
	wantVal := []byte{4, 5, 10, 11, 16, 17, 22, 23}
	wantTrain := []byte{0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 18, 19, 20, 21, 24}
	if d := cmp.Diff(wantVal, val); d != "" {
		t.Errorf("val (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantTrain, train); d != "" {
		t.Errorf("train (-want +got):\n%s", d)
	}
}

func TestSplitProperties(t *testing.T) {
	f := func(sym []byte, bs, every uint8) bool {
		blockSize, valEvery := int(bs%17)+1, int(every%12)+2
		train, val := corpus.Split(sym, blockSize, valEvery)
		if len(train)+len(val) != len(sym) {
			return false
		}
		// Reassemble block by block.
		var got []byte
		ti, vi := 0, 0
		for i, lo := 0, 0; lo < len(sym); i, lo = i+1, lo+blockSize {
			n := min(blockSize, len(sym)-lo)
			if i%valEvery == valEvery-1 {
				got, vi = append(got, val[vi:vi+n]...), vi+n
			} else {
				got, ti = append(got, train[ti:ti+n]...), ti+n
			}
		}
		return bytes.Equal(got, sym)
	}
	require.NoError(t, quick.Check(f, nil))
}

func TestOpticksSplitIsSpreadOut(t *testing.T) {
	c, err := corpus.LoadOpticks(corpus.DefaultConfig())
	require.NoError(t, err)
	require.Equal(t, corpus.Opticks, c.Name)
	require.Greater(t, len(c.Symbols), 500_000)
	train, val := c.Split(corpus.DefaultConfig())
	require.InDelta(t, 0.1, float64(len(val))/float64(len(c.Symbols)), 0.005)
	require.Equal(t, len(c.Symbols), len(train)+len(val))
	// The book's last part is its list of Queries: a tail cut would put all
	// of them in validation; interleaving puts the first validation block
	// near the start of the book.
	require.Equal(t, c.Symbols[9*1024:10*1024], val[:1024])
	require.Equal(t, c.Symbols[19*1024:20*1024], val[1024:2048])
}

func TestGoSourceDeterministic(t *testing.T) {
	cfg := corpus.DefaultConfig()
	cfg.GoSourceBudget = 256 << 10
	a, err := corpus.LoadGoSource(cfg)
	require.NoError(t, err)
	b, err := corpus.Load(corpus.GoSource, cfg)
	require.NoError(t, err)
	require.Equal(t, a.Digest, b.Digest)
	require.LessOrEqual(t, len(a.Symbols), cfg.GoSourceBudget)
	require.Greater(t, len(a.Symbols), cfg.GoSourceBudget*9/10)
	require.Greater(t, a.Files, 10)
	require.Contains(t, string(corpus.UnfoldBytes(a.Symbols[:4096])), "package ")
}

func TestGoDoc(t *testing.T) {
	c, err := corpus.Load(corpus.GoDoc, corpus.DefaultConfig())
	require.NoError(t, err)
	require.Equal(t, corpus.KindMarkup, corpus.KindOf(c.Name))
	require.Equal(t, len(corpus.GoDocFiles), c.Files)
	require.Greater(t, len(c.Symbols), 200<<10)
	text := string(corpus.UnfoldBytes(c.Symbols[:64<<10]))
	require.Contains(t, text, "<h2")
	require.Contains(t, text, "The Go Programming Language Specification")
	require.Equal(t, corpus.KindProse, corpus.KindOf(corpus.Opticks))
	require.Equal(t, corpus.KindCode, corpus.KindOf(corpus.GoSource))
	require.Equal(t, "", corpus.KindOf("/some/file.txt"))
}

// Slice takes evenly spaced whole blocks: hand-checked indices, lengths,
// and the full split when the slice would not be smaller.
func TestSlice(t *testing.T) {
	train := make([]byte, 10*4+3) // 10 whole blocks of 4 and a tail
	for i := range train {
		train[i] = byte(i / 4) // symbol = block index
	}
	for _, tc := range []struct {
		n    int
		want []byte
	}{
		{4, []byte{0, 0, 0, 0}},                                      // k = 1: block 0
		{8, []byte{0, 0, 0, 0, 5, 5, 5, 5}},                          // k = 2: blocks 0, 5
		{9, []byte{0, 0, 0, 0, 3, 3, 3, 3, 6, 6, 6, 6}},              // k = 3: blocks 0, 3, 6
		{16, []byte{0, 0, 0, 0, 2, 2, 2, 2, 5, 5, 5, 5, 7, 7, 7, 7}}, // k = 4: 0, 2, 5, 7
	} {
		require.Equal(t, tc.want, corpus.Slice(train, tc.n, 4), "n=%d", tc.n)
	}
	for _, n := range []int{0, -1, 40, 43, 100} {
		require.Len(t, corpus.Slice(train, n, 4), len(train), "n=%d", n)
	}
	require.Panics(t, func() { corpus.Slice(train, 4, 0) })
}

func TestCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := corpus.File(filepath.Join(dir, "nope.txt"), corpus.DefaultConfig())
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
	require.ErrorIs(t, err, os.ErrNotExist)

	small := filepath.Join(dir, "small.txt")
	require.NoError(t, os.WriteFile(small, bytes.Repeat([]byte("tiny "), 100), 0o600))
	_, err = corpus.Load(small, corpus.DefaultConfig())
	require.ErrorIs(t, err, corpus.ErrCorpusTooSmall)

	cfg := corpus.DefaultConfig()
	cfg.GOROOT = filepath.Join(dir, "no-go-here")
	_, err = corpus.LoadOpticks(cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
	_, err = corpus.LoadGoSource(cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
	_, err = corpus.Load(corpus.GoDoc, cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
	require.ErrorContains(t, err, "doc/go_spec.html not found under GOROOT")

	_, err = corpus.Load("", cfg)
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)

	cfg = corpus.DefaultConfig()
	cfg.ValEvery = 1
	require.ErrorIs(t, cfg.Validate(), corpus.ErrInvalidConfig)
	_, err = corpus.FromBytes("x", make([]byte, 1<<20), cfg)
	require.ErrorIs(t, err, corpus.ErrInvalidConfig)

	// A user file of sufficient size loads and folds one symbol per byte.
	big := filepath.Join(dir, "big.txt")
	text := bytes.Repeat([]byte("The quick brown fox\tjumps over the lazy dog.\n"), 1000)
	require.NoError(t, os.WriteFile(big, text, 0o600))
	c, err := corpus.File(big, corpus.DefaultConfig())
	require.NoError(t, err)
	require.Len(t, c.Symbols, len(text))
	require.True(t, errors.Is(err, nil))
}

func FuzzFoldSplit(f *testing.F) {
	f.Add([]byte("hello\tworld\n\xc3\xa9"), 3, 4)
	f.Add([]byte{}, 1, 2)
	f.Fuzz(func(t *testing.T, raw []byte, bs, every int) {
		if bs < 1 || every < 2 || bs > 1<<12 || every > 100 {
			return
		}
		sym := corpus.FoldBytes(raw)
		for _, s := range sym {
			if s >= corpus.Symbols {
				t.Fatalf("symbol %d out of range", s)
			}
		}
		train, val := corpus.Split(sym, bs, every)
		if len(train)+len(val) != len(sym) {
			t.Fatalf("split lost symbols: %d+%d != %d", len(train), len(val), len(sym))
		}
	})
}

func ExampleFoldBytes() {
	sym := corpus.FoldBytes([]byte("Light\tis\n\xe2\x80\x94"))
	fmt.Println(sym)
	fmt.Printf("%q\n", corpus.UnfoldBytes(sym))
	// Output:
	// [45 74 72 73 85 1 74 84 0 95 95 95]
	// "Light is\n~~~"
}
