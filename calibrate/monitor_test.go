package calibrate

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestDecompose(t *testing.T) {
	// METHOD.md §1 On-policy calibration: J̄ = Δ_M + Ĵ_M.
	b := Decompose([][]float64{{3, 3}, {4}}, [][]float64{{1, 2}, {0}})
	require.Equal(t, 3, b.N)
	require.InDelta(t, 10.0/3, b.JHat, 1e-15)
	require.InDelta(t, 1, b.JBar, 1e-15)
	require.InDelta(t, 1-10.0/3, b.Delta, 1e-15)
	require.InDelta(t, 10.0/3-1, b.Gap(), 1e-15)
	require.InDelta(t, 10.0/3-1, Gap([][]float64{{3, 3}, {4}}, [][]float64{{1, 2}, {0}}), 1e-15)
	// Non-finite pairs are left out.
	b = Decompose([][]float64{{1, math.NaN()}}, [][]float64{{0, 5}})
	require.Equal(t, 1, b.N)
	require.InDelta(t, -1, b.Delta, 1e-15)
	b = Decompose(nil, nil)
	require.True(t, math.IsNaN(b.Delta))
	require.Panics(t, func() { Decompose([][]float64{{1}}, nil) })
	require.Panics(t, func() { Decompose([][]float64{{1}}, [][]float64{{1, 2}}) })
}

func TestAdvantageCosine(t *testing.T) {
	// Centred pred [−1 0 1], real [−1 1 0]: dot 1, norms √2·√2 → 0.5.
	require.InDelta(t, 0.5, AdvantageCosine([][]float64{{1, 2, 3}}, [][]float64{{1, 3, 2}}), 1e-15)
	// Offsets per group do not matter; groups are concatenated:
	// group 2 centred pred [1 −1], real [−1 1]: dot −2, adds 2 to each norm² → (1−2)/4.
	require.InDelta(t, -0.25, AdvantageCosine(
		[][]float64{{1, 2, 3}, {10, 8}}, [][]float64{{1, 3, 2}, {-5, -3}}), 1e-15)
	require.InDelta(t, 1, AdvantageCosine([][]float64{{1, 2}}, [][]float64{{5, 7}}), 1e-15)
	// Undefined: flat groups or singletons.
	require.True(t, math.IsNaN(AdvantageCosine([][]float64{{1, 1}}, [][]float64{{0, 1}})))
	require.True(t, math.IsNaN(AdvantageCosine([][]float64{{1}}, [][]float64{{0}})))
	require.True(t, math.IsNaN(AdvantageCosine(nil, nil)))
}

func TestPairwiseAccuracy(t *testing.T) {
	// Pairs (0,1) ✓, (0,2) ✓, (1,2) ✗ → 2/3.
	require.InDelta(t, 2.0/3, PairwiseAccuracy([][]float64{{1, 2, 3}}, [][]float64{{1, 3, 2}}), 1e-15)
	// Predicted tie counts ½; real tie is skipped: (0,1) ½, (0,2) ✓ → 1.5/2.
	require.InDelta(t, 0.75, PairwiseAccuracy([][]float64{{1, 1, 2}}, [][]float64{{0, 1, 1}}), 1e-15)
	// Only within groups: across-group pairs never count.
	require.InDelta(t, 0, PairwiseAccuracy([][]float64{{2, 1}, {9, 8}}, [][]float64{{1, 2}, {0, 1}}), 1e-15)
	require.True(t, math.IsNaN(PairwiseAccuracy([][]float64{{1, 2}}, [][]float64{{3, 3}})))
	require.InDelta(t, 1, PairwiseAccuracy([][]float64{{1, math.NaN(), 2}}, [][]float64{{0, 1, 1}}), 1e-15)
}

