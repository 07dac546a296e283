package proposer_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

func TestPolicyConformsHidden(t *testing.T) {
	cat := lab.Catalogue()
	proposertest.RunTrainable(t, func(t *testing.T) proposer.Trainable {
		return newLabPolicy(t, func(c *proposer.PolicyConfig) { c.Hidden, c.InitStd = 8, 0.2 })
	}, proposertest.Options{Deterministic: true, RequireLogProbs: true, Catalogue: cat})
}

func TestMarshalRoundTripHidden(t *testing.T) {
	// A checkpoint carries the hidden layer (PolicyConfig.Hidden and its
	// parameters) and its Adam state: the restored policy samples, scores
	// and updates bit for bit like the original.
	p, q, data, rng := trainedRoundTrip(t, func(c *proposer.PolicyConfig) { c.Hidden = 6 }, 5)
	require.Contains(t, string(data), `"hidden":6`)
	requireSamePolicies(t, p, q, lab.Catalogue(), 10, rng)
	requireSameAfterUpdate(t, p, q, data)

	// A checkpoint whose Hidden does not fit its vectors, or is out of
	// range, is refused.
	for _, bad := range []string{`"hidden":5`, `"hidden":2000`} {
		var r proposer.Policy
		err := r.UnmarshalBinary(bytes.Replace(data, []byte(`"hidden":6`), []byte(bad), 1))
		require.ErrorIs(t, err, proposer.ErrCheckpoint, bad)
	}

	// Without a hidden layer the checkpoint does not mention it.
	plain, err := newLabPolicy(t, nil).MarshalBinary()
	require.NoError(t, err)
	require.NotContains(t, string(plain), `"hidden"`)
}

func TestLearnsBanditWithHidden(t *testing.T) {
	// The lab bandit of TestLearnsBanditOnLabCatalogue with a hidden layer
	// of 8 units: DAPO through the hidden layer still raises the expected
	// reward and the best card's probability (METHOD.md §1 Policy
	// optimisation).
	cat := lab.Catalogue()
	p := newLabPolicy(t, func(c *proposer.PolicyConfig) { c.Hidden = 8 })
	rewards := map[string]float64{}
	best, bestR := "", -1.0
	for _, c := range cat {
		rewards[c.Mechanism] = c.Prior.Mean
		if c.Prior.Mean > bestR {
			best, bestR = c.Mechanism, c.Prior.Mean
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	states := make([]records.State, 32)
	for i := range states {
		states[i] = randomLabState(rng, cat)
	}
	r0, p0 := expected(p, rewards, best, states)
	trainSteps(t, p, rewards, 40, 16, rng)
	r1, p1 := expected(p, rewards, best, states)
	t.Logf("expected reward %.4f → %.4f, P(%s) %.3f → %.3f", r0, r1, best, p0, p1)
	require.Greater(t, r1, r0+0.5*(bestR-r0))
	require.Greater(t, p1, 0.5)
}
