package openai_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
)

func Example() {
	// A stand-in for an OpenAI-compatible server that honours n and logprobs.
	srv := oaitest.NewServer(func(oaitest.Request) oaitest.Reply {
		return oaitest.Text(
			`{"mechanism": "warmup", "params": {"steps": 200}, "rationale": "short warmup was unstable"}`,
			`I suggest {"mechanism": "lr-scale", "params": {"factor": "0.5"}} because the loss spiked.`,
			`Let's make the model deeper.`)
	})
	defer srv.Close()

	cfg := openai.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.URL(), "my-policy" // or OPENAI_BASE_URL and LM2LM_MODEL
	cfg.Catalogue = []records.Card{
		{Mechanism: "warmup", Params: []records.ParamSpec{{Name: "steps", Kind: "int", Choices: []string{"50", "200"}}}},
		{Mechanism: "lr-scale", Params: []records.ParamSpec{{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}}}},
	}
	p, err := openai.New(cfg)
	if err != nil {
		panic(err)
	}
	s := records.State{Task: records.Task{ID: "ar-prose-s", Family: "ar-prose", Split: records.Train,
		Metric: records.BitsPerByte, RefLoss: 1.52, SeedNoise: 0.004, Budget: 300}}
	samples, err := p.Propose(context.Background(), s, 3, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		panic(err)
	}
	var items []proposer.Item
	for i, smp := range samples {
		if smp.Invalid {
			fmt.Printf("%d invalid: %s\n", i, smp.Reason)
		} else {
			fmt.Printf("%d %s (%d tokens with log-probs)\n", i, smp.Proposal.Key(), len(smp.LogProbs))
		}
		items = append(items, proposer.Item{State: s, Sample: smp, Advantage: float64(1 - i)})
	}
	var batch bytes.Buffer
	if err := p.ExportBatch(&batch, items); err != nil {
		panic(err)
	}
	lines, err := openai.DecodeBatch(&batch)
	fmt.Println(len(lines), "lines exported", err)
	// Output:
	// 0 warmup{steps=200} (37 tokens with log-probs)
	// 1 lr-scale{factor=0.5} (39 tokens with log-probs)
	// 2 invalid: proposer/openai: no JSON object in the answer: no balanced, valid JSON object
	// 3 lines exported <nil>
}
