package reward_test

import (
	"fmt"

	"github.com/lm2lm/lm2lm/reward"
)

func ExampleShape() {
	cfg := reward.DefaultConfig()
	cfg.DiversityScale = 0 // show rules 1–3 alone
	predicted := []float64{0.9, -0.3, 2.4, 0.9}
	tau := reward.TaskScale(0.3, predicted) // MAD 0.6: 1.4826·0.6 ≈ 0.89 > σ_e = 0.3
	group := []reward.Candidate{
		{Predicted: 0.9, Valid: true, Key: "lr{factor=2}", Mechanism: "lr"},
		{Predicted: -0.3, Valid: true, Key: "wd{x=0.1}", Mechanism: "wd"},
		{Predicted: 2.4, Valid: false, Mechanism: "arch"},                   // failed to build
		{Predicted: 0.9, Valid: true, Key: "lr{factor=2}", Mechanism: "lr"}, // duplicate
	}
	fmt.Printf("tau %.4f\n", tau)
	for _, r := range reward.Shape(cfg, tau, group) {
		fmt.Printf("%.3f\n", r)
	}
	// Output:
	// tau 0.8896
	// 1.012
	// -0.337
	// -6.000
	// -1.337
}

func ExampleLadderScore() {
	// WMRL's ladder (METHOD.md §2); a valid submission's q is its
	// leaderboard percentile.
	q := reward.Percentile(0.93, []float64{0.6, 0.8, 0.9, 0.95}, true) // beats 3 of 4
	for _, s := range reward.Statuses() {
		score, _ := reward.LadderScore(s, q)
		fmt.Printf("%-11s %.3f\n", s, score)
	}
	mid, _ := reward.DefaultQualityTable().Quality(reward.Mid)
	predicted, _ := reward.LadderScore(reward.ValidSubmission, mid)
	fmt.Printf("predicted valid, bucket mid: %.4f\n", predicted)
	// Output:
	// malformed   0.000
	// syntax_err  0.000
	// runtime_err 0.100
	// ran_no_sub  0.200
	// valid       0.875
	// predicted valid, bucket mid: 0.8125
}
