package proposer

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// hashFeatures is a synthetic Features: n entries, three nonzero per
// (task, proposal), their indices and values drawn from an FNV hash of
// the task's ID and the proposal's key, so two tasks and two proposals
// differ.
type hashFeatures struct{ n int }

func (h hashFeatures) Len() int { return h.n }

func (h hashFeatures) Of(t records.Task, p records.Proposal) []Feature {
	f := fnv.New64a()
	fmt.Fprintf(f, "%s|%s", t.ID, p.Key())
	rng := rand.New(rand.NewPCG(f.Sum64(), 7))
	out := make([]Feature, 3)
	for i := range out {
		out[i] = Feature{Index: rng.IntN(h.n), Value: rng.NormFloat64()}
	}
	return out
}

// tableFeatures answers a fixed vector per proposal key.
type tableFeatures struct {
	n    int
	rows map[string][]Feature
}

func (f tableFeatures) Len() int { return f.n }

func (f tableFeatures) Of(_ records.Task, p records.Proposal) []Feature { return f.rows[p.Key()] }

// newFeaturedPolicy is newRandomPolicy with n proposal features of
// hashFeatures and shared weights drawn from N(0, 0.5²).
func newFeaturedPolicy(t *testing.T, cfg PolicyConfig, n int, seed uint64) *Policy {
	t.Helper()
	cfg.Features = n
	p := newRandomPolicy(t, cfg, seed)
	require.NoError(t, p.UseFeatures(hashFeatures{n}))
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := p.lay.fOff; i < p.lay.nParams; i++ {
		p.theta[i] = 0.5 * rng.NormFloat64()
	}
	return p
}

func TestSharedFeaturesHandDerived(t *testing.T) {
	// Card a has no parameters, φ(a) = (1, 0); card b has x ∈ {1, 2} with
	// φ(b, x=1) = (0, 1), φ(b, x=2) = (0, 3). With a_card = a_param =
	// (0, 0.5) and every other weight 0, the card logits are a: 0 and b:
	// 0.5·mean(1, 3) = 1, so π(b) = e/(1+e); given b the logits are 0.5
	// and 1.5, so π(x=2 | b) = e/(1+e) too. At T = 2 both halve.
	cat := []records.Card{{Mechanism: "a"}, {Mechanism: "b", Params: []records.ParamSpec{{Name: "x", Kind: "enum", Choices: []string{"1", "2"}}}}}
	feats := tableFeatures{n: 2, rows: map[string][]Feature{
		records.Proposal{Mechanism: "a"}.Key():                                      {{0, 1}},
		records.Proposal{Mechanism: "b", Params: map[string]string{"x": "1"}}.Key(): {{1, 1}},
		records.Proposal{Mechanism: "b", Params: map[string]string{"x": "2"}}.Key(): {{1, 3}},
	}}
	cfg := DefaultPolicyConfig()
	cfg.Features = 2
	p, err := NewPolicy(cat, cfg, nil)
	require.NoError(t, err)
	require.NoError(t, p.UseFeatures(feats))
	p.theta[p.lay.fOff+1], p.theta[p.lay.fOff+2+1] = 0.5, 0.5
	s := records.State{Task: records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 2, SeedNoise: 0.01}}
	sig := func(z float64) float64 { return 1 / (1 + math.Exp(-z)) }
	for _, temp := range []float64{1, 2} {
		b2 := Sample{Proposal: records.Proposal{Mechanism: "b", Params: map[string]string{"x": "2"}}, Temperature: temp}
		lp, err := p.Score(context.Background(), s, b2)
		require.NoError(t, err)
		require.InDelta(t, math.Log(sig(1/temp)), lp[0], 1e-12)
		require.InDelta(t, math.Log(sig(1/temp)), lp[1], 1e-12)
		a := Sample{Proposal: records.Proposal{Mechanism: "a"}, Temperature: temp}
		lp, err = p.Score(context.Background(), s, a)
		require.NoError(t, err)
		require.InDelta(t, math.Log(1-sig(1/temp)), lp[0], 1e-12)
	}
	probs := p.CardProbs(s)
	require.InDelta(t, sig(1), probs[1], 1e-12)
}

