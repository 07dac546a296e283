package model_test

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/lab/model"
)

func ExampleConfig_Validate() {
	cfg := model.DefaultConfig()
	cfg.Embed, cfg.Activation = 0, "swish"
	fmt.Println(cfg.Validate())
	// Output:
	// model: invalid config: Embed = 0, want 1..1024; Activation = "swish", want one of tanh, relu, gelu, silu
}

func ExampleTrain() {
	// A tiny run on a repeating text of 4 symbols.
	text := make([]byte, 400)
	for i := range text {
		text[i] = byte(i % 4)
	}
	cfg := model.DefaultConfig()
	cfg.Vocab, cfg.Context, cfg.Hidden, cfg.Steps, cfg.EvalWindows, cfg.LR = 4, 3, 16, 50, 64, 0.01
	r, err := model.Train(context.Background(), cfg, model.Data{Train: text, Val: text[:100]}, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.StepsRun, r.Diverged, r.Loss < 0.1, len(r.TrainLoss))
	// Output: 50 false true 50
}
