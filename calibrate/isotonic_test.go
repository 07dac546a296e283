package calibrate

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
)

func TestIsotonicApply(t *testing.T) {
	require.Equal(t, 0.42, Isotonic{}.Apply(0.42)) // zero value is the identity
	require.True(t, Isotonic{}.Identity())
	one := Isotonic{X: []float64{1}, Y: []float64{5}}
	require.Equal(t, 5.0, one.Apply(-3))
	require.Equal(t, 5.0, one.Apply(7))
	f := Isotonic{X: []float64{0, 1, 3}, Y: []float64{0, 2, 3}}
	for _, c := range []struct{ x, want float64 }{{-1, 0}, {0, 0}, {0.5, 1}, {1, 2}, {2, 2.5}, {3, 3}, {9, 3}} {
		require.InDelta(t, c.want, f.Apply(c.x), 1e-15, "x=%g", c.x)
	}
	require.True(t, math.IsNaN(f.Apply(math.NaN())))
	require.Panics(t, func() { Isotonic{X: []float64{1, 2}, Y: []float64{1}}.Apply(1) })
}

func TestFitIsotonicHandDerived(t *testing.T) {
	// METHOD.md §2 Online Debiasing: weighted PAVA, non-decreasing.
	nan := math.NaN()
	tests := []struct {
		name    string
		x, y, w []float64
		want    Isotonic
	}{
		{"monotone stays", []float64{1, 2, 3}, []float64{1, 2, 3}, nil, Isotonic{[]float64{1, 2, 3}, []float64{1, 2, 3}}},
		{"one violation", []float64{1, 2, 3}, []float64{1, 3, 2}, nil, Isotonic{[]float64{1, 2, 3}, []float64{1, 2.5, 2.5}}},
		// (3·1 + 2·3)/4 = 2.25.
		{"weighted", []float64{1, 2, 3}, []float64{1, 3, 2}, []float64{1, 1, 3}, Isotonic{[]float64{1, 2, 3}, []float64{1, 2.25, 2.25}}},
		{"unsorted input", []float64{3, 1, 2}, []float64{2, 1, 3}, nil, Isotonic{[]float64{1, 2, 3}, []float64{1, 2.5, 2.5}}},
		// x = 1 pools to 2 (weight 2), then 0 at x = 2 violates: 4/3.
		{"tied x", []float64{1, 1, 2}, []float64{3, 1, 0}, nil, Isotonic{[]float64{1, 2}, []float64{4.0 / 3, 4.0 / 3}}},
		{"decreasing pools all", []float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, nil, Isotonic{[]float64{1, 2, 3, 4}, []float64{2.5, 2.5, 2.5, 2.5}}},
		{"skips bad pairs", []float64{1, nan, 2, 3, 4}, []float64{1, 5, nan, 2, 9}, []float64{1, 1, 1, 1, 0}, Isotonic{[]float64{1, 3}, []float64{1, 2}}},
		{"no data", nil, nil, nil, Isotonic{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FitIsotonic(tt.x, tt.y, tt.w)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-15), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("FitIsotonic mismatch (-want +got):\n%s", diff)
			}
		})
	}
	require.Panics(t, func() { FitIsotonic([]float64{1}, nil, nil) })
	require.Panics(t, func() { FitIsotonic([]float64{1}, []float64{1}, []float64{1, 2}) })
}

// slowPAVA is the obvious reference: pool equal x, then repeatedly merge the
// first adjacent pair of blocks that violates monotonicity until none does.
func slowPAVA(x, y, w []float64) Isotonic {
	type pt struct{ x, y, w float64 }
	var pts []pt
	for i := range x {
		pts = append(pts, pt{x[i], y[i], w[i]})
	}
	sort.SliceStable(pts, func(a, b int) bool { return pts[a].x < pts[b].x })
	type block struct {
		xs   []float64
		v, w float64
	}
	var bl []block
	for _, p := range pts {
		if len(bl) > 0 && bl[len(bl)-1].xs[0] == p.x {
			b := &bl[len(bl)-1]
			b.v = (b.v*b.w + p.y*p.w) / (b.w + p.w)
			b.w += p.w
			continue
		}
		bl = append(bl, block{[]float64{p.x}, p.y, p.w})
	}
	for {
		merged := false
		for i := 0; i+1 < len(bl); i++ {
			if bl[i].v > bl[i+1].v {
				a, b := bl[i], bl[i+1]
				nb := block{append(append([]float64{}, a.xs...), b.xs...), (a.v*a.w + b.v*b.w) / (a.w + b.w), a.w + b.w}
				bl = append(append(bl[:i:i], nb), bl[i+2:]...)
				merged = true
				break
			}
		}
		if !merged {
			break
		}
	}
	var f Isotonic
	for _, b := range bl {
		for _, xv := range b.xs {
			f.X = append(f.X, xv)
			f.Y = append(f.Y, b.v)
		}
	}
	return f
}

