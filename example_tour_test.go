package lm2lm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/labenv"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Example_tour is the README's short tour: the whole method on the
// embedded lab, every real run a CPU training of a tiny language model
// kept in a durable store (METHOD.md §1). It is compiled, not run: with the
// default configuration it trains a few hundred tiny models
// (go run ./examples/lm2lm runs the same with profiles).
func Example_tour() {
	ctx := context.Background()
	store, err := records.OpenFile("out/records.jsonl", records.DefaultFileConfig()) // durable, crash-safe
	tourCheck(err)
	defer store.Close()
	env, err := labenv.Open(lab.DefaultConfig(), store) // the embedded lab; or your own environment.Environment
	tourCheck(err)
	// Reference runs (b_e and σ_e of every task), the training and held-out
	// split, and M_0: 100 real records of catalogue changes drawn uniformly.
	prep, err := environment.Prepare(ctx, env, environment.Options{M0: 100, Seed: 1, Parallel: 2})
	tourCheck(err)
	cat := env.Catalogue() // mechanism cards as data

	wcfg := rwm.DefaultEmbeddedConfig()
	wcfg.Priors, wcfg.Cards = rwm.PriorsFromCards(cat), cat
	world, err := rwm.NewEmbedded(wcfg) // or rwm/openai over your LLM server
	tourCheck(err)
	policy, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil) // or proposer/openai
	tourCheck(err)
	tr, err := lm2lm.New(lm2lm.DefaultConfig(), lm2lm.Components{
		Policy: policy, World: world, Builder: env.Builder(), Executor: env.Executor(), Tasks: prep.Train, Evidence: prep.M0,
	})
	tourCheck(err)
	_, err = tr.Run(ctx, nil) // 96 DAPO steps, calibration at steps 16, 40 and 64
	tourCheck(err)
	eval, err := lm2lm.Evaluate(ctx, lm2lm.DefaultEvalConfig(), policy, env.Builder(), env.Executor(), prep.HeldOut, nil) // real runs
	tourCheck(err)
	fmt.Printf("Avg@4 %+.2f σ_e, Best@4 %+.2f σ_e\n", eval.AvgK, eval.BestK)
}

// tourCheck stops the tour at the first error.
func tourCheck(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
