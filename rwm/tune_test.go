package rwm_test

import (
	"context"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func TestLogMarginalHandDerived(t *testing.T) {
	// One record y = 3 of variance K₁ = 6.25 + 1 (exact config, c = 1):
	// log N(3; 0, 7.25) = −½(9/7.25 + ln 7.25 + ln 2π).
	a := task("a", "fam", records.BitsPerByte)
	p := prop("lr-scale", "factor", "2")
	ev := evidence(t, real(a, p, 3, 1))
	lm, err := rwm.LogMarginal(context.Background(), exact(), ev)
	require.NoError(t, err)
	require.InDelta(t, -0.5*(9/7.25+math.Log(7.25)+math.Log(2*math.Pi)), lm, 1e-12)

	// With the fitted scale c = (4 + 9/7.25)/5 the variance is c·7.25.
	cfg := exact()
	cfg.FitScale = true
	lm, err = rwm.LogMarginal(context.Background(), cfg, ev)
	require.NoError(t, err)
	c := (4 + 9/7.25) / 5
	require.InDelta(t, -0.5*(9/(c*7.25)+math.Log(c*7.25)+math.Log(2*math.Pi)), lm, 1e-12)

	lm, err = rwm.LogMarginal(context.Background(), exact(), records.Evidence{})
	require.NoError(t, err)
	require.Equal(t, 0.0, lm)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = rwm.LogMarginal(ctx, exact(), ev)
	require.ErrorIs(t, err, context.Canceled)
}

func TestTune(t *testing.T) {
	base := rwm.DefaultEmbeddedConfig()
	grid := rwm.TuneGrid(base)
	require.Len(t, grid, 81)
	for _, c := range grid {
		require.NoError(t, c.Validate())
	}
	// Too few records: base is kept.
	got, _, err := rwm.Tune(context.Background(), base, rwmtest.Evidence(5), nil)
	require.NoError(t, err)
	require.Equal(t, base.Lengthscale, got.Lengthscale)
	require.Equal(t, base.NoiseSigmas, got.NoiseSigmas)

	// Tune returns the grid's maximiser of the log marginal likelihood.
	ev := rwmtest.Evidence(40)
	got, best, err := rwm.Tune(context.Background(), base, ev, nil)
	require.NoError(t, err)
	max := math.Inf(-1)
	for _, c := range grid {
		lm, err := rwm.LogMarginal(context.Background(), c, ev)
		require.NoError(t, err)
		max = math.Max(max, lm)
	}
	require.Equal(t, max, best)
	lm, err := rwm.LogMarginal(context.Background(), got, ev)
	require.NoError(t, err)
	require.Equal(t, best, lm)

	// Records whose gains do not depend on the task at all favour the
	// strongest task correlations of the grid.
	var rs []records.Record
	for i := range 30 {
		tk := task([]string{"a", "b", "c"}[i%3], []string{"f1", "f2", "f3"}[i%3], records.BitsPerByte)
		mech := []string{"m1", "m2", "m3", "m4", "m5"}[(i/3)%5]
		rs = append(rs, real(tk, prop(mech), float64((i/3)%5)*2-4, uint64(i)))
	}
	got, _, err = rwm.Tune(context.Background(), base, evidence(t, rs...), nil)
	require.NoError(t, err)
	require.Equal(t, 0.6, got.CorrAny)
}

// Tune builds K₁ once for the configurations that differ only in their
// noise and visits them together; it still picks what a scan of the grid
// in order with LogMarginal picks, bit for bit, ties to the earlier, with
// effects on and off, and on a grid whose noise levels are not adjacent.
func TestTuneMatchesLogMarginalScan(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	ev := dialsEvidence(60, 6, 3)
	for name, base := range map[string]rwm.EmbeddedConfig{
		"effects": dialsConfig(dials{&calls}), "plain": rwm.DefaultEmbeddedConfig(),
	} {
		t.Run(name, func(t *testing.T) {
			grid := rwm.TuneGrid(base)
			// The grid twice over (a tie for every configuration) and
			// reversed, so that equal K₁ are far apart in it.
			grid = append(grid, grid...)
			slices.Reverse(grid)
			want, wantLM, wantI := base, math.Inf(-1), -1
			for i, c := range grid {
				lm, err := rwm.LogMarginal(ctx, c, ev)
				require.NoError(t, err)
				if lm > wantLM {
					want, wantLM, wantI = c, lm, i
				}
			}
			got, gotLM, err := rwm.Tune(ctx, base, ev, grid)
			require.NoError(t, err)
			require.Equal(t, wantLM, gotLM)
			require.Equal(t, want.NoiseSigmas, got.NoiseSigmas)
			require.Equal(t, want.Lengthscale, got.Lengthscale)
			require.Equal(t, want.CorrMech, got.CorrMech)
			require.Equal(t, want.CorrAny, got.CorrAny)
			require.Less(t, wantI, len(grid)/2, "the earlier of two ties")
		})
	}
}
