package baseline_test

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// BestKnown reuses the proposals whose real records were best on the most
// similar tasks: here the sibling tasks of family "fa" rank lr×2 first.
func ExampleBestKnown() {
	b, err := baseline.NewBestKnown(baseline.DefaultBestKnownConfig(), evidence())
	if err != nil {
		panic(err)
	}
	held := records.Task{ID: "a9", Family: "fa", Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 4, SeedNoise: 0.5}
	for _, r := range b.Rank(held)[:3] {
		fmt.Printf("%-16s %+.2f σ_e over %d records\n", r.Proposal.Key(), r.Mean, r.Records)
	}
	smp, _ := b.Propose(context.Background(), records.State{Task: held}, 1, nil)
	fmt.Println("proposes", smp[0].Proposal.Key(), "having read", proposer.RealRuns(b), "real runs")
	// Output:
	// lr{factor=2}     +1.00 σ_e over 3 records
	// qk{}             +0.67 σ_e over 3 records
	// warm{steps=100}  +0.67 σ_e over 3 records
	// proposes lr{factor=2} having read 15 real runs
}
