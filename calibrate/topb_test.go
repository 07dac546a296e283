package calibrate

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestTopB(t *testing.T) {
	// METHOD.md §1 On-policy calibration: greedy top-B_u, highest first,
	// ties by lower index.
	nan := math.NaN()
	tests := []struct {
		name   string
		scores []float64
		b      int
		want   []int
	}{
		{"style example", []float64{0.2, 1.5, -0.3, 0.9}, 2, []int{1, 3}},
		{"ties by index", []float64{1, 2, 2, 1, 2}, 4, []int{1, 2, 4, 0}},
		{"b above n", []float64{3, 1, 2}, 5, []int{0, 2, 1}},
		{"b zero", []float64{3, 1}, 0, []int{}},
		{"b negative", []float64{3, 1}, -1, []int{}},
		{"empty", nil, 3, []int{}},
		{"nan last", []float64{nan, -1, math.Inf(-1), nan}, 4, []int{1, 2, 0, 3}},
		{"signed zeros tie", []float64{0, math.Copysign(0, -1)}, 2, []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, TopB(tt.scores, tt.b))
		})
	}
}

// refTopB is the sort-based reference: stable sort of indices by
// descending score, NaN last.
func refTopB(scores []float64, b int) []int {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) float64 {
		if math.IsNaN(scores[i]) {
			return math.Inf(-1)
		}
		return scores[i]
	}
	sort.SliceStable(idx, func(a, c int) bool {
		ka, kc := key(idx[a]), key(idx[c])
		if ka != kc {
			return ka > kc
		}
		// −Inf ranks above NaN.
		return !math.IsNaN(scores[idx[a]]) && math.IsNaN(scores[idx[c]])
	})
	if b < 0 {
		b = 0
	}
	return idx[:min(b, len(idx))]
}

func TestTopBMatchesSortReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := []float64{-2, -1, 0, 0.5, 1, 3, math.Inf(1), math.Inf(-1), math.NaN()}
		scores := rapid.SliceOfN(rapid.SampledFrom(vals), 0, 40).Draw(t, "scores")
		b := rapid.IntRange(-1, 45).Draw(t, "b")
		got, want := TopB(scores, b), refTopB(scores, b)
		if len(got) != len(want) {
			t.Fatalf("TopB(%v, %d) = %v, want %v", scores, b, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("TopB(%v, %d) = %v, want %v", scores, b, got, want)
			}
		}
	})
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		s := make([]float64, rng.IntN(300))
		for i := range s {
			s[i] = math.Round(rng.NormFloat64()*4) / 2 // many ties
		}
		b := rng.IntN(len(s) + 2)
		require.Equal(t, refTopB(s, b), TopB(s, b))
	}
}

func TestTopBWith(t *testing.T) {
	scores := []float64{9, 8, 7, 6, 5, 4}
	key := []string{"x", "x", "y", "", "", "z"}
	tests := []struct {
		name string
		b    int
		opt  Options
		want []int
	}{
		{"no options", 3, Options{}, []int{0, 1, 2}},
		{"unique keys", 3, Options{Key: key, UniqueKeys: true}, []int{0, 2, 3}},
		{"empty keys never collide", 5, Options{Key: key, UniqueKeys: true}, []int{0, 2, 3, 4, 5}},
		{"runs out", 10, Options{Key: key, UniqueKeys: true}, []int{0, 2, 3, 4, 5}},
		{"keys ignored unless unique", 2, Options{Key: key}, []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, TopBWith(scores, tt.b, tt.opt))
		})
	}
	require.Panics(t, func() { TopBWith(scores, 2, Options{Key: []string{"a"}, UniqueKeys: true}) })
}
