package proposer

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
)

// newHiddenPolicy returns a policy on SyntheticCatalogue(24) with a hidden
// layer of nh units whose biases c and output weights V are drawn too (they
// start at zero, where the gradient of U vanishes), so every hidden
// parameter's gradient is exercised.
func newHiddenPolicy(t *testing.T, cfg PolicyConfig, nh int, seed uint64) *Policy {
	t.Helper()
	cfg.Hidden = nh
	p := newRandomPolicy(t, cfg, seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := p.lay.cOff; i < p.lay.nParams; i++ {
		p.theta[i] = 0.5 * rng.NormFloat64()
	}
	return p
}

// checkHiddenGradient compares grad with central differences of f at the
// hidden parameters (U, c, V: indices ≥ uOff) where grad is non-zero, 300
// of them drawn with rng when there are more, and at 100 random hidden
// others. It also requires non-zero gradients for c, for the U rows of
// every active state feature and for the V blocks of the heads used.
func checkHiddenGradient(t *testing.T, p *Policy, f func() float64, grad []float64, state []int, heads []head, rng *rand.Rand) {
	t.Helper()
	l := &p.lay
	nh := l.hidden
	nonZero := func(lo, hi int) bool {
		for _, g := range grad[lo:hi] {
			if g != 0 {
				return true
			}
		}
		return false
	}
	require.True(t, nonZero(l.cOff, l.cOff+nh), "gradient of c")
	for _, f := range state {
		require.True(t, nonZero(l.uOff+f*nh, l.uOff+(f+1)*nh), "gradient of U row %d", f)
	}
	for _, hd := range heads {
		require.True(t, nonZero(hd.v, hd.v+hd.nOut*nh), "gradient of V at %d", hd.v)
	}
	var idx []int
	for i := l.uOff; i < len(grad); i++ {
		if grad[i] != 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) > 300 {
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		idx = idx[:300]
	}
	for range 100 {
		idx = append(idx, l.uOff+rng.IntN(len(grad)-l.uOff))
	}
	requireFiniteDifferences(t, p, f, grad, idx, 1e-7, 1e-6)
}

func TestHiddenLogProbGradientMatchesFiniteDifferences(t *testing.T) {
	// ∂ log π(k)/∂u_j = (1[j=k] − π_j)/T reaches V[j, i] through h_i and
	// U[f, i], c_i through V[j, i]·(1 − h_i²) (PolicyConfig.Hidden).
	for _, temp := range []float64{1, 0.7} {
		t.Run(fmt.Sprintf("T=%g", temp), func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			cfg.InitStd, cfg.Temperature, cfg.NoChange = 0.5, temp, true
			cfg.DescriptionBuckets = 16
			p := newHiddenPolicy(t, cfg, 6, 51)
			rng := rand.New(rand.NewPCG(52, 53))
			checked := 0
			for trial := 0; checked < 4 && trial < 40; trial++ {
				s := randomState(rng, p.cat)
				s.Task.Description = "width 64 lr 0.003"
				smp, err := p.Propose(context.Background(), s, 1, rng)
				require.NoError(t, err)
				toks, err := p.lay.encode(smp[0])
				require.NoError(t, err)
				if len(toks) < 3 {
					continue // check sequences with at least two parameter heads
				}
				checked++
				state := p.lay.stateFeatures(s, cfg.FamilyBuckets)
				f, grad, ps := weightedLogProb(p, state, toks, temp, rng)
				t.Logf("trial %d: tokens %v, %d state features", trial, smp[0].Tokens, len(state))
				checkHiddenGradient(t, p, f, grad, state, ps.heads, rng)
				checkGradient(t, p, f, grad, rng) // the linear part stays right
			}
			require.Equal(t, 4, checked)
		})
	}
}

func TestHiddenDAPOLossGradientMatchesFiniteDifferences(t *testing.T) {
	// METHOD.md §1 Policy optimisation: the clipped surrogate's gradient
	// through the hidden layer, summed over a batch of states.
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.5
	p := newHiddenPolicy(t, cfg, 4, 61)
	rng := rand.New(rand.NewPCG(62, 63))
	batch := dapoBatch(t, p, rng, 16)
	_, grad, f := dapoLoss(t, p, batch)
	state := p.lay.stateFeatures(batch[0].State, cfg.FamilyBuckets)
	checkHiddenGradient(t, p, f, grad, state, p.lay.heads[:1], rng)
	checkGradient(t, p, f, grad, rng)
}

