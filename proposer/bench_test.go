package proposer_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// BenchmarkPropose measures sampling: one op is one state's group of
// G = 8 proposals on the lab's catalogue; samples/s is reported.
func BenchmarkPropose(b *testing.B) {
	benchPropose(b, newLabPolicy(b, func(c *proposer.PolicyConfig) { c.InitStd = 0.3 }))
}

// BenchmarkProposeHidden32 is BenchmarkPropose with a hidden layer of 32
// units (PolicyConfig.Hidden).
func BenchmarkProposeHidden32(b *testing.B) {
	benchPropose(b, newLabPolicy(b, func(c *proposer.PolicyConfig) { c.InitStd, c.Hidden = 0.3, 32 }))
}

func benchPropose(b *testing.B, p *proposer.Policy) {
	rng := rand.New(rand.NewPCG(1, 1))
	states := make([]records.State, 64)
	for i := range states {
		states[i] = randomLabState(rng, lab.Catalogue())
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := p.Propose(ctx, states[i%len(states)], 8, rng); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "samples/s")
}

// batch256x8 samples the paper's batch shape (METHOD.md §1 Policy
// optimisation: 256 states × G = 8) with rewards of the lab cards' priors
// and mean-centred advantages.
func batch256x8(b *testing.B, p *proposer.Policy) []proposer.Item {
	rng := rand.New(rand.NewPCG(2, 2))
	cat := lab.Catalogue()
	prior := map[string]float64{}
	for _, c := range cat {
		prior[c.Mechanism] = c.Prior.Mean
	}
	batch := make([]proposer.Item, 0, 256*8)
	for range 256 {
		s := randomLabState(rng, cat)
		smp, err := p.Propose(context.Background(), s, 8, rng)
		if err != nil {
			b.Fatal(err)
		}
		r := make([]float64, 8)
		for i, x := range smp {
			r[i] = prior[x.Proposal.Mechanism]
		}
		for i, a := range dapo.Advantages(r, dapo.MeanCentered, 0) {
			batch = append(batch, proposer.Item{State: s, Sample: smp[i], Advantage: a})
		}
	}
	return batch
}

// BenchmarkUpdate256x8 measures one DAPO Update on a 256 × 8 batch
// (2048 samples); the same batch is reused, as the paper reuses a rollout
// for 8 steps.
func BenchmarkUpdate256x8(b *testing.B) {
	benchUpdate(b, newLabPolicy(b, func(c *proposer.PolicyConfig) { c.InitStd = 0.3 }))
}

// BenchmarkUpdate256x8Hidden32 is BenchmarkUpdate256x8 with a hidden layer
// of 32 units (PolicyConfig.Hidden).
func BenchmarkUpdate256x8Hidden32(b *testing.B) {
	benchUpdate(b, newLabPolicy(b, func(c *proposer.PolicyConfig) { c.InitStd, c.Hidden = 0.3, 32 }))
}

func benchUpdate(b *testing.B, p *proposer.Policy) {
	batch := batch256x8(b, p)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Update(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRollout256x8 measures sampling a whole 256 × 8 rollout.
func BenchmarkRollout256x8(b *testing.B) {
	p := newLabPolicy(b, func(c *proposer.PolicyConfig) { c.InitStd = 0.3 })
	rng := rand.New(rand.NewPCG(3, 3))
	states := make([]records.State, 256)
	for i := range states {
		states[i] = randomLabState(rng, lab.Catalogue())
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, s := range states {
			if _, err := p.Propose(ctx, s, 8, rng); err != nil {
				b.Fatal(err)
			}
		}
	}
}