func TestPairwiseAccuracyGap(t *testing.T) {
	// Real gains 2, 1, 0.5, −6, predictions 3, 3, 0, 1, gap 1: (0,1) is
	// kept (|2 − 1| = 1) and a predicted tie, ½; (0,2) ✓; (0,3) ✓; (1,2) is
	// left out (|0.5| < 1); (1,3) ✓ (3 > 1, 1 > −6); (2,3) ✗ (0 < 1 but
	// 0.5 > −6) → 3.5/5 = 0.7.
	p, r := [][]float64{{3, 3, 0, 1}}, [][]float64{{2, 1, 0.5, -6}}
	require.InDelta(t, 0.7, PairwiseAccuracyGap(p, r, 1), 1e-15)
	require.Equal(t, 1.0, PairwiseAccuracyGap([][]float64{{1, 0}}, [][]float64{{-1, -6}}, 1))
	require.True(t, math.IsNaN(PairwiseAccuracyGap([][]float64{{1, 2, 3}}, [][]float64{{0, 0.5, 0.9}}, 1)))
	// Gap 0 is PairwiseAccuracy, real ties left out.
	for _, c := range [][2][][]float64{{{{1, 1, 2}}, {{0, 1, 1}}}, {{{1, 2, 3}}, {{1, 3, 2}}}, {{{2, 1}, {9, 8}}, {{1, 2}, {0, 1}}}} {
		require.Equal(t, PairwiseAccuracy(c[0], c[1]), PairwiseAccuracyGap(c[0], c[1], 0))
	}
	acc, n := PairwiseAccuracyPairs(p, r, 1)
	require.InDelta(t, 0.7, acc, 1e-15)
	require.Equal(t, 5, n, "the five pairs worked above")
	acc, n = PairwiseAccuracyPairs([][]float64{{1, 2, 3}}, [][]float64{{0, 0.5, 0.9}}, 1)
	require.True(t, math.IsNaN(acc))
	require.Zero(t, n)
	require.Panics(t, func() { PairwiseAccuracyPairs(p, r, -1) })
	require.Panics(t, func() { PairwiseAccuracyPairs(p, [][]float64{{1}}, 1) }, "shapes differ")
	require.Panics(t, func() { PairwiseAccuracyGap(p, r, -1) })
	require.Panics(t, func() { PairwiseAccuracyGap(p, r, math.NaN()) })
}

func TestMonitor(t *testing.T) {
	m := Monitor([][]float64{{1, 2, 3}}, [][]float64{{1, 3, 2}})
	require.InDelta(t, 0.5, m.Cosine, 1e-15)
	require.InDelta(t, 2.0/3, m.Accuracy, 1e-15)
	require.Equal(t, 3, m.Bias.N)
}

