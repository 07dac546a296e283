package openai

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/lm2lm/lm2lm/internal/oaitest"
)

// BenchmarkPropose8Loopback measures one Propose of G = 8 samples with
// log-probs against the in-process fake server (METHOD.md §1 Policy
// optimisation: G = 8); it reports samples per second.
func BenchmarkPropose8Loopback(b *testing.B) {
	srv := oaitest.New(b, fakePolicy)
	p, err := New(testConfig(srv, &sleeps{}))
	if err != nil {
		b.Fatal(err)
	}
	s := state()
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		if _, err := p.Propose(context.Background(), s, 8, rng); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "samples/s")
}
