// Command llm wires the library's LLM backends to an OpenAI-compatible
// chat-completions server (vLLM, SGLang, llama.cpp's server, a hosted API):
// the world model of rwm/openai predicts the gain of one proposal from a few
// real records (METHOD.md §1 Research World Model), and the proposer of
// proposer/openai samples proposals for one research state with token
// log-probs (METHOD.md §1 Policy optimisation).
//
// Usage:
//
//	OPENAI_BASE_URL=http://localhost:8000/v1 LM2LM_MODEL=Qwen/Qwen3-8B go run ./examples/llm
//	go run ./examples/llm -base-url http://localhost:8000/v1 -model Qwen/Qwen3-8B -n 4
//
// Flags win over the environment (OPENAI_BASE_URL, OPENAI_API_KEY,
// LM2LM_MODEL); prefer OPENAI_API_KEY to -api-key, which other users of the
// machine can see in the process list. With no server configured the
// program says so and exits with status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	popenai "github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	wopenai "github.com/lm2lm/lm2lm/rwm/openai"
)

func main() {
	baseURL := flag.String("base-url", "", "OpenAI-compatible API base URL (default $OPENAI_BASE_URL)")
	model := flag.String("model", "", "model name (default $LM2LM_MODEL)")
	apiKey := flag.String("api-key", "", "API key (default $OPENAI_API_KEY; prefer the variable)")
	n := flag.Int("n", 4, "proposals to sample for the state")
	seed := flag.Uint64("seed", 1, "seed of the sampling rng")
	timeout := flag.Duration("timeout", 5*time.Minute, "overall time limit")
	flag.Parse()

	if err := run(*baseURL, *model, *apiKey, *n, *seed, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		if errors.Is(err, wopenai.ErrNotConfigured) {
			fmt.Fprintln(os.Stderr, "llm: point it at a server, e.g. OPENAI_BASE_URL=http://localhost:8000/v1 LM2LM_MODEL=<model> (see -h)")
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// demo vocabulary: one task, its catalogue and a few real records.
var (
	task = records.Task{ID: "ar-prose-s", Family: "ar-prose", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 1.52, SeedNoise: 0.004, Budget: 300,
		Description: "a 2-layer byte-level transformer trained for 300 AdamW steps on English prose"}
	catalogue = []records.Card{
		{Mechanism: "lr-scale", Description: "multiply the peak learning rate", Params: []records.ParamSpec{
			{Name: "factor", Kind: "float", Choices: []string{"0.5", "2", "4"}, Min: 0.1, Max: 10}}},
		{Mechanism: "warmup", Description: "set the linear warmup length in steps", Params: []records.ParamSpec{
			{Name: "steps", Kind: "int", Choices: []string{"0", "30", "100"}, Min: 0, Max: 300}}},
		{Mechanism: "qk-norm", Description: "RMS-normalise queries and keys before attention"},
	}
)

func measured(mech string, params map[string]string, gain float64) records.Record {
	return records.Record{Task: task, Proposal: records.Proposal{Mechanism: mech, Params: params},
		Gain: gain, Loss: task.RefLoss - gain, Source: records.Real, Seeds: []uint64{1}}
}

func run(baseURL, model, apiKey string, n int, seed uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	wcfg := wopenai.DefaultConfig()
	wcfg.BaseURL, wcfg.Model, wcfg.APIKey = baseURL, model, apiKey
	wm, err := wopenai.New(wcfg)
	if err != nil {
		return err
	}
	cache, err := rwm.NewCache(wm, rwm.DefaultCacheConfig())
	if err != nil {
		return err
	}
	ledger := rwm.NewLedger(cache)

	history := []records.Record{
		measured("lr-scale", map[string]string{"factor": "2"}, 0.011),
		measured("lr-scale", map[string]string{"factor": "4"}, -0.030),
		measured("warmup", map[string]string{"steps": "0"}, -0.006),
	}
	ev, err := records.NewEvidence(history...)
	if err != nil {
		return err
	}
	prop := records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "100"},
		Text: "a longer warmup should let the doubled learning rate settle"}
	fmt.Printf("world model %s\n", wm.ID())
	pred, err := ledger.Predict(ctx, rwm.Query{Task: task, Proposal: prop, Evidence: ev})
	switch {
	case errors.Is(err, rwm.ErrBadPrediction):
		fmt.Printf("unusable prediction for %s: %v\n", prop.Key(), err)
	case err != nil:
		return err
	case !pred.Valid:
		fmt.Printf("%s judged invalid: %s\n", prop.Key(), pred.Reason)
	default:
		fmt.Printf("%s: predicted gain %+.4f %s (q10 %+.4f, q90 %+.4f; %.1f σ_e): %s\n", prop.Key(), pred.Gain,
			task.Metric, pred.Low, pred.High, pred.Gain/task.SeedNoise, pred.Reason)
	}
	st := ledger.Stats()
	fmt.Printf("world model tokens: %d prompt, %d completion\n\n", st.PromptTokens, st.CompletionTokens)

	pcfg := popenai.DefaultConfig()
	pcfg.BaseURL, pcfg.Model, pcfg.APIKey = baseURL, model, apiKey
	pcfg.Catalogue = catalogue
	pp, err := popenai.New(pcfg)
	if err != nil {
		return err
	}
	state := records.State{Task: task, History: history}
	samples, err := pp.Propose(ctx, state, n, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		return err
	}
	for i, s := range samples {
		if s.Invalid {
			fmt.Printf("sample %d: invalid (%s)\n", i, s.Reason)
			continue
		}
		var sum float64
		for _, lp := range s.LogProbs {
			sum += lp
		}
		fmt.Printf("sample %d: %s, %d tokens, log-prob %.2f\n", i, s.Proposal.Key(), len(s.Tokens), sum)
	}
	u := pp.Usage()
	fmt.Printf("proposer tokens: %d prompt, %d completion in %d calls\n", u.PromptTokens, u.CompletionTokens, u.Calls)
	return nil
}
