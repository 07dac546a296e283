package proposer_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

// allProposals enumerates every proposal of a catalogue: each card with
// every combination of its parameters' choices.
func allProposals(cat []records.Card) []records.Proposal {
	var out []records.Proposal
	for _, c := range cat {
		combos := []map[string]string{nil}
		for _, ps := range c.Params {
			var next []map[string]string
			for _, m := range combos {
				for _, ch := range ps.Choices {
					n := map[string]string{ps.Name: ch}
					for k, v := range m {
						n[k] = v
					}
					next = append(next, n)
				}
			}
			combos = next
		}
		for _, m := range combos {
			out = append(out, records.Proposal{Mechanism: c.Mechanism, Params: m})
		}
	}
	return out
}

// Top ranks every proposal of the catalogue by its sequence log-prob,
// which Score computes independently: the ranking is Score's, sorted,
// each proposal once, with Score's per-token log-probs; beyond the
// catalogue it starts again from the top.
func TestTopRanksTheWholeCatalogueByScore(t *testing.T) {
	cat := lab.Catalogue()
	p := newLabPolicy(t, func(c *proposer.PolicyConfig) { c.Hidden, c.InitStd, c.Temperature = 8, 0.4, 0.7 })
	rng := rand.New(rand.NewPCG(4, 5))
	ctx := context.Background()
	all := allProposals(cat)
	for trial := range 3 {
		s := randomLabState(rng, cat)
		top, err := p.Top(ctx, s, len(all)+3)
		require.NoError(t, err)
		require.Len(t, top, len(all)+3)
		seen := map[string]bool{}
		prev := math.Inf(1)
		for i, smp := range top[:len(all)] {
			require.NoError(t, proposertest.CheckSample(smp, proposertest.Options{RequireLogProbs: true, Catalogue: cat}))
			key := smp.Proposal.Key()
			require.False(t, seen[key], "trial %d: %s twice", trial, key)
			seen[key] = true
			lp, err := p.Score(ctx, s, smp)
			require.NoError(t, err)
			require.InDeltaSlice(t, lp, smp.LogProbs, 1e-12)
			var sum float64
			for _, l := range lp {
				sum += l
			}
			require.LessOrEqual(t, sum, prev+1e-12, "trial %d: rank %d", trial, i)
			prev = sum
			require.Equal(t, 0.7, smp.Temperature)
		}
		require.Len(t, seen, len(all), "every proposal of the catalogue")
		for i := range 3 {
			require.Equal(t, top[i].Proposal, top[len(all)+i].Proposal, "the ranking repeats")
		}
		again, err := p.Top(ctx, s, 4)
		require.NoError(t, err)
		require.Equal(t, top[:4], again, "deterministic")
	}
}

// A policy trained towards one proposal ranks it first, where sampling
// would still spread; Greedy proposes what Top ranks and ignores its rng.
func TestGreedyProposesTheMode(t *testing.T) {
	cat := lab.Catalogue()
	p := newLabPolicy(t, nil)
	s := randomLabState(rand.New(rand.NewPCG(1, 2)), cat)
	want := allProposals(cat)[7]
	for range 30 {
		_, err := p.Supervise(context.Background(), []proposer.Item{{State: s, Sample: proposer.Sample{Proposal: want}}})
		require.NoError(t, err)
	}
	g := proposer.Greedy{Policy: p}
	a, err := g.Propose(context.Background(), s, 4, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	b, err := g.Propose(context.Background(), s, 4, rand.New(rand.NewPCG(9, 9)))
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, want.Key(), a[0].Proposal.Key())
	keys := map[string]bool{}
	for _, x := range a {
		keys[x.Proposal.Key()] = true
	}
	require.Len(t, keys, 4, "distinct")
}

func TestTopErrors(t *testing.T) {
	ctx := context.Background()
	p := newLabPolicy(t, nil)
	s := randomLabState(rand.New(rand.NewPCG(1, 2)), lab.Catalogue())
	_, err := p.Top(ctx, s, -1)
	require.ErrorContains(t, err, "n = -1")
	none, err := p.Top(ctx, s, 0)
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = p.Top(ctx, records.State{}, 1)
	require.Error(t, err, "invalid state")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Top(cctx, s, 1)
	require.ErrorIs(t, err, context.Canceled)
	var zero proposer.Policy
	_, err = zero.Top(ctx, s, 1)
	require.ErrorIs(t, err, proposer.ErrNotInitialised)
	_, err = proposer.Greedy{}.Propose(ctx, s, 1, nil)
	require.ErrorIs(t, err, proposer.ErrNotInitialised)
	// A catalogue of 17 × 17 × 17 × 17 = 83,521 proposals is refused.
	var choices []string
	for i := range 17 {
		choices = append(choices, string(rune('a'+i)))
	}
	var ps []records.ParamSpec
	for i := range 4 {
		ps = append(ps, records.ParamSpec{Name: string(rune('p' + i)), Kind: "enum", Choices: choices})
	}
	big, err := proposer.NewPolicy([]records.Card{{Mechanism: "m", Params: ps}}, proposer.DefaultPolicyConfig(), nil)
	require.NoError(t, err)
	_, err = big.Top(ctx, s, 1)
	require.ErrorContains(t, err, "more than 65536 proposals")
	require.False(t, errors.Is(err, context.Canceled))
}

func TestGreedyConforms(t *testing.T) {
	proposertest.Run(t, func(t *testing.T) proposer.Proposer {
		return proposer.Greedy{Policy: newLabPolicy(t, func(c *proposer.PolicyConfig) { c.InitStd = 0.3 })}
	}, proposertest.Options{Deterministic: true, RequireLogProbs: true, Catalogue: lab.Catalogue()})
}