func TestSharedFeaturesGradientMatchesFiniteDifferences(t *testing.T) {
	// The shared weights' gradient: ∂ log π(k)/∂a = Σ_j (1[j=k] − π_j)·φ̄_j / T.
	for _, temp := range []float64{1, 0.7} {
		t.Run(fmt.Sprintf("T=%g", temp), func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			cfg.InitStd, cfg.Temperature, cfg.DescriptorBuckets = 0.5, temp, 16
			p := newFeaturedPolicy(t, cfg, 12, 31)
			rng := rand.New(rand.NewPCG(32, 33))
			for range 8 {
				s := randomState(rng, p.cat)
				smp, err := p.Propose(context.Background(), s, 1, rng)
				require.NoError(t, err)
				toks, err := p.lay.encode(smp[0])
				require.NoError(t, err)
				f, grad, _ := weightedLogProb(t, p, s, toks, temp, rng)
				shared := 0
				for _, g := range grad[p.lay.fOff:] {
					if g != 0 {
						shared++
					}
				}
				require.Positive(t, shared, "the shared weights get a gradient")
				checkGradient(t, p, f, grad, rng)
				requireFiniteDifferences(t, p, f, grad, seq(p.lay.fOff, p.lay.nParams), 1e-6, 1e-5)
			}
		})
	}
}

func seq(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestSharedFeaturesDAPOGradient(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.InitStd, cfg.Hidden = 0.5, 3
	p := newFeaturedPolicy(t, cfg, 8, 41)
	rng := rand.New(rand.NewPCG(42, 43))
	batch := dapoBatch(t, p, rng, 16)
	res, grad, f := dapoLoss(t, p, batch)
	require.InDelta(t, res.Loss, f(), 0)
	checkGradient(t, p, f, grad, rng)
	requireFiniteDifferences(t, p, f, grad, seq(p.lay.fOff, p.lay.nParams), 1e-6, 1e-5)
}

func TestSharedFeaturesRefusals(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultPolicyConfig()
	cfg.Features = 4
	p, err := NewPolicy(SyntheticCatalogue(6), cfg, nil)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	s := randomState(rng, p.cat)
	_, err = p.Propose(ctx, s, 1, rng)
	require.ErrorIs(t, err, ErrFeatures, "no component attached")
	require.ErrorIs(t, p.UseFeatures(hashFeatures{5}), ErrFeatures, "another length")
	require.ErrorIs(t, p.UseFeatures(nil), ErrFeatures)
	bad := tableFeatures{n: 4, rows: map[string][]Feature{records.Proposal{Mechanism: "card-00"}.Key(): {{4, 1}}}}
	require.NoError(t, p.UseFeatures(bad))
	_, err = p.Propose(ctx, s, 1, rng)
	require.ErrorIs(t, err, ErrFeatures, "an index out of range")
	nan := tableFeatures{n: 4, rows: map[string][]Feature{records.Proposal{Mechanism: "card-00"}.Key(): {{0, math.NaN()}}}}
	require.NoError(t, p.UseFeatures(nan))
	_, err = p.Score(ctx, s, Sample{Proposal: records.Proposal{Mechanism: "card-00"}})
	require.ErrorIs(t, err, ErrFeatures, "a value that is not finite")
	cfg.Features = -1
	_, err = NewPolicy(SyntheticCatalogue(6), cfg, nil)
	require.ErrorIs(t, err, ErrConfig)
}

func TestSharedFeaturesCheckpoint(t *testing.T) {
	// A checkpoint carries the shared weights; the component is attached
	// again after UnmarshalBinary on a zero Policy, and the restored policy
	// scores every sample as the original does.
	ctx := context.Background()
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.3
	p := newFeaturedPolicy(t, cfg, 6, 51)
	data, err := p.MarshalBinary()
	require.NoError(t, err)
	var q Policy
	require.NoError(t, q.UnmarshalBinary(data))
	rng := rand.New(rand.NewPCG(52, 53))
	s := randomState(rng, p.cat)
	_, err = q.Propose(ctx, s, 1, rng)
	require.ErrorIs(t, err, ErrFeatures)
	require.NoError(t, q.UseFeatures(hashFeatures{6}))
	smp, err := p.Propose(ctx, s, 16, rng)
	require.NoError(t, err)
	for _, x := range smp {
		lp, err := q.Score(ctx, s, x)
		require.NoError(t, err)
		require.Equal(t, x.LogProbs, lp)
	}
	// A policy keeps its component across a checkpoint of its own length.
	require.NoError(t, q.UnmarshalBinary(data))
	_, err = q.Propose(ctx, s, 1, rng)
	require.NoError(t, err)
}

func TestNoFeaturesKeepsTheLayout(t *testing.T) {
	// Features = 0 adds no parameter: the layout of every earlier policy.
	cfg := DefaultPolicyConfig()
	p := newRandomPolicy(t, cfg, 61)
	cfg.Features = 5
	q := newRandomPolicy(t, cfg, 61)
	require.Equal(t, p.lay.nParams+10, q.lay.nParams)
	require.Equal(t, p.theta, q.theta[:p.lay.nParams])
}
