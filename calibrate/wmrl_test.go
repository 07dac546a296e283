package calibrate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/stat"
)

func TestOnlineDebiaserLifecycle(t *testing.T) {
	// METHOD.md §2 Online Debiasing: identity until the first fit; refit
	// every refitEvery pairs; a failed fit keeps the old map.
	d, err := NewOnlineDebiaser(2, 2, 10, 4)
	require.NoError(t, err)
	require.True(t, d.Map().Identity())
	d.Push(0.05, 0)
	require.Equal(t, 0, d.Fits())
	require.Equal(t, 0.42, d.Apply(0.42), "identity before the first fit")
	d.Push(0.95, 1) // 2 pairs, 2 bins: first fit
	require.Equal(t, 1, d.Fits())
	first := d.Map()
	require.InDelta(t, 0.5, d.Apply(0.5), 1e-15) // (.05,0)–(.95,1)

	d.Push(0.55, 0.2) // only 1 new pair
	require.Equal(t, 1, d.Fits())
	d.Push(0.55, 0.2) // buffer [.05 .95 .55 .55]: 3 bins
	require.Equal(t, 2, d.Fits())
	second := d.Map()
	require.NotEqual(t, first, second)
	require.InDelta(t, 0.2, d.Apply(0.55), 1e-15)

	// Fill the buffer (capacity 4) with one bin: the fit fails, the map stays.
	for range 4 {
		d.Push(0.55, 0.9)
	}
	require.Equal(t, 2, d.Fits())
	require.Equal(t, second, d.Map())
	require.Equal(t, 4, d.Len())
	// The failed fit did not reset the count: the next pair that adds a bin refits.
	d.Push(0.05, 0)
	require.Equal(t, 3, d.Fits())
	x, y := d.Pairs()
	require.Equal(t, []float64{.55, .55, .55, .05}, x, "FIFO, oldest first")
	require.Equal(t, []float64{.9, .9, .9, 0}, y)

	// Non-finite pairs are rejected and not stored.
	d.Push(math.NaN(), 1)
	d.Push(1, math.Inf(1))
	require.Equal(t, 2, d.Rejected())
	require.Equal(t, 4, d.Len())
	require.True(t, d.Calibrated())
}

func TestOnlineDebiaserExact(t *testing.T) {
	// bins = 0: the exact isotonic fit; fewer than 2 distinct x fails.
	d, err := NewOnlineDebiaser(2, 1, 0, 0)
	require.NoError(t, err)
	d.Push(0.3, 1)
	d.Push(0.3, 2)
	require.Equal(t, 0, d.Fits())
	d.Push(0.9, 1)
	require.Equal(t, 1, d.Fits())
	require.Equal(t, Isotonic{X: []float64{0.3, 0.9}, Y: []float64{4.0 / 3, 4.0 / 3}}, d.Map())
	_, err = NewOnlineDebiaser(1, 1, -1, 0)
	require.ErrorIs(t, err, ErrConfig)
	require.EqualError(t, err, "calibrate: invalid config: debiaser bins = -1, want ≥ 0")
}

func TestOnlineDebiaserSchedule(t *testing.T) {
	// With minPairs 200 and refitEvery 64 the first fit is at pair 200 and
	// the next ones every 64 pairs.
	d, err := NewOnlineDebiaser(200, 64, 10, 5000)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 1))
	var fitsAt []int
	for i := 1; i <= 400; i++ {
		x := rng.Float64()
		before := d.Fits()
		d.Push(x, x*x)
		if d.Fits() > before {
			fitsAt = append(fitsAt, i)
		}
	}
	require.Equal(t, []int{200, 264, 328, 392}, fitsAt)
	require.Equal(t, 400, d.Len())
}

// biased mimics a world model that compresses and shifts the real score.
func biased(r float64, rng *rand.Rand, bias, noise float64) float64 {
	return math.Min(1, math.Max(0, bias+0.55*r+0.2*r*r+noise*rng.NormFloat64()))
}

func TestOnlineDebiaserRemovesBias(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	d, err := NewOnlineDebiaser(200, 64, 10, 1000)
	require.NoError(t, err)
	for range 600 {
		r := rng.Float64()
		d.Push(biased(r, rng, 0.25, 0.005), r)
	}
	require.True(t, d.Calibrated())
	// The centred squared residual (WMRL's bias diagnostic) drops by > 90%.
	x, y := d.Pairs()
	before, after := centredSq(x, y, Isotonic{}), centredSq(x, y, d.Map())
	require.Less(t, after, 0.1*before)
	// The map follows drift.
	at := d.Apply(0.5)
	fits := d.Fits()
	for range 1500 {
		r := rng.Float64()
		d.Push(biased(r, rng, 0.6, 0.05), r)
	}
	require.Greater(t, d.Fits(), fits)
	require.NotEqual(t, at, d.Apply(0.5))
	require.Equal(t, 1000, d.Len())
}

func centredSq(x, y []float64, f Isotonic) float64 {
	yh := make([]float64, len(x))
	for i := range x {
		yh[i] = f.Apply(x[i])
	}
	my, mh := stat.Mean(y), stat.Mean(yh)
	var s float64
	for i := range x {
		r := (yh[i] - mh) - (y[i] - my)
		s += r * r
	}
	return s / float64(len(x))
}

