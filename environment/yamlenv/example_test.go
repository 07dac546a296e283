package yamlenv_test

import (
	"context"
	"fmt"
	"log"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/yamlenv"
)

// Example sets up an environment of a config file (docs/own-environment.md)
// as cmd/lm2lm does: open it, then run its reference stage and M_0
// through environment.Prepare. It is compiled, not run: the file names a
// training command.
func Example() {
	cfg, err := envconfig.Load("lm2lm.yaml")
	if err != nil {
		log.Fatal(err)
	}
	env, err := yamlenv.Open(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	prep, err := environment.Prepare(context.Background(), env, environment.Options{
		M0: cfg.M0.Size, Seed: cfg.M0.Seed, Parallel: int(cfg.Executor.Slots)})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range prep.References {
		fmt.Printf("%s b_e %.4g σ_e %.3g\n", r.Task.ID, r.Task.RefLoss, r.Task.SeedNoise)
	}
	fmt.Println(len(prep.Train), "training tasks,", prep.M0.Len(), "records in M_0")
}
