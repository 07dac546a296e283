package main

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

func TestGroupR2(t *testing.T) {
	// A = 2s + 1 exactly: R² 1. A = s² on s = 0, 1, 2: means 1 and 5/3;
	// cov = (−1)(−5/3) + 0 + (1)(7/3) = 4, var s = 2, var A = 25/9+4/9+49/9 = 78/9;
	// R² = 16 / (2 · 78/9) = 72/78.
	r2, ok := GroupR2([]float64{0, 1, 2}, []float64{1, 3, 5})
	require.True(t, ok)
	require.InDelta(t, 1, r2, 1e-12)
	r2, ok = GroupR2([]float64{0, 1, 2}, []float64{0, 1, 4})
	require.True(t, ok)
	require.InDelta(t, 72.0/78, r2, 1e-12)
	_, ok = GroupR2([]float64{0, 1, 1}, []float64{0, 1, 2})
	require.False(t, ok, "two distinct scores say nothing about linearity")
}

func TestPolicyUpdate(t *testing.T) {
	sols := Solutions()
	p := NewPolicy(sols, 1)
	smp, err := p.Propose(context.Background(), records.State{}, 4, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Len(t, smp, 4)
	for _, s := range smp {
		require.InDelta(t, math.Log(1.0/float64(len(sols))), s.LogProbs[0], 1e-12)
		require.Equal(t, "1", s.Proposal.Params["draw"])
	}
	// A positive advantage on "3-nn" raises its probability, lowers the rest.
	item := proposer.Item{Sample: proposer.Sample{Proposal: records.Proposal{Mechanism: "3-nn"}}, Advantage: 1}
	_, err = p.Update(context.Background(), []proposer.Item{item})
	require.NoError(t, err)
	pr := p.Probs()
	k := len(sols) - 1
	// θ_k += 1·(1 − 1/8), the others −1/8: π_k = e^{7/8} / (e^{7/8} + 7e^{−1/8}).
	want := math.Exp(7.0/8) / (math.Exp(7.0/8) + 7*math.Exp(-1.0/8))
	require.InDelta(t, want, pr[k], 1e-12)
}

func TestDebiasRecoversDistortion(t *testing.T) {
	// METHOD.md §2 Online Debiasing: the isotonic map fitted on anchor pairs
	// (scripted verdict score D(s) = s^0.25, real grade s) undoes the
	// distortion, so the advantages of world-model groups become affine in
	// the real score (R² → 1), while before the first fit they follow D(s).
	if testing.Short() {
		t.Skip("grades solutions with real Python runs")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	o := Options{Out: t.TempDir(), Tasks: []string{"iris", "wine"}, Steps: 48, Seed: 1, World: "scripted", Power: 0.25}
	res, err := Run(context.Background(), o, io.Discard)
	require.NoError(t, err, "is Debian's python3-sklearn installed?")
	t.Logf("R² before %.3f (%d groups), after %.3f (%d groups); policy score %.3f → %.3f; %d real runs",
		res.Before.MeanR2, res.Before.Groups, res.After.MeanR2, res.After.Groups, res.ScoreBefore, res.ScoreAfter, res.RealRuns)
	require.True(t, res.Fitted)
	require.GreaterOrEqual(t, res.Before.Groups, 5)
	require.GreaterOrEqual(t, res.After.Groups, 20)
	require.Less(t, res.Before.MeanR2, 0.95)
	require.Greater(t, res.After.MeanR2, 0.99)
	require.Greater(t, res.ScoreAfter, res.ScoreBefore+0.1, "the policy learns to prefer solutions that grade well")
	require.LessOrEqual(t, res.RealRuns, 2*len(Solutions()), "each distinct solution graded once per task")
}
