package dapo_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/reward"
)

// BenchmarkRollout measures one rollout's pure math: reward shaping,
// mean-centred advantages and the token-level loss with its gradient for
// 256 states × 8 proposals of 8 tokens each (METHOD.md §1 Policy
// optimisation). Run with -cpu 1.
func BenchmarkRollout(b *testing.B) {
	const states, g, tokens = 256, 8, 8
	rng := rand.New(rand.NewPCG(1, 2))
	mechs := []string{"lr", "wd", "warmup", "norm", "act", "none"}
	groups := make([][]reward.Candidate, states)
	scales := make([]float64, states)
	for s := range groups {
		groups[s] = make([]reward.Candidate, g)
		pred := make([]float64, g)
		for i := range groups[s] {
			m := mechs[rng.IntN(len(mechs))]
			pred[i] = rng.NormFloat64() * 3
			groups[s][i] = reward.Candidate{
				Predicted: pred[i], Valid: rng.Float64() > 0.1, NoOp: m == "none",
				Key: fmt.Sprintf("%s{x=%d}", m, rng.IntN(4)), Mechanism: m,
			}
		}
		scales[s] = reward.TaskScale(0.5, pred)
	}
	old := make([][]float64, states*g)
	for i := range old {
		old[i] = make([]float64, tokens)
		for t := range old[i] {
			old[i][t] = -rng.ExpFloat64()
		}
	}
	cfg, lcfg := reward.DefaultConfig(), dapo.DefaultLossConfig()
	seqs := make([]dapo.Sequence, states*g)
	newLP := make([][]float64, states*g)
	for i := range newLP {
		newLP[i] = make([]float64, tokens)
		for t := range newLP[i] {
			newLP[i][t] = old[i][t] + 0.1*rng.NormFloat64()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for s, grp := range groups {
			r := reward.Shape(cfg, scales[s], grp)
			dapo.AdvantagesInto(r, r, dapo.MeanCentered, 0)
			for i, a := range r {
				k := s*g + i
				seqs[k] = dapo.Sequence{OldLogProbs: old[k], NewLogProbs: newLP[k], Advantage: a}
			}
		}
		dapo.Loss(lcfg, seqs)
	}
}
