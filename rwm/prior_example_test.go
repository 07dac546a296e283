package rwm_test

import (
	"context"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func ExampleFitPrior() {
	// A corpus of past experiments on 20 other tasks: a longer warm-up
	// gained 2·asinh(lr) − 1 σ_e, more on tasks with a higher learning
	// rate.
	ctx := context.Background()
	warmup := records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "100"}}
	newTask := func(id string, lr float64) records.Task {
		return records.Task{ID: id, Family: "ar", Split: records.Train, Metric: records.BitsPerByte,
			RefLoss: 1.5, SeedNoise: 0.01, Descriptors: map[string]float64{"lr": lr}}
	}
	var corpus []records.Record
	for i := range 20 {
		tk := newTask(fmt.Sprintf("past%02d", i), 0.5+0.1*float64(i))
		g := (2*math.Asinh(tk.Descriptors["lr"]) - 1) * tk.SeedNoise
		corpus = append(corpus, records.Record{Task: tk, Proposal: warmup, Gain: g, Loss: tk.RefLoss - g,
			Source: records.Real, Seeds: []uint64{1}})
	}

	// Fit, save, and load the prior read-only into the embedded model.
	base := rwm.DefaultEmbeddedConfig()
	prior, err := rwm.FitPrior(ctx, rwm.DefaultPriorFitConfig(base), corpus)
	if err != nil {
		fmt.Println(err)
		return
	}
	file, err := prior.MarshalBinary()
	if err != nil {
		fmt.Println(err)
		return
	}
	loaded, err := rwm.ReadPrior(file)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := loaded.Config(base)
	if err != nil {
		fmt.Println(err)
		return
	}
	wm, err := rwm.NewEmbedded(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}

	// A new task without records of its own: the prediction is the prior
	// mean. Its records then move it as without a prior.
	tk := newTask("new", 2)
	for _, n := range []int{0, 8} {
		var rs []records.Record
		for i := range n {
			rs = append(rs, records.Record{Task: tk, Proposal: warmup, Gain: -tk.SeedNoise, Loss: tk.RefLoss + tk.SeedNoise,
				Source: records.Real, Seeds: []uint64{uint64(i)}})
		}
		ev, err := records.NewEvidence(rs...)
		if err != nil {
			fmt.Println(err)
			return
		}
		p, err := wm.Predict(ctx, rwm.Query{Task: tk, Proposal: warmup, Evidence: ev})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%d records: %+.2f σ_e\n", n, p.Gain/tk.SeedNoise)
	}
	fmt.Printf("corpus truth: %+.2f σ_e; features: %q\n", 2*math.Asinh(2)-1, loaded.Names())
	// Output:
	// 0 records: +1.73 σ_e
	// 8 records: -0.99 σ_e
	// corpus truth: +1.89 σ_e; features: ["proposal|warmup{steps=100}|1" "proposal|warmup{steps=100}|lr" "mechanism|warmup|1" "mechanism|warmup|lr"]
}
