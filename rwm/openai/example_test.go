package openai_test

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/openai"
)

func Example() {
	// A stand-in for an OpenAI-compatible server (vLLM, SGLang, …).
	srv := oaitest.NewServer(func(oaitest.Request) oaitest.Reply {
		return oaitest.Text(`{"gain": 0.006, "q10": 0.001, "q90": 0.011, "valid": true, "reason": "longer warmup helped before"}`)
	})
	defer srv.Close()

	cfg := openai.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.URL(), "my-model" // or OPENAI_BASE_URL and LM2LM_MODEL
	m, err := openai.New(cfg)
	if err != nil {
		panic(err)
	}
	task := records.Task{ID: "ar-prose-s", Family: "ar-prose", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 1.52, SeedNoise: 0.004, Budget: 300}
	ev, err := records.NewEvidence(records.Record{Task: task, Proposal: records.Proposal{Mechanism: "warmup",
		Params: map[string]string{"steps": "50"}}, Gain: 0.007, Loss: 1.513, Source: records.Real})
	if err != nil {
		panic(err)
	}
	p, err := m.Predict(context.Background(), rwm.Query{Task: task, Evidence: ev,
		Proposal: records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "100"}}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("gain %.3f in [%.3f, %.3f]: %s\n", p.Gain, p.Low, p.High, p.Reason)
	// Output: gain 0.006 in [0.001, 0.011]: longer warmup helped before
}

func ExampleParsePrediction() {
	task := records.Task{ID: "t", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1.5, SeedNoise: 0.004}
	_, err := openai.ParsePrediction(`{"gain": 3.1, "q10": 2, "q90": 4, "valid": true, "reason": "huge"}`, task)
	fmt.Println(err != nil)
	p, err := openai.ParsePrediction("```json\n{\"gain\": 0.01, \"q10\": 0, \"q90\": 0.02, \"valid\": true, \"reason\": \"ok\"}\n```", task)
	fmt.Println(p.Gain, p.HasInterval, err)
	// Output:
	// true
	// 0.01 true <nil>
}
