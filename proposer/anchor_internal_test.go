package proposer

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// anchorKL returns the mean card-decision KL(π_θ ‖ π_anchor) over the
// batch's states at their sampling temperatures, computed directly.
func anchorKL(t *testing.T, p *Policy, batch []Item) float64 {
	t.Helper()
	var sum float64
	for _, it := range batch {
		state := p.lay.stateFeatures(it.State, p.cfg.FamilyBuckets)
		temp := p.sampleTemp(it.Sample)
		lp := p.cardLogProbs(p.theta, state, temp)
		lq := p.cardLogProbs(p.anchor, state, temp)
		for j := range lp {
			sum += math.Exp(lp[j]) * (lp[j] - lq[j])
		}
	}
	return sum / float64(len(batch))
}

// The anchored DAPO loss adds β · the batch's mean card KL to the anchor,
// and its gradient, through the card head and the hidden layer, matches
// central differences.
func TestAnchorLossGradientMatchesFiniteDifferences(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.5
	p := newHiddenPolicy(t, cfg, 4, 81)
	rng := rand.New(rand.NewPCG(82, 83))
	batch := dapoBatch(t, p, rng, 16)
	_, _, plain, _, err := p.dapoGrad(context.Background(), batch)
	require.NoError(t, err)

	const beta = 0.8
	require.NoError(t, p.Anchor(beta))
	_, _, at, _, err := p.dapoGrad(context.Background(), batch)
	require.NoError(t, err)
	require.Equal(t, plain.Loss, at.Loss, "at the anchor the KL is 0")

	for i := range p.theta { // move away from the anchor
		p.theta[i] += 0.3 * rng.NormFloat64()
	}
	kl := anchorKL(t, p, batch)
	require.Greater(t, kl, 0.01)
	p.anchorBeta = 0
	_, _, moved, _, err := p.dapoGrad(context.Background(), batch)
	require.NoError(t, err)
	p.anchorBeta = beta
	res, grad, f := dapoLoss(t, p, batch)
	require.InDelta(t, moved.Loss+beta*kl, res.Loss, 1e-12)
	state := p.lay.stateFeatures(batch[0].State, cfg.FamilyBuckets)
	checkHiddenGradient(t, p, f, grad, state, p.lay.heads[:1], rng)
	checkGradient(t, p, f, grad, rng)
}

// Updates that reward one card move the card distribution far less from
// where it started when the policy is anchored there.
func TestAnchorHoldsTheCardDistribution(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.3
	drift := map[float64]float64{}
	for _, beta := range []float64{0, 5} {
		p := newHiddenPolicy(t, cfg, 4, 91)
		rng := rand.New(rand.NewPCG(92, 93))
		require.NoError(t, p.Anchor(beta))
		start := append([]float64(nil), p.theta...)
		var batch []Item
		for range 8 {
			s := randomState(rng, p.cat)
			smp, err := p.Propose(context.Background(), s, 8, rng)
			require.NoError(t, err)
			for _, x := range smp {
				adv := -0.5
				if x.Tokens[0] == p.lay.cards[0].mechanism {
					adv = 2
				}
				batch = append(batch, Item{State: s, Sample: x, Advantage: adv})
			}
		}
		for range 30 {
			_, err := p.Update(context.Background(), batch)
			require.NoError(t, err)
			for i := range batch { // on-policy old log-probs for the next step
				lps, err := p.Score(context.Background(), batch[i].State, batch[i].Sample)
				require.NoError(t, err)
				batch[i].Sample.LogProbs = lps
			}
		}
		anchor := p.anchor
		p.anchor = start
		drift[beta] = anchorKL(t, p, batch)
		p.anchor = anchor
	}
	t.Logf("card KL from the start after 30 updates: β = 0 %.4f, β = 5 %.4f", drift[0], drift[5])
	require.Greater(t, drift[0], 0.05)
	require.Less(t, drift[5], drift[0]/3)
}

// Anchor refuses a bad β, 0 removes the anchor, and checkpoints carry it;
// a checkpoint with a β and no anchor (or the reverse) is refused.
func TestAnchorCheckpointAndErrors(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.2
	p := newHiddenPolicy(t, cfg, 3, 101)
	for _, b := range []float64{-1, math.NaN(), math.Inf(1)} {
		require.ErrorIs(t, p.Anchor(b), ErrConfig, "β = %g", b)
	}
	require.NoError(t, p.Anchor(0.5))
	b, err := p.MarshalBinary()
	require.NoError(t, err)
	var q Policy
	require.NoError(t, q.UnmarshalBinary(b))
	require.Equal(t, p.anchor, q.anchor)
	require.Equal(t, 0.5, q.anchorBeta)

	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	delete(doc, "anchor")
	damaged, err := json.Marshal(doc)
	require.NoError(t, err)
	require.ErrorIs(t, q.UnmarshalBinary(damaged), ErrCheckpoint)

	require.NoError(t, p.Anchor(0))
	require.Nil(t, p.anchor)
	b, err = p.MarshalBinary()
	require.NoError(t, err)
	require.NotContains(t, string(b), "anchor", "no anchor, no field: earlier checkpoints stay identical")
	require.NoError(t, q.UnmarshalBinary(b))
	require.Nil(t, q.anchor)
}