func TestMechanismShare(t *testing.T) {
	got := MechanismShare([]string{"b", "a", "c", "a"})
	want := []Share{{"a", 2, 0.5}, {"b", 1, 0.25}, {"c", 1, 0.25}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	require.Empty(t, MechanismShare(nil))
}

func TestSchedule(t *testing.T) {
	// METHOD.md §1 On-policy calibration: steps 16, 40, 64; B 31, 38, 31.
	s := DefaultSchedule()
	require.NoError(t, s.Validate())
	require.Equal(t, 100, s.Total())
	for _, c := range []struct {
		step, b int
		ok      bool
	}{{16, 31, true}, {40, 38, true}, {64, 31, true}, {0, 0, false}, {17, 0, false}, {96, 0, false}} {
		b, ok := s.Budget(c.step)
		require.Equal(t, c.ok, ok, "step %d", c.step)
		require.Equal(t, c.b, b, "step %d", c.step)
	}
	for _, bad := range []Schedule{
		{Steps: []int{16}, Budgets: []int{1, 2}},
		{Steps: []int{16, 16}, Budgets: []int{1, 2}},
		{Steps: []int{-1}, Budgets: []int{1}},
		{Steps: []int{4}, Budgets: []int{0}},
	} {
		require.ErrorIs(t, bad.Validate(), ErrConfig, "%+v", bad)
	}
	require.NoError(t, Schedule{}.Validate())
}

func TestTrigger(t *testing.T) {
	tr := DefaultTrigger()
	require.NoError(t, tr.Validate())
	good := Monitors{Bias: Bias{JHat: 1, JBar: 0.5, Delta: -0.5, N: 32}, Cosine: 0.6, Accuracy: 0.65}
	tests := []struct {
		name       string
		step, last int
		m          func(Monitors) Monitors
		fire       bool
		reason     string
	}{
		{"healthy", 20, 0, func(m Monitors) Monitors { return m }, false, ""},
		{"gap", 20, 0, func(m Monitors) Monitors { m.Bias.Delta = -2; return m }, true, "gap 2 > 1"},
		{"negative gap", 20, 0, func(m Monitors) Monitors { m.Bias.Delta = 1.5; return m }, true, "gap 1.5 > 1"},
		{"cosine", 20, 0, func(m Monitors) Monitors { m.Cosine = -0.42; return m }, true, "advantage cosine -0.42 < 0.3"},
		{"accuracy", 20, 0, func(m Monitors) Monitors { m.Accuracy = 0.37; return m }, true, "pairwise accuracy 0.37 < 0.55"},
		{"too soon", 20, 15, func(m Monitors) Monitors { m.Cosine = -1; return m }, false, ""},
		{"first ever", 3, -1, func(m Monitors) Monitors { m.Cosine = -1; return m }, true, "advantage cosine -1 < 0.3"},
		{"too few pairs", 20, 0, func(m Monitors) Monitors { m.Cosine = -1; m.Bias.N = 8; return m }, false, ""},
		{"nan never fires", 20, 0, func(m Monitors) Monitors { m.Cosine, m.Accuracy = math.NaN(), math.NaN(); return m }, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fire, reason := tr.Fire(tt.step, tt.last, tt.m(good))
			require.Equal(t, tt.fire, fire)
			require.Equal(t, tt.reason, reason)
		})
	}
	off := tr
	off.Cosine.On = false
	fire, _ := off.Fire(20, 0, Monitors{Bias: good.Bias, Cosine: -1, Accuracy: 0.9})
	require.False(t, fire)
	bad := tr
	bad.MinPairs = -1
	require.ErrorIs(t, bad.Validate(), ErrConfig)
	bad = tr
	bad.Gap.Value = math.NaN()
	require.ErrorIs(t, bad.Validate(), ErrConfig)
}

func TestWMRLConfig(t *testing.T) {
	type Config struct{ WMRL WMRLConfig }
	c := Config{DefaultWMRLConfig()}
	require.NoError(t, c.WMRL.Validate())
	require.Equal(t, 26, c.WMRL.AnchorCount(256))
	require.Equal(t, 1.0, c.WMRL.NewWeighter().Weight())
	require.True(t, debiaser(t, c.WMRL).Map().Identity())
	for i, f := range []func(*Config){
		func(c *Config) { c.WMRL.AnchorFraction = 1.5 },
		func(c *Config) { c.WMRL.AnchorMin, c.WMRL.AnchorMax = 5, 2 },
		func(c *Config) { c.WMRL.AnchorMin = -1 },
		func(c *Config) { c.WMRL.Bins = 1 },
		func(c *Config) { c.WMRL.Bins = -1 },
		func(c *Config) { c.WMRL.MinPairs = 1 },
		func(c *Config) { c.WMRL.RefitEvery = 0 },
		func(c *Config) { c.WMRL.Capacity = 100 },
		func(c *Config) { c.WMRL.Capacity = -1 },
		func(c *Config) { c.WMRL.HalfLife = 0 },
		func(c *Config) { c.WMRL.Warmup = 0 },
		func(c *Config) { c.WMRL.Target = 1 },
		func(c *Config) { c.WMRL.Target = math.NaN() },
		func(c *Config) { c.WMRL.MaxWeight = 1.5 },
		func(c *Config) { c.WMRL.MaxWeight = math.Inf(1) },
	} {
		c := Config{DefaultWMRLConfig()}
		f(&c)
		require.ErrorIs(t, c.WMRL.Validate(), ErrConfig, "case %d", i)
	}
	// A part that is off is not validated: it is never built.
	w := DefaultWMRLConfig()
	w.Debias, w.Bins, w.MinPairs = false, -1, 0
	w.Weight, w.Target, w.Warmup = false, 0, 0
	require.NoError(t, w.Validate())
	// Capacity 0 keeps every pair; Bins 0 is the exact fit.
	w = DefaultWMRLConfig()
	w.Capacity, w.Bins = 0, 0
	require.NoError(t, w.Validate())
}
