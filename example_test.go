package lm2lm_test

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Example wires the loop of METHOD.md §1 with the embedded policy and world
// model and a synthetic executor whose true gains are known (see oracle in
// trainer_test.go): 16 steps, two calibrations of 4 real runs each.
func Example() {
	ctx := context.Background()
	var m0 []records.Record
	for _, m := range []string{"wider", "lr", "decay"} {
		rec, _, _ := lm2lm.RunReal(ctx, oracle{}, oracle{}, tasks()[0],
			records.Proposal{Mechanism: m, Params: map[string]string{"level": "1"}})
		m0 = append(m0, rec)
	}
	evidence, _ := records.NewEvidence(m0...)
	policy, _ := proposer.NewPolicy(catalogue(), proposer.DefaultPolicyConfig(), nil)

	world, err := rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := lm2lm.DefaultConfig()
	cfg.Steps, cfg.States, cfg.DAPO.Quota = 16, 24, 16
	cfg.Schedule = calibrate.Schedule{Steps: []int{0, 8}, Budgets: []int{4, 4}}
	tr, err := lm2lm.New(cfg, lm2lm.Components{
		Policy: policy, World: world,
		Builder: oracle{}, Executor: oracle{}, Tasks: tasks(), Evidence: evidence,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := tr.Run(ctx, nil); err != nil {
		fmt.Println(err)
		return
	}
	_, runs := tr.Cost()
	fmt.Println("steps:", tr.Step())
	fmt.Println("real runs:", runs)
	fmt.Println("records in context:", tr.Evidence().Len())
	// Output:
	// steps: 16
	// real runs: 8
	// records in context: 11
}
