// Package servelab wires the environment service over the embedded lab:
// the lab's tasks (reference runs), M_0 and the validated setting's world
// model (or another named setting's, lab/setting), as cmd/lm2lm-serve and
// examples/llm-rl run it.
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
	"github.com/lm2lm/lm2lm/rwm"
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
	// Setting names the lab setting whose world model the service scores
	// with (setting.Lookup; "" = "validated"): its embedded model over the
	// lab, and under a setting with World.Local the calibration records
	// read as a local correction of it on M_0 (setting.TrainerWorld), as
	// the trainer reads them.
	Setting string
}

// Components makes the embedded lab over store, runs (or reads back from
// store) its reference runs and M_0, and returns the service's components
// over it with the number of M_0 runs paid now. Progress lines go to w.
func Components(ctx context.Context, c Config, store records.Store, w io.Writer) (serve.Components, int, error) {
	if _, err := c.setting(); err != nil {
		return serve.Components{}, 0, err
	}
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
	world, err := c.world(env.Lab(), p.M0)
	if err != nil {
		return serve.Components{}, 0, err
	}
	return serve.Components{World: world, Builder: env.Builder(), Executor: env.Executor(),
		Tasks: p.Train, HeldOut: p.HeldOut, Evidence: p.M0, Catalogue: env.Catalogue()}, p.M0Spent.Runs, nil
}

// setting is the named setting ("" = validated).
func (c Config) setting() (setting.Setting, error) {
	if c.Setting == "" {
		return setting.Validated(), nil
	}
	set, err := setting.Lookup(c.Setting)
	if err != nil {
		return set, fmt.Errorf("servelab: %w", err)
	}
	return set, nil
}

// world is the setting's world model over l, the trainer's reading of it
// for M_0 m0 (setting.TrainerWorld).
func (c Config) world(l *lab.Lab, m0 records.Evidence) (rwm.WorldModel, error) {
	set, err := c.setting()
	if err != nil {
		return nil, err
	}
	w, err := set.NewWorld(l)
	if err != nil {
		return nil, err
	}
	return set.TrainerWorld(w, m0)
}
