package rwm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// nbTask is a corpus task with one descriptor, width = w.
func nbTask(id string, w float64) records.Task {
	t := rwmtest.Task(0)
	t.ID, t.Descriptors = id, map[string]float64{"width": w, "const": 1}
	return t
}

// TestNeighbourMeanByHand: three corpus tasks at widths 1, 2 and 100
// (asinh 0.881, 1.444, 5.298; the constant descriptor has no spread and
// is dropped). A query at width 3 (asinh 1.818) is nearest to width 2,
// then 1, then 100, in any standardisation. K = 1 reads width 2's gain
// of a proposal; K = 2 the mean of widths 2 and 1, skipping a task that
// never ran the proposal; gains clip at ±6 σ_e and an infeasible record
// counts −6.
func TestNeighbourMeanByHand(t *testing.T) {
	ps := rwmtest.Proposals()
	a, b, c := nbTask("a", 1), nbTask("b", 2), nbTask("c", 100)
	rec := func(t records.Task, p records.Proposal, g float64, seed uint64) records.Record {
		return records.Record{Task: t, Proposal: p, Gain: g * t.SeedNoise, Loss: t.RefLoss - g*t.SeedNoise,
			Source: records.Real, Seeds: []uint64{seed}}
	}
	inf := rec(a, ps[2], 0, 9)
	inf.Infeasible = "diverged"
	corpus := []records.Record{
		rec(a, ps[0], 1, 1), rec(a, ps[0], 3, 2), // mean 2
		rec(b, ps[0], 10, 3), // clipped to 6
		rec(c, ps[0], -4, 4),
		rec(a, ps[1], -1, 5), // b never ran ps[1]
		rec(b, ps[2], 2, 6), inf,
	}
	q := nbTask("q", 3)
	for _, tc := range []struct {
		k    int
		p    records.Proposal
		want float64
		ok   bool
	}{
		{1, ps[0], 6, true},
		{2, ps[0], (6 + 2) / 2.0, true},
		{3, ps[0], (6 + 2 - 4) / 3.0, true},
		{1, ps[1], 0, false},
		{2, ps[1], -1, true},
		{2, ps[2], (2 - 6) / 2.0, true},
		{3, ps[3], 0, false},
	} {
		cfg := rwm.DefaultNeighbourConfig()
		cfg.K = tc.k
		n, err := rwm.NewNeighbourMean(corpus, cfg)
		require.NoError(t, err)
		require.Equal(t, 3, n.Tasks())
		got, ok := n.Mean(q, tc.p)
		require.Equal(t, tc.ok, ok, "K %d %s", tc.k, tc.p.Key())
		require.InDelta(t, tc.want, got, 1e-12, "K %d %s", tc.k, tc.p.Key())
	}
	// A queried task of the corpus is not its own neighbour.
	cfg := rwm.DefaultNeighbourConfig()
	cfg.K = 1
	n, err := rwm.NewNeighbourMean(corpus, cfg)
	require.NoError(t, err)
	got, ok := n.Mean(b, ps[0])
	require.True(t, ok)
	require.InDelta(t, 2.0, got, 1e-12, "b's nearest other task is a")
	// The digest follows the corpus and the configuration.
	m, err := rwm.NewNeighbourMean(corpus[1:], cfg)
	require.NoError(t, err)
	require.NotEqual(t, n.Digest(), m.Digest())
	cfg.K = 2
	m, err = rwm.NewNeighbourMean(corpus, cfg)
	require.NoError(t, err)
	require.NotEqual(t, n.Digest(), m.Digest())
	again, err := rwm.NewNeighbourMean(corpus, cfg)
	require.NoError(t, err)
	require.Equal(t, m.Digest(), again.Digest())
}

func TestNeighbourMeanRefused(t *testing.T) {
	for _, mut := range []func(*rwm.NeighbourConfig){
		func(c *rwm.NeighbourConfig) { c.K = 0 },
		func(c *rwm.NeighbourConfig) { c.InfeasibleSigmas = 1 },
		func(c *rwm.NeighbourConfig) { c.ClipSigmas = -1 },
	} {
		c := rwm.DefaultNeighbourConfig()
		mut(&c)
		_, err := rwm.NewNeighbourMean(nil, c)
		require.ErrorIs(t, err, rwm.ErrConfig)
	}
	_, err := rwm.NewNeighbourMean(nil, rwm.DefaultNeighbourConfig())
	require.ErrorIs(t, err, rwm.ErrConfig, "an empty corpus")
}

// With no record in context, the embedded model's prediction is its prior
// mean: (1 − w)·0 + w·μ_nb for a proposal the neighbours ran, and 0 for
// one they did not.
func TestEmbeddedNeighbourMean(t *testing.T) {
	ps := rwmtest.Proposals()
	a := nbTask("a", 1)
	corpus := []records.Record{{Task: a, Proposal: ps[0], Gain: 4 * a.SeedNoise, Loss: a.RefLoss - 4*a.SeedNoise,
		Source: records.Real, Seeds: []uint64{1}}}
	nb, err := rwm.NewNeighbourMean(corpus, rwm.DefaultNeighbourConfig())
	require.NoError(t, err)
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.Neighbours, cfg.NeighbourWeight = nb, 0.25
	m := newEmbedded(t, cfg)
	q := nbTask("q", 3)
	for _, c := range []struct {
		p    records.Proposal
		want float64
	}{{ps[0], 1}, {ps[1], 0}} {
		p, err := m.Predict(t.Context(), rwm.Query{Task: q, Proposal: c.p})
		require.NoError(t, err)
		require.InDelta(t, c.want, p.Gain/q.SeedNoise, 1e-12, c.p.Key())
	}
	bad := cfg
	bad.NeighbourWeight = 1.5
	_, err = rwm.NewEmbedded(bad)
	require.Error(t, err)
}
