package proposertest_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

// A Scripted proposer stands in for a real one in tests of code that
// drives a proposer: it draws from its script with the caller's rng and
// records what it was asked and given.
func ExampleFromProposals() {
	fake := proposertest.FromProposals(
		records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}},
		records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "100"}},
	)
	s := proposertest.DefaultStates(nil)[0]
	smp, err := fake.Propose(context.Background(), s, 3, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		panic(err)
	}
	for _, x := range smp {
		fmt.Printf("%s %.3f\n", x.Tokens, x.LogProbs)
	}
	_, _ = fake.Update(context.Background(), []proposer.Item{{State: s, Sample: smp[0], Advantage: 0.5}})
	fmt.Println(len(fake.States()), "propose call,", len(fake.Updates()), "update of", len(fake.Updates()[0]), "item")
	// Output:
	// [lr-scale{factor=2}] [-0.693]
	// [warmup{steps=100}] [-0.693]
	// [warmup{steps=100}] [-0.693]
	// 1 propose call, 1 update of 1 item
}
