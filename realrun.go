package lm2lm

import (
	"context"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// RunReal builds and executes proposal p on task for real and returns its
// real record. A proposal that cannot be built or whose run is infeasible
// gives a record with Infeasible set (METHOD.md §1 Reward 2: it earns −c).
// ran reports whether a run was paid for: the executor was called and did
// not serve a reused outcome (builder.Outcome.Reused). A run that failed for reasons
// other than the proposal (a build or run failure of no known class, a
// transient failure the executor gave up on, or an outcome that is not a
// valid record) returns a zero record and a nil error: the proposal is
// simply not measured (the trainer's and Evaluate's reports list such
// failures). Cancellation returns an error wrapping the cause.
func RunReal(ctx context.Context, b builder.Builder, e builder.Executor, task records.Task, p records.Proposal) (rec records.Record, ran bool, err error) {
	r, err := runReal(ctx, b, e, task, p)
	return r.rec, r.fresh(), err
}

// onTask names p on task in an error: the proposal's key and the task's ID
// are outside input, so each is quoted as records.Excerpt bounds it (one
// line, no control bytes, at most records.MaxExcerpt bytes of it).
func onTask(p records.Proposal, task records.Task) string {
	return keyOnTask(p.Key(), task.ID)
}

// keyOnTask is onTask for a proposal key and a task ID.
func keyOnTask(key, taskID string) string {
	return fmt.Sprintf("%q on %q", records.Excerpt(key), records.Excerpt(taskID))
}

// realRun is the result of one attempt to measure a proposal for real.
type realRun struct {
	rec      records.Record // the real record when measured, else zero
	measured bool           // rec holds a record (feasible or infeasible)
	ran      bool           // the executor was called
	reused   bool           // the executor served a stored or coalesced outcome (builder.Outcome.Reused): nothing was paid
	seed     uint64         // the job's seed (0 when nothing was built)
	cost     records.Cost   // what the run cost as reported (its record's cost when measured)
	failure  string         // why it was not measured
}

// fresh reports whether r was a run paid for here: the executor was called
// and did not serve a reused outcome.
func (r realRun) fresh() bool { return r.ran && !r.reused }

// seededChange is a change to measure, with the seed to run it with when
// setSeed is set (else the builder's seed).
type seededChange struct {
	records.TaskChange
	seed    uint64
	setSeed bool
}

func runReal(ctx context.Context, b builder.Builder, e builder.Executor, task records.Task, p records.Proposal) (realRun, error) {
	return runSeeded(ctx, b, e, seededChange{TaskChange: records.TaskChange{Task: task, Proposal: p}})
}

// runSeeded is runReal with the job's seed replaced by c.seed when
// c.setSeed is set.
func runSeeded(ctx context.Context, b builder.Builder, e builder.Executor, c seededChange) (realRun, error) {
	task, p := c.Task, c.Proposal
	job, err := b.Build(ctx, task, p)
	if err != nil {
		switch {
		case errors.Is(err, builder.ErrInfeasible):
			rec := records.Record{Task: task, Proposal: p, Source: records.Real, Infeasible: err.Error()}
			return realRun{rec: rec, measured: true}, nil
		case ctx.Err() != nil || errors.Is(err, builder.ErrCancelled):
			return realRun{}, fmt.Errorf("lm2lm: build %s: %w", onTask(p, task), err)
		}
		return realRun{failure: "build: " + err.Error()}, nil
	}
	if c.setSeed {
		job.Seed = c.seed
	}
	out, err := e.Execute(ctx, job)
	r := realRun{ran: true, reused: out.Reused, seed: job.Seed, cost: out.Cost}
	switch {
	case err == nil:
		r.rec = out.Record(job)
	case errors.Is(err, builder.ErrInfeasible) && ctx.Err() == nil:
		r.rec = out.Record(job)
		if r.rec.Infeasible == "" {
			r.rec.Infeasible = err.Error()
		}
		r.rec.Gain, r.rec.Loss = 0, 0
	case ctx.Err() != nil || errors.Is(err, builder.ErrCancelled):
		return r, fmt.Errorf("lm2lm: run %s: %w", onTask(p, task), err)
	default:
		r.failure = "run: " + err.Error()
		return r, nil
	}
	if verr := r.rec.Validate(); verr != nil {
		r.rec = records.Record{}
		r.failure = "run: outcome is not a valid record: " + verr.Error()
		if !finiteCost(r.cost) {
			r.cost = records.Cost{}
		}
		return r, nil
	}
	r.measured = true
	return r, nil
}

// finiteCost reports whether every field of c is finite and non-negative.
func finiteCost(c records.Cost) bool {
	for _, x := range []float64{c.DeviceSeconds, c.WallSeconds, c.FLOPs, c.Money} {
		if !(x >= 0 && !math.IsInf(x, 1)) {
			return false
		}
	}
	return true
}

// runAll runs every job with runReal, at most parallel at once, and
// returns the results in job order. On the first error (cancellation) it
// returns what it has, with the error.
func runAll(ctx context.Context, b builder.Builder, e builder.Executor, parallel int, jobs []records.TaskChange) ([]realRun, error) {
	sc := make([]seededChange, len(jobs))
	for i, j := range jobs {
		sc[i] = seededChange{TaskChange: j}
	}
	return runAllSeeded(ctx, b, e, parallel, sc)
}

// runAllSeeded is runAll over changes that may carry their seeds.
func runAllSeeded(ctx context.Context, b builder.Builder, e builder.Executor, parallel int, jobs []seededChange) ([]realRun, error) {
	runs := make([]realRun, len(jobs))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(parallel)
	for j, jb := range jobs {
		eg.Go(func() error {
			r, err := runSeeded(ectx, b, e, jb)
			runs[j] = r
			return err
		})
	}
	return runs, eg.Wait()
}

// RunRealJob builds and executes j for real, as RunReal does, and returns
// the RealRun a Loop takes back (Answer.Runs, FinishCalibration).
func RunRealJob(ctx context.Context, b builder.Builder, e builder.Executor, j RunJob) (RealRun, error) {
	r, err := runSeeded(ctx, b, e, seededChange{TaskChange: j.Change, seed: j.Seed, setSeed: j.SetSeed})
	return r.exported(), err
}
