package main

import (
	"testing"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// train.py behind builder.Subprocess, and behind a builder.Pool over a
// store, pass the executor conformance suite with the example's Builder:
// valid records with the job's seed, no-change runs, determinism bit for
// bit (also across concurrent runs), cancellation before the start,
// proposal text with shell metacharacters reaching the run only as data.
func TestConformance(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	opts := buildertest.Options{Builder: b, Task: testTask, Deterministic: true, Concurrency: 2,
		Proposals: []records.Proposal{prop("lr-scale", "factor", "2"), prop("depth", "delta", "-1"), prop("dropout", "p", "0.1")}}
	t.Run("subprocess", func(t *testing.T) {
		buildertest.Run(t, func(t *testing.T) builder.Executor { return newSubprocess(t, t.TempDir(), 0) }, opts)
	})
	t.Run("pool", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the pool over train.py repeats the subprocess suite; skipped with -short")
		}
		buildertest.Run(t, func(t *testing.T) builder.Executor {
			cfg := builder.DefaultPoolConfig()
			cfg.Slots, cfg.Store = 2, records.NewMemStore()
			p, err := builder.NewPool(newSubprocess(t, t.TempDir(), 0), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}, opts)
	})
}