func TestFitIsotonicMatchesSlowPAVA(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 300 {
		n := 1 + rng.IntN(60)
		x, y, w := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range x {
			x[i] = float64(rng.IntN(25)) / 4 // ties
			y[i] = x[i]*0.3 + rng.NormFloat64()
			w[i] = 0.1 + rng.Float64()*3
		}
		got, want := FitIsotonic(x, y, w), slowPAVA(x, y, w)
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-12, 1e-12)); diff != "" {
			t.Fatalf("trial %d: FitIsotonic differs from slow PAVA (-want +got):\n%s", trial, diff)
		}
		for i := 1; i < len(got.X); i++ {
			require.Less(t, got.X[i-1], got.X[i], "knots strictly increasing")
			require.LessOrEqual(t, got.Y[i-1], got.Y[i], "values non-decreasing")
		}
		for k := range 50 {
			a, b := rng.Float64()*8-1, rng.Float64()*8-1
			if a > b {
				a, b = b, a
			}
			require.LessOrEqual(t, got.Apply(a), got.Apply(b)+1e-12, "trial %d probe %d", trial, k)
		}
		// Equal weights: nil w matches w of ones.
		ones := make([]float64, n)
		for i := range ones {
			ones[i] = 1
		}
		require.Equal(t, FitIsotonic(x, y, ones), FitIsotonic(x, y, nil))
	}
}

func TestFitBinnedReference(t *testing.T) {
	// METHOD.md §2 Online Debiasing, WMRL's binned variant: 10 bins.
	x := []float64{.05, .15, .12, .25, .35, .95}
	y := []float64{.1, .3, .5, .2, .4, .9}
	f := FitBinned(x, y, 10)
	want := Isotonic{X: []float64{.05, .135, .25, .35, .95}, Y: []float64{.1, 1.0 / 3, 1.0 / 3, .4, .9}}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
		t.Errorf("FitBinned knots (-want +got):\n%s", diff)
	}
	probe := []float64{-1, 0, .05, .1, .2, .5, .95, 1, 2}
	wantY := []float64{.1, .1, .1, 0.2372549019607843, 0.3333333333333333, .525, .9, .9, .9}
	for i, p := range probe {
		require.InDelta(t, wantY[i], f.Apply(p), 1e-15, "Apply(%g)", p)
	}
}

func TestFitBinnedEdges(t *testing.T) {
	// Edges are i·(1/bins): 3·0.1 = 0.30000000000000004, so x = 0.3 falls in
	// bin 2 with 0.25, not in bin 3 with 0.35.
	f := FitBinned([]float64{.25, .3, .35}, []float64{0, 1, 2}, 10)
	want := Isotonic{X: []float64{.275, .35}, Y: []float64{.5, 2}}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Outside [0, 1]: clamped to 0 and 1, into the end bins (METHOD.md
	// §2). Bin means .5, .3, .1 pool to .3.
	f = FitBinned([]float64{-1, .5, 2}, []float64{.5, .3, .1}, 10)
	want = Isotonic{X: []float64{0, .5, 1}, Y: []float64{.3, .3, .3}}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A clamped score shares its end bin: bin 0 holds x 0 (from −5) and
	// .06, mean x .03, mean y (0 + .2)/2 = .1; bin 9 holds 1 (from 7) and
	// .9, mean x .95, mean y (1 + .8)/2 = .9. Apply(.5) interpolates:
	// .1 + .8·(.47/.92).
	f = FitBinned([]float64{-5, .06, .9, 7}, []float64{0, .2, .8, 1}, 10)
	want = Isotonic{X: []float64{.03, .95}, Y: []float64{.1, .9}}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	require.InDelta(t, .1+.8*(.47/.92), f.Apply(.5), 1e-15)
	require.Equal(t, .1, f.Apply(-5))
	require.Equal(t, .9, f.Apply(7))
	// x = 1 is in the last bin, with 0.95.
	f = FitBinned([]float64{0, 1, .95}, []float64{0, 1, 0.5}, 10)
	want = Isotonic{X: []float64{0, .975}, Y: []float64{0, .75}}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Fewer than 2 populated bins: identity, not ok.
	for _, xs := range [][]float64{nil, {.5}, {.51, .52, .53}} {
		g, ok := TryFitBinned(xs, make([]float64, len(xs)), 10)
		require.False(t, ok)
		require.True(t, g.Identity())
	}
	// Non-finite pairs are ignored.
	g, ok := TryFitBinned([]float64{.1, math.NaN(), .9}, []float64{0, 1, math.Inf(1)}, 10)
	require.False(t, ok)
	require.True(t, g.Identity())
	require.Panics(t, func() { FitBinned([]float64{1}, nil, 10) })
	require.Panics(t, func() { FitBinned(nil, nil, 0) })
}

func TestBinOf(t *testing.T) {
	for _, bins := range []int{1, 3, 7, 10, 64} {
		width := 1 / float64(bins)
		rng := rand.New(rand.NewPCG(uint64(bins), 1))
		for range 2000 {
			x := rng.Float64()*1.4 - 0.2
			if rng.IntN(4) == 0 {
				x = float64(rng.IntN(bins+1)) * width // on an edge
			}
			// Reference: largest i in [0, bins) with x ≥ i·width.
			want := 0
			for i := range bins {
				if x >= float64(i)*width {
					want = i
				}
			}
			require.Equal(t, want, binOf(x, bins, width), "x=%v bins=%d", x, bins)
		}
	}
}
