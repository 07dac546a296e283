package grader

import (
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

func TestExecutorConformance(t *testing.T) {
	// The grader is an Executor of its own jobs: results as real records,
	// cancellation, concurrency and text as data (buildertest.Run with a
	// Builder: the scripted failure classes are skipped, since a grader's
	// failures are ladder rungs, not errors).
	g, tk := newToyGrader(t, func(c *Config) { c.Timeout = 30 * time.Second })
	buildertest.Run(t, func(*testing.T) builder.Executor { return g }, buildertest.Options{
		Builder: g, Task: tk.Record(), Deterministic: true, Concurrency: 2,
		Proposals: []records.Proposal{
			{Mechanism: "threshold", Text: solExact},
			{Mechanism: "constant", Text: solConstant},
			{Mechanism: "crash", Text: "x = 1/0\n"},
		},
	})
}
