// Package servelab wires the environment service over the embedded lab:
// the lab's tasks (reference runs), M_0 and the validated setting's world
// model, as cmd/lm2lm-serve and examples/llm-rl run it.
package servelab

import (
	"context"
	"fmt"
	"io"

	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/labenv"
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
	// Split, when set, names a V3 split (lab.SplitNamed: "v3-val",
	// "v3-test"): the held-out tasks are that split's, the training tasks
	// the V2 suite's whole training split (as examples/compare -suite
	// v3-val runs them), and Train and Test are not used.
	Split string
}

// Components makes the embedded lab over store, runs (or reads back from
// store) its reference runs and M_0, and returns the service's components
// over it with the number of M_0 runs paid now. Progress lines go to w.
func Components(ctx context.Context, c Config, store records.Store, w io.Writer) (serve.Components, int, error) {
	lcfg := lab.DefaultConfig()
	lcfg.Parallel = c.Parallel
	lcfg.Tasks = labenv.Suite(lab.SuiteSizes{Train: c.Train, TestIn: c.Test})
	if c.Split != "" {
		sp, ok := lab.SplitNamed(c.Split)
		if !ok {
			return serve.Components{}, 0, fmt.Errorf("servelab: unknown split %q (%s or %s)", c.Split, lab.V3ValName, lab.V3TestName)
		}
		lcfg.Tasks = append(append([]lab.TaskSpec(nil), lab.SuiteV2(lab.DefaultSuiteSeed).Train...), sp.Tasks...)
	}
	env, err := labenv.Open(lcfg, store)
	if err != nil {
		return serve.Components{}, 0, err
	}
	fmt.Fprintf(w, "reference runs of %d tasks ...\n", len(lcfg.Tasks))
	p, err := environment.Prepare(ctx, env, environment.Options{M0: c.M0, Seed: c.Seed, Parallel: c.Parallel})
	if err != nil {
		return serve.Components{}, 0, err
	}
	for _, x := range p.LeftOut {
		fmt.Fprintf(w, "task %s left out: %v\n", x.ID, x.Err)
	}
	fmt.Fprintf(w, "%d training and %d held-out tasks; M_0 %d records (%d runs paid now)\n", len(p.Train), len(p.HeldOut), p.M0.Len(), p.M0Spent.Runs)
	world, err := setting.Validated().NewWorld(env.Lab())
	if err != nil {
		return serve.Components{}, 0, err
	}
	return serve.Components{World: world, Builder: env.Builder(), Executor: env.Executor(),
		Tasks: p.Train, HeldOut: p.HeldOut, Evidence: p.M0, Catalogue: env.Catalogue()}, p.M0Spent.Runs, nil
}
