package buildertest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// specBuilder builds test jobs whose Spec asks for an OK run; it refuses
// mechanisms other than lr-scale and no change.
type specBuilder struct{}

func (specBuilder) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	m := records.CanonicalName(p.Mechanism)
	if m != "lr-scale" && m != records.NoChange {
		return builder.Job{}, &builder.RunError{Class: builder.ErrInfeasible, Reason: "unknown mechanism " + m}
	}
	spec, _ := json.Marshal(buildertest.Spec{SleepMS: 1})
	return builder.Job{Task: t, Proposal: p, Seed: uint64(len(strings.TrimSpace(p.Key()))), Spec: spec}, nil
}

// TestRunWithABuilder runs the executor suite as for an executor of real
// jobs (no scripted failures): Scripted's OK runs of specBuilder's jobs.
func TestRunWithABuilder(t *testing.T) {
	b := specBuilder{}
	task := buildertest.Task("built")
	props := []records.Proposal{
		{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}},
		{Mechanism: "lr-scale", Params: map[string]string{"factor": "0.5"}},
	}
	buildertest.RunBuilder(t, b, buildertest.BuilderOptions{Task: task, Feasible: props,
		Infeasible: []records.Proposal{{Mechanism: "width"}}})
	buildertest.Run(t, func(t *testing.T) builder.Executor { return new(buildertest.Scripted) },
		buildertest.Options{Builder: b, Task: task, Proposals: props, Deterministic: true, Concurrency: 2})
}
