package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// nbTask is a corpus task with one descriptor, width = w.
func nbTestTask(id string, w float64) records.Task {
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
	a, b, c := nbTestTask("a", 1), nbTestTask("b", 2), nbTestTask("c", 100)
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
	q := nbTestTask("q", 3)
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
		cfg := DefaultNeighbourConfig()
		cfg.K = tc.k
		n, err := NewNeighbourMean(corpus, cfg)
		require.NoError(t, err)
		require.Equal(t, 3, n.Tasks())
		got, ok := n.Mean(q, tc.p)
		require.Equal(t, tc.ok, ok, "K %d %s", tc.k, tc.p.Key())
		require.InDelta(t, tc.want, got, 1e-12, "K %d %s", tc.k, tc.p.Key())
	}
	// A queried task of the corpus is not its own neighbour.
	cfg := DefaultNeighbourConfig()
	cfg.K = 1
	n, err := NewNeighbourMean(corpus, cfg)
	require.NoError(t, err)
	got, ok := n.Mean(b, ps[0])
	require.True(t, ok)
	require.InDelta(t, 2.0, got, 1e-12, "b's nearest other task is a")
	// The digest follows the corpus and the configuration.
	m, err := NewNeighbourMean(corpus[1:], cfg)
	require.NoError(t, err)
	require.NotEqual(t, n.Digest(), m.Digest())
	cfg.K = 2
	m, err = NewNeighbourMean(corpus, cfg)
	require.NoError(t, err)
	require.NotEqual(t, n.Digest(), m.Digest())
	again, err := NewNeighbourMean(corpus, cfg)
	require.NoError(t, err)
	require.Equal(t, m.Digest(), again.Digest())
}

func TestNeighbourMeanRefused(t *testing.T) {
	for _, mut := range []func(*NeighbourConfig){
		func(c *NeighbourConfig) { c.K = 0 },
		func(c *NeighbourConfig) { c.InfeasibleSigmas = 1 },
		func(c *NeighbourConfig) { c.ClipSigmas = -1 },
	} {
		c := DefaultNeighbourConfig()
		mut(&c)
		_, err := NewNeighbourMean(nil, c)
		require.ErrorIs(t, err, errConfig)
	}
	_, err := NewNeighbourMean(nil, DefaultNeighbourConfig())
	require.ErrorIs(t, err, errConfig, "an empty corpus")
}
