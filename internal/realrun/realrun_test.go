package realrun_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/records"
)

func TestFiniteCost(t *testing.T) {
	for _, tc := range []struct {
		c    records.Cost
		want bool
	}{
		{records.Cost{}, true},
		{records.Cost{DeviceSeconds: 1, WallSeconds: 2, FLOPs: 3e12, Money: 0.5}, true},
		{records.Cost{WallSeconds: -1}, false},
		{records.Cost{FLOPs: math.Inf(1)}, false},
		{records.Cost{Money: math.NaN()}, false},
	} {
		require.Equal(t, tc.want, realrun.FiniteCost(tc.c), "%+v", tc.c)
	}
}

func TestOnTaskQuotesBoundedExcerpts(t *testing.T) {
	p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}
	require.Equal(t, `"lr-scale{factor=2}" on "t1"`, realrun.OnTask(p, records.Task{ID: "t1"}))
	require.Equal(t, `"k" on "a\nb"`, realrun.KeyOnTask("k", "a\nb"))
}

// builds is a builder whose Build fails with err (nil: a job).
type builds struct{ err error }

func (b builds) Build(context.Context, records.Task, records.Proposal) (builder.Job, error) {
	return builder.Job{Seed: 3}, b.err
}

// runs is an executor answering out, err and counting its calls.
type runs struct {
	out   builder.Outcome
	err   error
	calls *int
}

func (r runs) Execute(context.Context, builder.Job) (builder.Outcome, error) {
	*r.calls++
	return r.out, r.err
}

func TestMeasureOutcomes(t *testing.T) {
	task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 2, SeedNoise: 0.1}
	p := records.Proposal{Mechanism: "m"}
	ctx := context.Background()
	c := realrun.Change{TaskChange: records.TaskChange{Task: task, Proposal: p}}
	calls := 0

	// An infeasible build is a measured infeasible record; nothing ran.
	r, err := realrun.Measure(ctx, builds{builder.ErrInfeasible}, runs{calls: &calls}, c)
	require.NoError(t, err)
	require.True(t, r.Measured)
	require.False(t, r.Ran)
	require.NotEmpty(t, r.Rec.Infeasible)
	require.Zero(t, calls)

	// A build failure of no known class is not measured, not an error.
	r, err = realrun.Measure(ctx, builds{errors.New("disk full")}, runs{calls: &calls}, c)
	require.NoError(t, err)
	require.False(t, r.Measured)
	require.Equal(t, "build: disk full", r.Failure)

	// A run that fails transiently is not measured; a set seed replaces
	// the builder's.
	c.Seed, c.SetSeed = 9, true
	r, err = realrun.Measure(ctx, builds{}, runs{err: errors.New("node lost"), calls: &calls}, c)
	require.NoError(t, err)
	require.True(t, r.Ran)
	require.False(t, r.Measured)
	require.Equal(t, uint64(9), r.Seed)
	require.Equal(t, "run: node lost", r.Failure)
	require.Equal(t, 1, calls)

	// A cancelled ctx is an error wrapping the cause.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = realrun.Measure(cctx, builds{}, runs{err: context.Canceled, calls: &calls}, c)
	require.ErrorIs(t, err, context.Canceled)

	// A reused outcome is not fresh.
	r = realrun.Result{Ran: true, Reused: true}
	require.False(t, r.Fresh())
	require.True(t, realrun.Result{Ran: true}.Fresh())
}
