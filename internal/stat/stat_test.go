package stat_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/internal/stat"
)

func TestFinite(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want bool
	}{
		{0, true}, {-3.5, true}, {math.MaxFloat64, true}, {math.SmallestNonzeroFloat64, true},
		{math.NaN(), false}, {math.Inf(1), false}, {math.Inf(-1), false},
	} {
		require.Equal(t, tc.want, stat.Finite(tc.x), "%g", tc.x)
		if p := stat.OrNil(tc.x); tc.want {
			require.Equal(t, tc.x, *p)
		} else {
			require.Nil(t, p, "%g", tc.x)
		}
	}
}

func TestMeanStd(t *testing.T) {
	for _, tc := range []struct {
		xs        []float64
		mean, std float64
	}{
		{[]float64{1, 2, 3}, 2, 1},                    // squares 1+0+1 over n−1 = 2: variance 1
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, 2.138}, // squares 32 over 7: sqrt(32/7) = 2.13809
		{[]float64{-1, 1}, 0, math.Sqrt2},             // squares 1+1 over 1: variance 2
		{[]float64{7}, 7, 0},                          // one value: std 0
	} {
		m, s := stat.MeanStd(tc.xs)
		require.InDelta(t, tc.mean, m, 1e-12, "%v", tc.xs)
		require.InDelta(t, tc.std, s, 1e-3, "%v", tc.xs)
	}
	m, s := stat.MeanStd(nil)
	require.True(t, math.IsNaN(m))
	require.Zero(t, s)
	require.True(t, math.IsNaN(stat.Mean(nil)))
	require.Equal(t, 2.5, stat.Mean([]float64{1, 4}))
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},                  // odd: the middle value
		{[]float64{4, 1, 3, 2}, 2.5},             // even: mean of 2 and 3
		{[]float64{5, 5, 1, 9}, 5},               // even, tied middle
		{[]float64{-1, math.Inf(1), 0}, 0},       // infinities sort to the ends
		{[]float64{math.Inf(-1), 1, 2, 10}, 1.5}, // even with −Inf
	} {
		in := slices.Clone(tc.xs)
		require.Equal(t, tc.want, stat.Median(in), "%v", tc.xs)
		require.Equal(t, tc.xs, in, "Median modified its argument")
	}
	require.True(t, math.IsNaN(stat.Median(nil)))
}

func TestRanks(t *testing.T) {
	for _, tc := range []struct {
		xs, want []float64
	}{
		{[]float64{5, 1, 5, 9}, []float64{2.5, 1, 2.5, 4}},            // one tie at ranks 2, 3
		{[]float64{3, 3, 3}, []float64{2, 2, 2}},                      // all tied: mean of 1, 2, 3
		{[]float64{2, 1, 2, 1, 2}, []float64{4, 1.5, 4, 1.5, 4}},      // ties at 1–2 and 3–5
		{[]float64{math.Inf(1), 0, math.Inf(-1)}, []float64{3, 2, 1}}, // infinities at the ends
		{[]float64{}, []float64{}},
	} {
		in := slices.Clone(tc.xs)
		require.Equal(t, tc.want, stat.Ranks(in), "%v", tc.xs)
		require.Equal(t, tc.xs, in)
	}
}

func TestPearsonSpearman(t *testing.T) {
	// a = (1, 2, 3), b = (2, 4, 7): centred (−1, 0, 1), (−7/3, −1/3, 8/3):
	// Σab = 15/3 = 5, Σa² = 2, Σb² = 114/9; r = 5/sqrt(228/9) = 15/sqrt(228).
	r, ok := stat.Pearson([]float64{1, 2, 3}, []float64{2, 4, 7})
	require.True(t, ok)
	require.InDelta(t, 15/math.Sqrt(228), r, 1e-12)
	for _, tc := range []struct {
		a, b []float64
		want float64
		ok   bool
	}{
		// Ranks (1,2,3,4) vs (1,3,2,4): Σd² = 2, ρ = 1 − 6·2/(4·15) = 0.8.
		{[]float64{1, 2, 3, 4}, []float64{10, 30, 20, 40}, 0.8, true},
		{[]float64{1, 2, 3}, []float64{3, 2, 1}, -1, true},
		{[]float64{math.Inf(-1), 0, 1}, []float64{-5, 0, 5}, 1, true},
		// Ranks (1.5, 1.5, 3) vs (1, 2, 3): centred (−.5, −.5, 1), (−1, 0, 1):
		// Σab = 1.5, Σa² = 1.5, Σb² = 2; ρ = 1.5/sqrt(3) = sqrt(3)/2.
		{[]float64{1, 1, 2}, []float64{1, 2, 3}, math.Sqrt(3) / 2, true},
		{[]float64{1, 1}, []float64{1, 2}, 0, false}, // constant side
		{[]float64{4}, []float64{2}, 0, false},
		{nil, nil, 0, false},
	} {
		rho, ok := stat.Spearman(tc.a, tc.b)
		require.Equal(t, tc.ok, ok, "%v %v", tc.a, tc.b)
		require.InDelta(t, tc.want, rho, 1e-12, "%v %v", tc.a, tc.b)
	}
	require.Panics(t, func() { stat.Spearman([]float64{1}, nil) })
	require.Panics(t, func() { stat.Pearson([]float64{1}, nil) })
}

// Spearman is invariant under strictly increasing maps of either side and
// lies in [−1, 1]; reversing one side negates it. Small integers keep the
// map x³ + x exact, so ties stay ties and distinct values distinct.
func TestSpearmanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 20).Draw(t, "n")
		ai := rapid.SliceOfN(rapid.IntRange(-20, 20), n, n).Draw(t, "a")
		bi := rapid.SliceOfN(rapid.IntRange(-20, 20), n, n).Draw(t, "b")
		a, b := make([]float64, n), make([]float64, n)
		for i := range ai {
			a[i], b[i] = float64(ai[i]), float64(bi[i])
		}
		rho, ok := stat.Spearman(a, b)
		if !ok {
			return
		}
		if rho < -1-1e-12 || rho > 1+1e-12 {
			t.Fatalf("rho %g outside [−1, 1]", rho)
		}
		ea := make([]float64, n)
		neg := make([]float64, n)
		for i, x := range a {
			ea[i] = x*x*x + x
			neg[i] = -x
		}
		rho2, _ := stat.Spearman(ea, b)
		if math.Abs(rho-rho2) > 1e-9 {
			t.Fatalf("monotone map changed rho: %g vs %g", rho, rho2)
		}
		rho3, _ := stat.Spearman(neg, b)
		if math.Abs(rho+rho3) > 1e-9 {
			t.Fatalf("reversal: %g vs %g", rho, rho3)
		}
	})
}
