// Package servelab wires the environment service over the embedded lab:
// the lab's tasks (reference runs), M_0 and the validated setting's world
// model, as cmd/lm2lm-serve and examples/llm-rl run it.
package servelab

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/serve"
)

// Config sizes the lab the service runs on.
type Config struct {
	Train    int    // lab v2 training tasks per family (lab.SuiteSizes.Train)
	Test     int    // in-distribution held-out tasks per family (lab.SuiteSizes.TestIn)
	M0       int    // M_0: catalogue changes drawn uniformly over the training tasks and run for real
	Seed     uint64 // seeds M_0's draws
	Parallel int    // lab runs and pool slots at once
}

// Components makes the embedded lab over store, runs (or reads back from
// store) its reference runs and M_0, and returns the service's components
// over it with the number of M_0 runs paid now. Progress lines go to w.
func Components(ctx context.Context, c Config, store records.Store, w io.Writer) (serve.Components, int, error) {
	lcfg := lab.DefaultConfig()
	lcfg.Parallel = c.Parallel
	suite := lab.GenerateSuite(lab.DefaultSpace(), lab.SuiteSizes{Train: c.Train, TestIn: c.Test}, lab.DefaultSuiteSeed)
	lcfg.Tasks = append(append([]lab.TaskSpec(nil), suite.Train...), suite.Test()...)
	l, err := lab.New(lcfg, store)
	if err != nil {
		return serve.Components{}, 0, err
	}
	pool, err := builder.NewPool(l, builder.PoolConfig{Slots: int64(c.Parallel), MaxAttempts: 1, Store: store})
	if err != nil {
		return serve.Components{}, 0, err
	}
	fmt.Fprintf(w, "reference runs of %d tasks ...\n", len(lcfg.Tasks))
	tasks, left, err := l.Ready(ctx, l.IDs(""), nil)
	if err != nil {
		return serve.Components{}, 0, err
	}
	for _, x := range left {
		fmt.Fprintf(w, "task %s left out: %v\n", x.ID, x.Err)
	}
	var train, held []records.Task
	for _, t := range tasks {
		if t.Split == records.Train {
			train = append(train, t)
		} else {
			held = append(held, t)
		}
	}
	var draws []baseline.Draw
	for _, it := range records.DrawChanges(rand.New(rand.NewPCG(c.Seed, 0x6d30)), train, lab.Catalogue(), c.M0, nil) {
		draws = append(draws, baseline.Draw{Task: it.Task, Proposal: it.Proposal})
	}
	recs, spent, err := baseline.RunDraws(ctx, l, pool, draws, c.Parallel)
	if err != nil {
		return serve.Components{}, 0, err
	}
	m0, err := records.NewEvidence(recs...)
	if err != nil {
		return serve.Components{}, 0, err
	}
	fmt.Fprintf(w, "%d training and %d held-out tasks; M_0 %d records (%d runs paid now)\n", len(train), len(held), m0.Len(), spent.Runs)
	world, err := setting.Validated().NewWorld(l)
	if err != nil {
		return serve.Components{}, 0, err
	}
	return serve.Components{World: world, Builder: l, Executor: pool,
		Tasks: train, HeldOut: held, Evidence: m0, Catalogue: lab.Catalogue()}, spent.Runs, nil
}
