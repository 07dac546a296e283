package proposer

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// TestPropertySamplesAreScored checks, for random catalogues, configs,
// states and seeds: a sample's LogProbs are what Score recomputes, every
// log-prob is finite and ≤ 0, the sample's tokens are what Encode emits
// for its proposal, and the card distribution sums to 1.
func TestPropertySamplesAreScored(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cards := rapid.IntRange(1, 30).Draw(rt, "cards")
		cfg := DefaultPolicyConfig()
		cfg.Temperature = rapid.Float64Range(0.2, 3).Draw(rt, "temperature")
		cfg.InitStd = rapid.Float64Range(0, 2).Draw(rt, "initStd")
		cfg.NoChange = rapid.Bool().Draw(rt, "noChange")
		cfg.FamilyBuckets = rapid.IntRange(1, 64).Draw(rt, "buckets")
		seed := rapid.Uint64().Draw(rt, "seed")
		rng := rand.New(rand.NewPCG(seed, 3))
		p, err := NewPolicy(SyntheticCatalogue(cards), cfg, rng)
		if err != nil {
			rt.Fatal(err)
		}
		ctx := context.Background()
		s := randomState(rng, p.cat)
		var total float64
		for _, pk := range p.CardProbs(s) {
			total += pk
		}
		if math.Abs(total-1) > 1e-12 {
			rt.Fatalf("card probabilities sum to %v", total)
		}
		smp, err := p.Propose(ctx, s, 8, rng)
		if err != nil {
			rt.Fatal(err)
		}
		for _, x := range smp {
			got, err := p.Score(ctx, s, x)
			if err != nil {
				rt.Fatal(err)
			}
			for i, lp := range x.LogProbs {
				if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 0 {
					rt.Fatalf("log-prob %v of %v", lp, x.Tokens)
				}
				if got[i] != lp {
					rt.Fatalf("Score %v != sampled log-probs %v for %v", got, x.LogProbs, x.Tokens)
				}
			}
			toks, err := p.Encode(x.Proposal)
			if err != nil {
				rt.Fatal(err)
			}
			for i := range toks {
				if toks[i] != x.Tokens[i] {
					rt.Fatalf("Encode %v != tokens %v", toks, x.Tokens)
				}
			}
		}
	})
}
