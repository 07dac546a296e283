package builder_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// A pool over any executor: the second request for a recorded run is
// answered from the store, and failures are told apart with errors.Is.
func ExamplePool() {
	exec := new(buildertest.Scripted) // a subprocess, Slurm or lab executor in real use
	cfg := builder.DefaultPoolConfig()
	cfg.Slots = 2
	cfg.Store = records.NewMemStore()
	cfg.PricePerDeviceHour = 3
	pool, err := builder.NewPool(exec, cfg)
	if err != nil {
		panic(err)
	}
	job := builder.Job{
		Task:     buildertest.Task("demo"),
		Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "1"}},
		Seed:     7,
	}
	for range 2 {
		out, err := pool.Execute(context.Background(), job)
		fmt.Printf("loss %.4f gain %.4f err %v\n", out.Loss, out.Gain, err)
	}
	job.Spec = buildertest.Spec{Behaviour: buildertest.Infeasible, Reason: "diverged"}.JSON()
	job.Seed = 8
	_, err = pool.Execute(context.Background(), job)
	fmt.Println(errors.Is(err, builder.ErrInfeasible), builder.Class(err) == builder.ErrInfeasible)
	t := pool.Ledger().Totals()
	fmt.Printf("executed %d, reused %d, infeasible %d\n", exec.Calls(), t.Reused, t.Infeasible)
	// Output:
	// loss 1.4478 gain 0.0522 err <nil>
	// loss 1.4478 gain 0.0522 err <nil>
	// true true
	// executed 2, reused 1, infeasible 1
}
