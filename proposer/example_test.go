package proposer_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// A policy over a three-card catalogue proposes token sequences with their
// log-probs, then learns from DAPO updates with mean-centred advantages
// (METHOD.md §1 Policy optimisation) that one card earns more.
func ExamplePolicy() {
	cat := []records.Card{
		{Mechanism: "lr-scale", Params: []records.ParamSpec{{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}}}},
		{Mechanism: "warmup", Params: []records.ParamSpec{{Name: "steps", Kind: "int", Choices: []string{"0", "50", "100"}}}},
		{Mechanism: "tie-embeddings"},
	}
	p, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil) // uniform start
	if err != nil {
		panic(err)
	}
	s := records.State{Task: records.Task{ID: "t1", Family: "ar-prose", Split: records.Train,
		Metric: records.BitsPerByte, RefLoss: 2.1, SeedNoise: 0.01, Budget: 300}}
	ctx, rng := context.Background(), rand.New(rand.NewPCG(1, 2))

	smp, err := p.Propose(ctx, s, 3, rng)
	if err != nil {
		panic(err)
	}
	for _, x := range smp {
		fmt.Printf("%-18s %q %.3f\n", x.Proposal.Key(), x.Tokens, x.LogProbs)
	}

	for range 10 {
		smp, _ := p.Propose(ctx, s, 8, rng)
		r := make([]float64, len(smp))
		for i, x := range smp {
			if x.Proposal.Mechanism == "tie-embeddings" {
				r[i] = 1
			}
		}
		batch := make([]proposer.Item, len(smp))
		for i, a := range dapo.Advantages(r, dapo.MeanCentered, 0) {
			batch[i] = proposer.Item{State: s, Sample: smp[i], Advantage: a}
		}
		if _, err := p.Update(ctx, batch); err != nil {
			panic(err)
		}
	}
	fmt.Printf("P(card) after 10 updates: %.2f\n", p.CardProbs(s))
	// Output:
	// tie-embeddings{}   ["tie-embeddings"] [-1.099]
	// warmup{steps=50}   ["warmup" "steps=50"] [-1.099 -1.099]
	// warmup{steps=100}  ["warmup" "steps=100"] [-1.099 -1.099]
	// P(card) after 10 updates: [0.02 0.01 0.97]
}

// Top decodes a policy's most probable distinct proposals instead of
// sampling: after a few supervised steps towards warm-up 50, it comes
// first, then the others by sequence log-prob (a card without parameters
// is one token, so tie-embeddings outranks the other warm-ups). Greedy
// wraps it as a Proposer.
func ExamplePolicy_Top() {
	cat := []records.Card{
		{Mechanism: "lr-scale", Params: []records.ParamSpec{{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}}}},
		{Mechanism: "warmup", Params: []records.ParamSpec{{Name: "steps", Kind: "int", Choices: []string{"0", "50", "100"}}}},
		{Mechanism: "tie-embeddings"},
	}
	p, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil)
	if err != nil {
		panic(err)
	}
	s := records.State{Task: records.Task{ID: "t1", Family: "ar-prose", Split: records.Train,
		Metric: records.BitsPerByte, RefLoss: 2.1, SeedNoise: 0.01, Budget: 300}}
	ctx := context.Background()
	want := records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "50"}}
	for range 5 {
		if _, err := p.Supervise(ctx, []proposer.Item{{State: s, Sample: proposer.Sample{Proposal: want}}}); err != nil {
			panic(err)
		}
	}
	top, err := proposer.Greedy{Policy: p}.Propose(ctx, s, 3, nil)
	if err != nil {
		panic(err)
	}
	for _, x := range top {
		fmt.Printf("%-16s %.3f\n", x.Proposal.Key(), x.LogProbs[0]+sum(x.LogProbs[1:]))
	}
	// Output:
	// warmup{steps=50} -0.336
	// tie-embeddings{} -2.559
	// warmup{steps=0}  -2.727
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}
