// Package realrun measures a proposal for real: it builds the proposal's
// job, runs it and turns the outcome into a real record (METHOD.md §1
// Reward 2 for infeasible runs). It is lm2lm.RunReal's implementation,
// shared by the trainer, Evaluate and package baseline, so that baseline
// need not import the root package.
package realrun

import (
	"context"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// Result is the result of one attempt to measure a proposal for real.
type Result struct {
	Rec      records.Record // the real record when measured, else zero
	Measured bool           // Rec holds a record (feasible or infeasible)
	Ran      bool           // the executor was called
	Reused   bool           // the executor served a stored or coalesced outcome (builder.Outcome.Reused): nothing was paid
	Seed     uint64         // the job's seed (0 when nothing was built)
	Cost     records.Cost   // what the run cost as reported (its record's cost when measured)
	Failure  string         // why it was not measured
}

// Fresh reports whether r was a run paid for here: the executor was called
// and did not serve a reused outcome.
func (r Result) Fresh() bool { return r.Ran && !r.Reused }

// Change is a change to measure, with the seed to run it with when SetSeed
// is set (else the builder's seed).
type Change struct {
	records.TaskChange
	Seed    uint64
	SetSeed bool
}

// RunReal is lm2lm.RunReal: Measure of p on task with the builder's seed,
// returning the record and whether a run was paid for (Result.Fresh).
func RunReal(ctx context.Context, b builder.Builder, e builder.Executor, task records.Task, p records.Proposal) (records.Record, bool, error) {
	r, err := Measure(ctx, b, e, Change{TaskChange: records.TaskChange{Task: task, Proposal: p}})
	return r.Rec, r.Fresh(), err
}

// MeasureAll measures every job with Measure, at most parallel at once,
// and returns the results in job order. On the first error (cancellation)
// it returns what it has, with the error. It is the one bounded fan-out
// over real runs of the Trainer, Evaluate, the environment service and
// baseline.RunDraws.
func MeasureAll(ctx context.Context, b builder.Builder, e builder.Executor, parallel int, jobs []Change) ([]Result, error) {
	runs := make([]Result, len(jobs))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(parallel)
	for j, c := range jobs {
		eg.Go(func() error {
			r, err := Measure(ectx, b, e, c)
			runs[j] = r
			return err
		})
	}
	return runs, eg.Wait()
}

// Measure builds and executes c. A proposal that cannot be built or whose
// run is infeasible gives a measured record with Infeasible set. A run that
// failed for reasons other than the proposal (a build or run failure of no
// known class, a transient failure the executor gave up on, or an outcome
// that is not a valid record) returns a Result with Failure set and a nil
// error. Cancellation returns an error wrapping the cause.
func Measure(ctx context.Context, b builder.Builder, e builder.Executor, c Change) (Result, error) {
	task, p := c.Task, c.Proposal
	job, err := b.Build(ctx, task, p)
	if err != nil {
		switch {
		case errors.Is(err, builder.ErrInfeasible):
			rec := records.Record{Task: task, Proposal: p, Source: records.Real, Infeasible: err.Error()}
			// A builder that wrote code for p (builder/overlay) names it,
			// so that the infeasible record can be traced to that code.
			var coded interface{ CodeRecord() *records.Code }
			if errors.As(err, &coded) {
				rec.Code = coded.CodeRecord()
			}
			return Result{Rec: rec, Measured: true}, nil
		case ctx.Err() != nil || errors.Is(err, builder.ErrCancelled):
			return Result{}, fmt.Errorf("lm2lm: build %s: %w", OnTask(p, task), err)
		}
		return Result{Failure: "build: " + err.Error()}, nil
	}
	if c.SetSeed {
		job.Seed = c.Seed
	}
	out, err := e.Execute(ctx, job)
	r := Result{Ran: true, Reused: out.Reused, Seed: job.Seed, Cost: out.Cost}
	switch {
	case err == nil:
		r.Rec = out.Record(job)
	case errors.Is(err, builder.ErrInfeasible) && ctx.Err() == nil:
		r.Rec = out.Record(job)
		if r.Rec.Infeasible == "" {
			r.Rec.Infeasible = err.Error()
		}
		r.Rec.Gain, r.Rec.Loss = 0, 0
	case ctx.Err() != nil || errors.Is(err, builder.ErrCancelled):
		return r, fmt.Errorf("lm2lm: run %s: %w", OnTask(p, task), err)
	default:
		r.Failure = "run: " + err.Error()
		return r, nil
	}
	if verr := r.Rec.Validate(); verr != nil {
		r.Rec = records.Record{}
		r.Failure = "run: outcome is not a valid record: " + verr.Error()
		if !FiniteCost(r.Cost) {
			r.Cost = records.Cost{}
		}
		return r, nil
	}
	r.Measured = true
	return r, nil
}

// OnTask names p on task in an error: the proposal's key and the task's ID
// are outside input, so each is quoted as records.Excerpt bounds it (one
// line, no control bytes, at most records.MaxExcerpt bytes of it).
func OnTask(p records.Proposal, task records.Task) string {
	return KeyOnTask(p.Key(), task.ID)
}

// KeyOnTask is OnTask for a proposal key and a task ID.
func KeyOnTask(key, taskID string) string {
	return fmt.Sprintf("%q on %q", records.Excerpt(key), records.Excerpt(taskID))
}

// FiniteCost reports whether every field of c is finite and non-negative.
func FiniteCost(c records.Cost) bool {
	for _, x := range []float64{c.DeviceSeconds, c.WallSeconds, c.FLOPs, c.Money} {
		if !(x >= 0 && !math.IsInf(x, 1)) {
			return false
		}
	}
	return true
}
