package loop_test

import (
	"fmt"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Example is the loop a driver writes: draw states, sample them, ask the
// world model what Ready names, score, observe the step, execute the runs
// Ready names and absorb them, then train on the advantages. Here the
// policy always proposes the same two changes, the world model is a table
// of gains and a real run measures a fixed gain. At step 1 the calibration
// point runs the top-rated change, b, and the rollout is scored again
// under the new M. Its state's history holds step 0's synthetic record of
// b (synthetic state expansion), and repeating the history is a duplicate
// (METHOD.md §1 Reward 3), so a leads.
func Example() {
	task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 3, SeedNoise: 0.5, Budget: 100}
	lever := func(m string) records.Proposal {
		return records.Proposal{Mechanism: m, Params: map[string]string{"level": "1"}}
	}
	m0, _ := records.NewEvidence(records.Record{Task: task, Proposal: lever("z"), Gain: 0.1, Loss: 2.9, Source: records.Real})
	gain := map[string]float64{"a": 0.5, "b": 1.0}

	cfg := loop.DefaultConfig()
	cfg.Quota, cfg.Candidates = 1, 1
	cfg.Reward.DiversityScale = 0
	cfg.Schedule = calibrate.Schedule{Steps: []int{1}, Budgets: []int{1}}
	l, err := loop.New(cfg, loop.Setup{Tasks: []records.Task{task}, Evidence: m0})
	if err != nil {
		fmt.Println(err)
		return
	}
	for step := 0; step < 2; step++ {
		states := l.Draw(1)
		_ = l.Sources(len(states)) // policy.Propose(ctx, state, G, rand.New(rand.NewPCG(src[0], src[1])))
		gs := []loop.Group{{State: states[0], Samples: []proposer.Sample{{Proposal: lever("a")}, {Proposal: lever("b")}}}}
		score := func() loop.Scored {
			var preds []loop.Prediction // world.Predict(ctx, j.Query) per job
			for _, j := range l.Ready(gs...).Predict {
				preds = append(preds, loop.Prediction{Prediction: rwm.Prediction{Valid: true, Gain: gain[j.Query.Proposal.Mechanism]}})
			}
			sc, err := l.Score(gs, preds)
			if err != nil {
				panic(err)
			}
			l.Observe(step)
			return sc
		}
		sc := score()
		if rd := l.Ready(); rd.Kind == loop.CalibrationRuns {
			var runs []loop.RealRun // build and execute each job for real
			for _, j := range rd.Execute {
				r := records.Record{Task: j.Change.Task, Proposal: j.Change.Proposal, Gain: 0.2, Loss: 2.8, Source: records.Real}
				runs = append(runs, loop.RealRun{Record: r, Measured: true, Ran: true})
			}
			ab, _ := l.Absorb(runs)
			fmt.Printf("step %d: calibration ran %s, M holds %d records\n", step, rd.Execute[0].Change.Proposal.Mechanism, l.Status().Evidence.Len())
			fmt.Printf("step %d: predicted reward %.1f, real %.1f\n", step, ab.Calibration.Predicted[0][0], ab.Calibration.Real[0][0])
			sc = score() // the segment's new reward function r(·; M_1)
		}
		_ = l.Expand(time.Time{}) // the batch is final: its predictions join the pool
		fmt.Printf("step %d: advantages %.1f %.1f\n", step, sc.Groups[0].Advantages[0], sc.Groups[0].Advantages[1])
		// policy.Update(ctx, the kept groups' samples with their advantages)
	}
	// Output:
	// step 0: advantages -0.5 0.5
	// step 1: calibration ran b, M holds 2 records
	// step 1: predicted reward 2.0, real 0.4
	// step 1: advantages 0.5 -0.5
}
