package lm2lm_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
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
	l, err := lab.New(lab.DefaultConfig(), store) // or your own Builder + Executor
	tourCheck(err)
	pool, err := builder.NewPool(l, builder.PoolConfig{Slots: 2, Store: store}) // idempotent, bounded
	tourCheck(err)
	tasks, err := l.Tasks(ctx) // reference runs: b_e and σ_e of every task
	tourCheck(err)
	var train, heldOut []records.Task
	for _, t := range tasks {
		if t.Split == records.Train {
			train = append(train, t)
		} else {
			heldOut = append(heldOut, t)
		}
	}
	cat := lab.Catalogue() // mechanism cards as data

	// M_0: 100 real records of catalogue changes drawn uniformly.
	var draws []baseline.Draw
	for _, c := range records.DrawChanges(rand.New(rand.NewPCG(1, 0)), train, cat, 100, nil) {
		draws = append(draws, baseline.Draw{Task: c.Task, Proposal: c.Proposal})
	}
	recs, _, err := baseline.RunDraws(ctx, l, pool, draws, 2)
	tourCheck(err)
	m0, err := records.NewEvidence(recs...)
	tourCheck(err)

	wcfg := rwm.DefaultEmbeddedConfig()
	wcfg.Priors, wcfg.Cards = rwm.PriorsFromCards(cat), cat
	world, err := rwm.NewEmbedded(wcfg) // or rwm/openai over your LLM server
	tourCheck(err)
	policy, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil) // or proposer/openai
	tourCheck(err)
	tr, err := lm2lm.New(lm2lm.DefaultConfig(), lm2lm.Components{
		Policy: policy, World: world, Builder: l, Executor: pool, Tasks: train, Evidence: m0,
	})
	tourCheck(err)
	_, err = tr.Run(ctx, nil) // 96 DAPO steps, calibration at steps 16, 40 and 64
	tourCheck(err)
	eval, err := lm2lm.Evaluate(ctx, lm2lm.DefaultEvalConfig(), policy, l, pool, heldOut, nil) // real runs
	tourCheck(err)
	fmt.Printf("Avg@4 %+.2f σ_e, Best@4 %+.2f σ_e\n", eval.AvgK, eval.BestK)
}

// tourCheck stops the tour at the first error.
func tourCheck(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
