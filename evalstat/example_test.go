package evalstat_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/evalstat"
)

// Two methods evaluated on the same two states under each of three seeds,
// two proposals per state, gains in σ_e units.
func Example() {
	base := []evalstat.Cell{
		{Seed: 1, State: "t1", Gains: []float64{-1, 0.5}}, {Seed: 1, State: "t2", Gains: []float64{-2, -1}},
		{Seed: 2, State: "t1", Gains: []float64{0, 1}}, {Seed: 2, State: "t2", Gains: []float64{-3, 0.5}},
		{Seed: 3, State: "t1", Gains: []float64{-0.5, -0.5}}, {Seed: 3, State: "t2", Gains: []float64{1, -1}},
	}
	trained := []evalstat.Cell{
		{Seed: 1, State: "t1", Gains: []float64{2, 3}}, {Seed: 1, State: "t2", Gains: []float64{0.5, -1}},
		{Seed: 2, State: "t1", Gains: []float64{1, 2.5}}, {Seed: 2, State: "t2", Gains: []float64{-0.5, 1}},
		{Seed: 3, State: "t1", Gains: []float64{4, -1}}, {Seed: 3, State: "t2", Gains: []float64{2, 2}},
	}
	cfg := evalstat.DefaultConfig()
	rng := rand.New(rand.NewPCG(1, 2))
	sb, _ := evalstat.Summarize(cfg, "Base", base, rng)
	st, _ := evalstat.Summarize(cfg, "trained", trained, rng)
	p, _ := evalstat.Compare(cfg, "trained", trained, "Base", base, rng)
	fmt.Println("Base Avg@2:", sb.AvgK)
	fmt.Println("trained Avg@2:", st.AvgK)
	fmt.Println("trained negative rate:", st.NegativeRate)
	fmt.Println("trained − Base:", p.Diff, "over", p.Pairs, "paired states")
	fmt.Printf("P(trained better): %.2f\n", p.PImprove.Point)
	// Output:
	// Base Avg@2: -0.50 [-1.08, +0.08]
	// trained Avg@2: +1.29 [+0.38, +2.00]
	// trained negative rate: +0.25 [+0.08, +0.42]
	// trained − Base: +1.79 [+1.33, +2.25] over 6 paired states
	// P(trained better): 1.00
}

// The robust scale: floors from the training tasks' seed noise, then the
// gains of an evaluation re-expressed before the statistics.
func ExampleScale() {
	train := []evalstat.Noise{{Family: "ar", Sigma: 0.01}, {Family: "ar", Sigma: 0.03}, {Family: "ar", Sigma: 0.02},
		{Family: "mdm", Sigma: 0.02}, {Family: "mdm", Sigma: 0.04}}
	s, err := evalstat.NewScale(train, 6)
	if err != nil {
		panic(err)
	}
	fmt.Printf("floors: ar %.3f, mdm %.3f, other families %.3f\n", s.Floor("ar"), s.Floor("mdm"), s.Floor("ssm"))
	// One bad proposal on a task whose σ_e is far below its family's.
	fmt.Printf("%+.2f σ_e → %+.2f\n", -1054.0, s.Apply("mdm", 0.0015, -1054))
	fmt.Printf("%+.2f σ_e → %+.2f\n", -100.0, s.Apply("mdm", 0.0015, -100))
	// A task as noisy as its family: unchanged within the clip.
	fmt.Printf("%+.2f σ_e → %+.2f\n", 2.5, s.Apply("ar", 0.03, 2.5))
	// Output:
	// floors: ar 0.020, mdm 0.030, other families 0.020
	// -1054.00 σ_e → -6.00
	// -100.00 σ_e → -5.00
	// +2.50 σ_e → +2.50
}

// The hierarchical bootstrap counts tasks: four tasks in two regions, two
// seeds, two states per task and seed, states of a task alike. The
// state-level interval treats the tasks as fixed and is narrower;
// SummarizeRegions reports each region apart.
func ExampleSummarizeRegions() {
	var cells []evalstat.Cell
	for _, seed := range []uint64{1, 2} {
		for k, v := range []float64{-1, 2, 0.5, 3} {
			task := fmt.Sprintf("task%d", k)
			region := []string{"in-distribution", "compute-rich"}[k/2]
			for i := range 2 {
				g := v + 0.25*float64(i) - 0.2*float64(seed)
				cells = append(cells, evalstat.Cell{Seed: seed, State: fmt.Sprintf("%s#%d", task, i),
					Stratum: region, Task: task, Gains: []float64{g}})
			}
		}
	}
	cfg := evalstat.DefaultConfig()
	state, _ := evalstat.Summarize(cfg, "m", cells, rand.New(rand.NewPCG(1, 2)))
	cfg.Scheme = evalstat.Hierarchical
	hier, _ := evalstat.Summarize(cfg, "m", cells, rand.New(rand.NewPCG(1, 2)))
	fmt.Println("state-level: ", state.AvgK)
	fmt.Println("hierarchical:", hier.AvgK)
	regions, _ := evalstat.SummarizeRegions(cfg, "m", cells, rand.New(rand.NewPCG(1, 2)))
	for _, r := range regions {
		fmt.Println(r.Region, r.AvgK)
	}
	// Output:
	// state-level:  +0.95 [+0.27, +1.66]
	// hierarchical: +0.95 [-0.44, +2.34]
	// in-distribution +0.33 [-1.28, +1.96]
	// compute-rich +1.57 [+0.22, +2.93]
}
