package realrun_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

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

// gauge is an executor whose gain is the job's seed, counting how many
// runs are in flight at once.
type gauge struct {
	now, peak atomic.Int32
	fail      uint64 // a seed whose run is cancelled (0: none)
}

func (g *gauge) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	n := g.now.Add(1)
	defer g.now.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	time.Sleep(time.Millisecond)
	if j.Seed == g.fail {
		return builder.Outcome{}, builder.ErrCancelled
	}
	return builder.Outcome{Gain: float64(j.Seed), Loss: 2 - float64(j.Seed)/100, Seeds: []uint64{j.Seed}}, nil
}

// jobs builds every proposal into a job of its task.
type jobs struct{}

func (jobs) Build(_ context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	return builder.Job{Task: t, Proposal: p, Seed: 3}, nil
}

func TestMeasureAll(t *testing.T) {
	// Results come back in job order whatever the order of completion,
	// with at most parallel runs at once; a cancellation is the error.
	task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 2, SeedNoise: 0.1}
	var changes []realrun.Change
	for s := uint64(1); s <= 12; s++ {
		changes = append(changes, realrun.Change{TaskChange: records.TaskChange{Task: task, Proposal: records.Proposal{Mechanism: "m"}}, Seed: s, SetSeed: true})
	}
	g := &gauge{}
	out, err := realrun.MeasureAll(context.Background(), jobs{}, g, 3, changes)
	require.NoError(t, err)
	for i, r := range out {
		require.True(t, r.Measured, r.Failure)
		require.Equal(t, float64(i+1), r.Rec.Gain, "job %d", i)
	}
	require.LessOrEqual(t, g.peak.Load(), int32(3))
	_, err = realrun.MeasureAll(context.Background(), jobs{}, &gauge{fail: 5}, 2, changes)
	require.ErrorIs(t, err, builder.ErrCancelled)
}
