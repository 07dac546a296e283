package proposer

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// linWeights returns the parameter range of every head's linear
// descriptor weights L (PolicyConfig.DescriptorLinear): after U, c, V and
// Ud, up to the end of the parameters.
func linWeights(p *Policy) (lo, hi int) {
	return p.lay.udOff + len(p.lay.inputs)*p.lay.hidden, p.lay.nParams
}

// The linear weights L sit after every other parameter and start at zero:
// the other parameters are drawn as without them, and the initial policy
// is the same on every state. Each head gets len(inputs) × its outputs.
func TestDescriptorLinearLayout(t *testing.T) {
	for _, hidden := range []int{0, 4} {
		cfg := DefaultPolicyConfig()
		cfg.Hidden, cfg.InitStd, cfg.DescriptorInputs = hidden, 0.3, inputs
		if hidden == 0 {
			cfg.DescriptorInputs = nil // inputs need a hidden layer or DescriptorLinear
		}
		plain := newRandomPolicy(t, cfg, 7)
		cfg.DescriptorInputs, cfg.DescriptorLinear = inputs, true
		with := newRandomPolicy(t, cfg, 7)
		outs := 0
		for _, h := range with.lay.heads {
			outs += h.nOut
		}
		require.Equal(t, plain.lay.nParams+len(inputs)*outs, with.lay.nParams, "hidden %d", hidden)
		lo, hi := linWeights(with)
		require.Equal(t, plain.lay.nParams, lo, "hidden %d", hidden)
		require.Equal(t, plain.theta, with.theta[:lo], "hidden %d", hidden)
		require.Equal(t, make([]float64, hi-lo), with.theta[lo:], "hidden %d: L starts at zero", hidden)
		require.Equal(t, lo, with.lay.heads[0].lin)
		for i := 1; i < len(with.lay.heads); i++ {
			require.Equal(t, with.lay.heads[i-1].lin+len(inputs)*with.lay.heads[i-1].nOut, with.lay.heads[i].lin)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		s := randomState(rng, with.cat)
		s.Task = describe(rng, s.Task)
		require.Equal(t, plain.CardProbs(s), with.CardProbs(s), "hidden %d: the same initial policy", hidden)
	}
}

func TestDescriptorLinearConfig(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.DescriptorLinear = true
	err := cfg.Validate()
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "DescriptorLinear without DescriptorInputs")
	cfg.DescriptorInputs = inputs
	require.NoError(t, cfg.Validate(), "no hidden layer needed")
	cfg.DescriptorLinear = false
	require.ErrorContains(t, cfg.Validate(), "Hidden > 0 or DescriptorLinear")
	cfg.DescriptorLinear, cfg.DescriptorInputs = true, []DescriptorInput{{Name: "a", Scale: 0}}
	require.ErrorContains(t, cfg.Validate(), "Scale", "the inputs are checked as for the hidden layer")
}

// ∂u_j/∂L[d, j] = x_d: the log-prob and DAPO gradients at the linear
// weights match central differences, without and with a hidden layer
// (whose gradients must stay right beside them), a missing input among
// the states.
func TestDescriptorLinearGradientsMatchFiniteDifferences(t *testing.T) {
	for _, hidden := range []int{0, 5} {
		cfg := DefaultPolicyConfig()
		cfg.InitStd, cfg.DescriptorInputs, cfg.DescriptorLinear = 0.5, inputs, true
		var p *Policy
		if hidden > 0 {
			p = newHiddenPolicy(t, cfg, hidden, 91) // draws c, V, Ud and L too
		} else {
			p = newRandomPolicy(t, cfg, 91)
			r := rand.New(rand.NewPCG(91, 2))
			lo, hi := linWeights(p)
			for i := lo; i < hi; i++ {
				p.theta[i] = 0.5 * r.NormFloat64()
			}
		}
		lo, hi := linWeights(p)
		requireDescribedGradients(t, p, cfg, lo, hi, 0.7)
	}
}

// What the linear inputs are for: each card's preference a linear
// function of the recipe, which carries over to recipes between and
// beside the training ones without a hidden layer. The task of
// TestDescriptorInputsGeneraliseToUnseenValues (a hot learning rate wants
// "slower"), supervised on four training recipes: the log-linear policy
// with the linear input prefers the right card at two recipes it never
// saw; with the binned descriptors alone it is even between the cards.
func TestDescriptorLinearGeneralisesToUnseenValues(t *testing.T) {
	run := func(cfg PolicyConfig) []float64 { return unseenRecipes(t, cfg, nil) }
	cfg := DefaultPolicyConfig()
	cfg.DescriptorBuckets = 256
	binned := run(cfg)
	cfg.DescriptorInputs, cfg.DescriptorLinear = []DescriptorInput{{Name: "log10_lr", Center: -2, Scale: 0.5}}, true
	linear := run(cfg)
	t.Logf("P(right card) at unseen recipes: binned %.3f, linear input %.3f", binned, linear)
	// Deterministic (no draws): 0.795 and 0.698 with the linear input, the
	// boundary learned between the training recipes (−3.2 and −1.1)
	// rather than at −2; exactly even with the bins, which no training
	// state turned on.
	for i := range linear {
		require.Greater(t, linear[i], 0.65, "linear input, recipe %d", i)
		require.InDelta(t, 0.5, binned[i], 1e-9, "binned only, recipe %d", i)
	}
}
