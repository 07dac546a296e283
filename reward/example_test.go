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