func TestAnchorCount(t *testing.T) {
	// METHOD.md §2: about 10% of the groups; round half to even.
	tests := []struct {
		groups   int
		fraction float64
		min, max int
		want     int
	}{
		{256, 0.10, 1, 0, 26}, // 25.6
		{25, 0.10, 1, 0, 2},   // 2.5 → 2 (even)
		{15, 0.10, 1, 0, 2},   // 1.5 → 2 (even)
		{35, 0.10, 1, 0, 4},   // 3.5 → 4 (even)
		{5, 0.10, 1, 0, 1},    // 0.5 → 0, floor 1
		{5, 0.10, 0, 0, 0},
		{3, 0.10, 5, 0, 3},      // never more than the groups
		{1000, 0.10, 1, 50, 50}, // cap
		{1000, 0.10, 1, 0, 100},
		{0, 0.10, 1, 0, 0},
		{-3, 0.10, 1, 0, 0},
		{10, math.NaN(), 1, 0, 1},
		// Float residue must not decide a tie: 0.7·45 is 31.499999999999996
		// in float64 but stands for 31.5 → 32 (even); 0.7·85 = 59.5 → 60.
		{45, 0.7, 0, 0, 32},
		{85, 0.7, 0, 0, 60},
		{55, 0.3, 0, 0, 16}, // 16.5 → 16 (even)
		{44, 0.7, 0, 0, 31}, // 30.8, no tie
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, AnchorCount(tt.groups, tt.fraction, tt.min, tt.max), "%+v", tt)
	}
}

func TestDisagreement(t *testing.T) {
	// METHOD.md §2: D = mean(((d−d̄)−(s−s̄))²)/var(s), population variance.
	// d centred [−.4 0 .4], s centred [−.3 0 .3]: mean sq .02/3, var .06 → 1/9.
	d, ok := Disagreement([]float64{.1, .5, .9}, []float64{.2, .5, .8})
	require.True(t, ok)
	require.InDelta(t, 1.0/9, d, 1e-12)
	d, ok = Disagreement([]float64{.1, .4, .9}, []float64{.1, .4, .9})
	require.True(t, ok)
	require.InDelta(t, 0, d, 1e-15)
	// A constant offset does not count.
	d, _ = Disagreement([]float64{1.1, 1.4, 1.9}, []float64{.1, .4, .9})
	require.InDelta(t, 0, d, 1e-12)
	// Reversed order: centred d = −s → 4·var/var = 4.
	d, _ = Disagreement([]float64{.9, .5, .1}, []float64{.1, .5, .9})
	require.InDelta(t, 4, d, 1e-12)
	for _, c := range []struct{ p, r []float64 }{
		{[]float64{.3, .5, .9}, []float64{.4, .4, .4}}, // var(s) = 0
		{[]float64{1, 2}, []float64{0, 1e-5}},          // var(s) = 2.5e-11 < 1e-9
		{nil, nil},
		{[]float64{1, math.NaN()}, []float64{0, 1}},
	} {
		_, ok := Disagreement(c.p, c.r)
		require.False(t, ok, "%v %v", c.p, c.r)
	}
	require.Panics(t, func() { Disagreement([]float64{1}, nil) })
}

func TestWeighter(t *testing.T) {
	// METHOD.md §2 Inverse-Variance Denoising, WMRL's weighter.
	w := NewWeighter(8, 4, 4, 2)
	require.Equal(t, 1.0, w.Weight())
	for range 3 {
		w.Observe(0.5)
		require.Equal(t, 1.0, w.Weight(), "1 before warm-up")
	}
	w.Observe(0.5)
	c, ok := w.Scale()
	require.True(t, ok)
	require.InDelta(t, 2, c, 1e-12) // (2 − 1)/0.5
	require.InDelta(t, 2, w.Weight(), 1e-12)
	// α = 1 − 0.5^(1/8); D = 0.5 + α·0.4; weight = 1 + 2·D.
	alpha := 1 - math.Pow(0.5, 1.0/8)
	w.Observe(0.9)
	require.InDelta(t, 0.5+alpha*0.4, w.Disagreement(), 1e-12)
	require.InDelta(t, 1+2*(0.5+alpha*0.4), w.Weight(), 1e-12)
	c2, _ := w.Scale()
	require.Equal(t, c, c2, "c is frozen")
	// Ignored inputs.
	n := w.Observations()
	w.Observe(math.NaN())
	w.Observe(-1)
	w.Observe(math.Inf(1))
	require.Equal(t, n, w.Observations())
	require.False(t, w.ObserveGroup([]float64{.3, .5}, []float64{.4, .4}))
	require.Equal(t, n, w.Observations())
	require.True(t, w.ObserveGroup([]float64{.1, .5, .9}, []float64{.2, .5, .8}))
	require.Equal(t, n+1, w.Observations())

	// Clipped to [1, maxWeight].
	w = NewWeighter(2, 2, 3, 2)
	w.Observe(0.1)
	w.Observe(0.1)
	for range 50 {
		w.Observe(100)
	}
	require.Equal(t, 3.0, w.Weight())
	for range 200 {
		w.Observe(0)
	}
	require.Equal(t, 1.0, w.Weight())

	// Zero disagreement through warm-up delays the freeze.
	w = NewWeighter(64, 2, 4, 2)
	w.Observe(0)
	w.Observe(0)
	_, ok = w.Scale()
	require.False(t, ok)
	w.Observe(0.64)
	c, ok = w.Scale()
	require.True(t, ok)
	require.InDelta(t, 2, w.Weight(), 1e-12)
	require.InDelta(t, 1/w.Disagreement(), c, 1e-12)
}
