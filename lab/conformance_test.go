package lab_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// TestLabConformance holds the lab to package builder's contracts: the
// Builder suite, and the Executor suite on the lab's own jobs (the lab
// cannot be told to crash or hang, so those subtests are skipped).
func TestLabConformance(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	task, err := l.Task(context.Background(), "tiny-ar")
	require.NoError(t, err)
	props := []records.Proposal{
		{Mechanism: "activation", Params: map[string]string{"name": "gelu"}},
		{Mechanism: "embed-dim", Params: map[string]string{"factor": "1.5"}},
	}
	buildertest.RunBuilder(t, l, buildertest.BuilderOptions{Task: task, Feasible: props,
		Infeasible: []records.Proposal{{Mechanism: "lr-scale", Params: map[string]string{"factor": "1e9"}}}})
	buildertest.Run(t, func(t *testing.T) builder.Executor { return l },
		buildertest.Options{Builder: l, Task: task, Proposals: props, Deterministic: true, Concurrency: 2})
}