func TestHiddenSuperviseStepFollowsFiniteDifferences(t *testing.T) {
	// Supervise descends the mean per-token NLL; Adam's first step moves
	// every parameter by −α·g/(|g| + ε) (Kingma and Ba 2015), so at the
	// hidden parameters it must follow the sign of the NLL's central
	// difference.
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.3
	p := newHiddenPolicy(t, cfg, 3, 71)
	rng := rand.New(rand.NewPCG(72, 73))
	items := dapoBatch(t, p, rng, 8)
	nll := func() float64 {
		var v float64
		n := 0
		for _, it := range items {
			lp, err := p.Score(context.Background(), it.State, it.Sample)
			require.NoError(t, err)
			for _, x := range lp {
				v -= x
				n++
			}
		}
		return v / float64(n)
	}
	fd := make([]float64, p.lay.nParams)
	for i := p.lay.uOff; i < p.lay.nParams; i++ {
		fd[i] = centralDifference(p, nll, i)
	}
	before := append([]float64(nil), p.theta...)
	_, err := p.Supervise(context.Background(), items)
	require.NoError(t, err)
	moved := 0
	for i := p.lay.uOff; i < p.lay.nParams; i++ {
		step := p.theta[i] - before[i]
		switch {
		case math.Abs(fd[i]) > 1e-5:
			moved++
			require.InDelta(t, -cfg.Adam.LR*math.Copysign(1, fd[i]), step, 1e-3*cfg.Adam.LR, "parameter %d (∂NLL ≈ %g)", i, fd[i])
		case math.Abs(fd[i]) < 1e-9:
			require.Zero(t, step, "parameter %d has no gradient", i)
		}
	}
	require.Greater(t, moved, 50)
}

func TestHiddenLayoutAndUniformStart(t *testing.T) {
	// Hidden = H appends U (dState × H), c (H) and each head's V
	// (nOut × H) after the log-linear parameters; V = c = 0 at the start,
	// so with InitStd = 0 the policy is exactly uniform, and with
	// InitStd > 0 its log-linear part and its log-probs are those of the
	// Hidden = 0 policy of the same seed.
	cat := SyntheticCatalogue(24)
	for _, std := range []float64{0, 0.3} {
		cfg := DefaultPolicyConfig()
		cfg.InitStd = std
		base, err := NewPolicy(cat, cfg, rand.New(rand.NewPCG(5, 6)))
		require.NoError(t, err)
		cfg.Hidden = 8
		p, err := NewPolicy(cat, cfg, rand.New(rand.NewPCG(5, 6)))
		require.NoError(t, err)
		outs := 0
		for _, h := range base.lay.heads {
			outs += h.nOut
		}
		l := &p.lay
		require.Equal(t, base.lay.nParams, l.uOff)
		require.Equal(t, l.uOff+l.dState*8, l.cOff)
		require.Equal(t, base.lay.nParams+l.dState*8+8+outs*8, p.NumParams())
		require.Equal(t, base.theta, p.theta[:l.uOff], "the log-linear part is drawn first")
		require.Equal(t, make([]float64, p.NumParams()-l.cOff), p.theta[l.cOff:], "c and V start at zero")
		var sum2 float64
		for _, u := range p.theta[l.uOff:l.cOff] {
			require.NotZero(t, u)
			sum2 += u * u
		}
		require.InDelta(t, hiddenInitStd, math.Sqrt(sum2/float64(l.cOff-l.uOff)), 0.01, "U ~ N(0, 0.1²)")

		rng := rand.New(rand.NewPCG(7, 8))
		for range 20 {
			s := randomState(rng, cat)
			smp, err := p.Propose(context.Background(), s, 2, rand.New(rand.NewPCG(1, 1)))
			require.NoError(t, err)
			want, err := base.Propose(context.Background(), s, 2, rand.New(rand.NewPCG(1, 1)))
			require.NoError(t, err)
			require.Equal(t, want, smp, "samples and log-probs equal the Hidden = 0 policy's")
			if std == 0 {
				require.InDelta(t, -math.Log(24), smp[0].LogProbs[0], 1e-15)
			}
		}
	}
}

func TestHiddenConfig(t *testing.T) {
	for _, nh := range []int{-1, 1025} {
		c := DefaultPolicyConfig()
		c.Hidden = nh
		require.ErrorIs(t, c.Validate(), ErrConfig, "Hidden = %d", nh)
	}
	c := DefaultPolicyConfig()
	c.Hidden = 1024
	require.NoError(t, c.Validate())
	c.Hidden = 4
	_, err := NewPolicy(SyntheticCatalogue(3), c, nil)
	require.ErrorIs(t, err, ErrConfig, "Hidden > 0 without an rng")

	// Equal seeds give equal policies.
	a, err := NewPolicy(SyntheticCatalogue(3), c, rand.New(rand.NewPCG(9, 9)))
	require.NoError(t, err)
	b, err := NewPolicy(SyntheticCatalogue(3), c, rand.New(rand.NewPCG(9, 9)))
	require.NoError(t, err)
	require.Equal(t, a.theta, b.theta)

}

