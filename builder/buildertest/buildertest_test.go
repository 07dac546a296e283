package buildertest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

func TestQuadratic(t *testing.T) {
	task := buildertest.Task("q")
	task.SeedNoise = 1e-300 // noise off (σ_e must be > 0)
	for _, c := range []struct {
		name string
		p    records.Proposal
		want float64
	}{
		// ℓ = b_e − 0.05·[change] + 0.1·Σ(x−1)²; g = b_e − ℓ (METHOD.md §1 Vocabulary).
		{"no change", records.Proposal{Mechanism: records.NoChange}, 1.5},
		{"at the optimum", records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "1"}}, 1.45},
		{"off by 2 and 1", records.Proposal{Mechanism: "m", Params: map[string]string{"a": "3", "b": "0", "c": "adamw"}}, 1.45 + 0.1*5},
	} {
		require.InDelta(t, c.want, buildertest.Quadratic(task, c.p, 7), 1e-12, c.name)
	}
	// The seed noise is bounded by σ_e.
	task.SeedNoise = 0.01
	for s := range uint64(1000) {
		l := buildertest.Quadratic(task, records.Proposal{Mechanism: records.NoChange}, s)
		require.InDelta(t, 1.5, l, 0.01)
	}
}

func TestParseSpec(t *testing.T) {
	s, err := buildertest.ParseSpec(buildertest.Spec{Behaviour: buildertest.Hang, SleepMS: 3}.JSON())
	require.NoError(t, err)
	require.Equal(t, buildertest.Spec{Behaviour: buildertest.Hang, SleepMS: 3}, s)
	_, err = buildertest.ParseSpec([]byte(`{"behaviour": "explode"}`))
	require.Error(t, err)
	s, err = buildertest.ParseSpec(nil)
	require.NoError(t, err)
	require.Equal(t, buildertest.Spec{}, s)
}

// Scripted runs jobs in process as their Spec asks, with the failure
// classes of the subprocess protocol.
func ExampleScripted() {
	var x buildertest.Scripted
	j := builder.Job{Task: buildertest.Task("demo"), Proposal: records.Proposal{Mechanism: "lr-scale",
		Params: map[string]string{"factor": "1"}}, Seed: 7}
	out, err := x.Execute(context.Background(), j)
	fmt.Printf("%.4f %v\n", out.Loss, err)
	j.Spec = buildertest.Spec{Behaviour: buildertest.Crash}.JSON()
	_, err = x.Execute(context.Background(), j)
	fmt.Println(builder.Class(err) == builder.ErrFailed, x.Calls())
	// Output:
	// 1.4478 <nil>
	// true 2
}
