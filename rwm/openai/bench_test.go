package openai

import (
	"context"
	"testing"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func BenchmarkPrompt300(b *testing.B) {
	q := rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0], Evidence: rwmtest.Evidence(300)}
	cfg := DefaultConfig()
	for b.Loop() {
		if _, _, err := Prompt(q, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParsePrediction(b *testing.B) {
	s := "Here:\n```json\n{\"gain\": 0.012, \"q10\": -0.002, \"q90\": 0.02, \"valid\": true, \"reason\": \"warmup helps\"}\n```"
	for b.Loop() {
		if _, err := ParsePrediction(s, bpbTask); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPredictLoopback measures the client's overhead per prediction
// against the in-process fake server (prompt, HTTP on loopback, parsing).
func BenchmarkPredictLoopback(b *testing.B) {
	srv := oaitest.New(b, fakeWorld)
	cfg := testConfig(srv, &sleeps{})
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	q := rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0], Evidence: rwmtest.Evidence(64)}
	for b.Loop() {
		if _, err := m.Predict(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
}
