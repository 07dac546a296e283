package lm2lm_test

import (
	"fmt"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// ExampleLoop is the Ready loop a driver writes: do what the loop asks,
// hand the answers back. Here the policy always proposes the same two
// changes and the world model is a table of gains. At step 2 the state's
// history holds step 1's synthetic record of b (synthetic state
// expansion), and repeating the history is a duplicate (METHOD.md §1
// Reward 3), so a leads.
func ExampleLoop() {
	task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 3, SeedNoise: 0.5, Budget: 100}
	lever := func(m string) records.Proposal {
		return records.Proposal{Mechanism: m, Params: map[string]string{"level": "1"}}
	}
	m0, _ := records.NewEvidence(records.Record{Task: task, Proposal: lever("z"), Gain: 0.1, Loss: 2.9, Source: records.Real})
	gain := map[string]float64{"a": 0.5, "b": 1.0}

	cfg := lm2lm.DefaultConfig()
	cfg.Steps, cfg.RolloutEvery, cfg.States = 2, 1, 1
	cfg.DAPO.GroupSize, cfg.DAPO.Quota = 2, 1
	cfg.Reward.DiversityScale = 0
	cfg.Calibration = lm2lm.Static
	loop, _ := lm2lm.NewLoop(cfg, []records.Task{task}, m0, nil)

	for {
		rd := loop.Ready()
		if rd.Need == lm2lm.NeedNothing {
			break
		}
		var a lm2lm.Answer
		switch rd.Need {
		case lm2lm.NeedSamples: // policy.Propose(ctx, j.State, j.N, j.Rand()) per job
			for range rd.Propose {
				a.Samples = append(a.Samples, []proposer.Sample{{Proposal: lever("a")}, {Proposal: lever("b")}})
			}
		case lm2lm.NeedPredictions: // world.Predict(ctx, j.Query) per job
			for _, j := range rd.Predict {
				a.Predictions = append(a.Predictions, lm2lm.Prediction{Prediction: rwm.Prediction{Valid: true, Gain: gain[j.Query.Proposal.Mechanism]}})
			}
		case lm2lm.NeedUpdate: // policy.Update(ctx, rd.Batch)
			fmt.Printf("step %d: advantages %.1f %.1f\n", rd.Step, rd.Batch[0].Advantage, rd.Batch[1].Advantage)
		}
		if _, _, err := loop.Advance(a); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("steps done:", loop.Step())
	// Output:
	// step 1: advantages -0.5 0.5
	// step 2: advantages 0.5 -0.5
	// steps done: 2
}

// ExampleWithUnmeasured adds a training task no real run measures: its
// states are drawn and rewarded by the world model like the measured
// task's (the world model here rates every change three times higher on
// it), and the calibration point's runs, at step 2, go to the measured
// task only.
func ExampleWithUnmeasured() {
	measured := records.Task{ID: "measured", Family: "f", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 3, SeedNoise: 0.5, Budget: 100}
	unmeasured := measured
	unmeasured.ID, unmeasured.Budget = "unmeasured", 300 // b_e and σ_e: the host's estimates
	lever := func(m string) records.Proposal {
		return records.Proposal{Mechanism: m, Params: map[string]string{"level": "1"}}
	}
	m0, _ := records.NewEvidence(records.Record{Task: measured, Proposal: lever("z"), Gain: 0.1, Loss: 2.9, Source: records.Real})

	cfg := lm2lm.DefaultConfig()
	cfg.Steps, cfg.RolloutEvery, cfg.States = 2, 1, 8
	cfg.DAPO.GroupSize, cfg.DAPO.Quota = 2, 1
	cfg.Schedule.Steps, cfg.Schedule.Budgets = []int{1}, []int{4}
	loop, err := lm2lm.NewLoop(cfg, []records.Task{measured}, m0, nil, lm2lm.WithUnmeasured(unmeasured))
	if err != nil {
		fmt.Println(err)
		return
	}
	states := map[string]int{}
	for {
		rd := loop.Ready()
		if rd.Need == lm2lm.NeedNothing {
			break
		}
		var a lm2lm.Answer
		switch rd.Need {
		case lm2lm.NeedSamples:
			for _, j := range rd.Propose {
				states[j.State.Task.ID]++
				a.Samples = append(a.Samples, []proposer.Sample{{Proposal: lever("a")}, {Proposal: lever("b")}})
			}
		case lm2lm.NeedPredictions:
			for _, j := range rd.Predict {
				g := map[string]float64{"a": 0.5, "b": 1.0}[j.Query.Proposal.Mechanism] * float64(j.Query.Task.Budget) / 100
				a.Predictions = append(a.Predictions, lm2lm.Prediction{Prediction: rwm.Prediction{Valid: true, Gain: g}})
			}
		case lm2lm.NeedRuns:
			for _, j := range rd.Execute {
				fmt.Println("real run:", j.Change.Task.ID, j.Change.Proposal.Mechanism)
				r := records.Record{Task: j.Change.Task, Proposal: j.Change.Proposal, Gain: 0.2, Loss: 2.8, Source: records.Real}
				a.Runs = append(a.Runs, lm2lm.RealRun{Record: r, Measured: true, Ran: true})
			}
		}
		if _, _, err := loop.Advance(a); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("states:", states["measured"] > 0, states["unmeasured"] > 0, states["measured"]+states["unmeasured"])
	// Output:
	// real run: measured b
	// real run: measured a
	// states: true true 16
}