// xorStates are four states over two binary features: the family (a) and
// the metric (b). Card 0 is right when exactly one of them is set.
func xorStates(t *testing.T, l *layout, buckets int) (states []records.State, right []int) {
	t.Helper()
	for _, fam := range []string{"ar-prose", "ar-code"} {
		for _, m := range []records.Metric{records.BitsPerByte, records.NatsPerToken} {
			task := records.Task{ID: fam + "-t", Family: fam, Split: records.Train, Metric: m, RefLoss: 2, SeedNoise: 0.01}
			states = append(states, records.State{Task: task})
			a, b := fam == "ar-code", m == records.NatsPerToken
			right = append(right, map[bool]int{true: 0, false: 1}[a != b])
		}
	}
	require.NotEqual(t, l.stateFeatures(states[0], buckets)[0], l.stateFeatures(states[2], buckets)[0], "the two families share a bucket")
	return states, right
}

func TestHiddenLearnsXOR(t *testing.T) {
	// Two cards; card 0 is right when a XOR b. The log-linear logit
	// difference is additive in a and b, so no weights put more than half
	// the mass on the right card in all four states; the hidden layer can.
	// 400 Supervise steps on the four (state, right card) examples.
	cat := []records.Card{{Mechanism: "zero"}, {Mechanism: "one"}}
	run := func(nh int) []float64 {
		cfg := DefaultPolicyConfig()
		cfg.Hidden = nh
		p, err := NewPolicy(cat, cfg, rand.New(rand.NewPCG(81, 82)))
		require.NoError(t, err)
		states, right := xorStates(t, &p.lay, cfg.FamilyBuckets)
		items := make([]Item, len(states))
		for i, s := range states {
			items[i] = Item{State: s, Sample: Sample{Proposal: records.Proposal{Mechanism: cat[right[i]].Mechanism}}}
		}
		for range 400 {
			_, err := p.Supervise(context.Background(), items)
			require.NoError(t, err)
		}
		out := make([]float64, len(states))
		for i, s := range states {
			out[i] = p.CardProbs(s)[right[i]]
		}
		return out
	}
	lin, hid := run(0), run(8)
	t.Logf("P(right card) per state: Hidden 0 %.3f, Hidden 8 %.3f", lin, hid)
	for i, q := range hid {
		require.Greater(t, q, 0.8, "Hidden 8, state %d", i)
	}
	require.LessOrEqual(t, min(lin[0], lin[1], lin[2], lin[3]), 0.6, "Hidden 0 cannot represent XOR")
}

// dapoXOR trains a two-card policy on the four XOR states with DAPO
// (METHOD.md §1 Policy optimisation): each step samples G = 8 proposals per
// state at temperature 1, reward 1 for the right card and 0 otherwise,
// mean-centred advantages, one Update. It returns the probability of the
// right card in each state.
func dapoXOR(t *testing.T, cfg PolicyConfig, seed uint64, steps int) []float64 {
	t.Helper()
	cat := []records.Card{{Mechanism: "zero"}, {Mechanism: "one"}}
	p, err := NewPolicy(cat, cfg, rand.New(rand.NewPCG(seed, 82)))
	require.NoError(t, err)
	states, right := xorStates(t, &p.lay, cfg.FamilyBuckets)
	rng := rand.New(rand.NewPCG(seed, 84))
	ctx := context.Background()
	for range steps {
		var batch []Item
		for i, s := range states {
			smp, err := p.Propose(ctx, s, 8, rng)
			require.NoError(t, err)
			r := make([]float64, len(smp))
			for k, x := range smp {
				if x.Proposal.Mechanism == cat[right[i]].Mechanism {
					r[k] = 1
				}
			}
			for k, a := range dapo.Advantages(r, dapo.MeanCentered, 0) {
				batch = append(batch, Item{State: s, Sample: smp[k], Advantage: a})
			}
		}
		_, err := p.Update(ctx, batch)
		require.NoError(t, err)
	}
	out := make([]float64, len(states))
	for i, s := range states {
		out[i] = p.CardProbs(s)[right[i]]
	}
	return out
}
