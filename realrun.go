package lm2lm

import (
	"context"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/loop"
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
	return realrun.RunReal(ctx, b, e, task, p)
}

// onTask names p on task in an error (realrun.OnTask).
func onTask(p records.Proposal, task records.Task) string { return realrun.OnTask(p, task) }

// keyOnTask is onTask for a proposal key and a task ID.
func keyOnTask(key, taskID string) string { return realrun.KeyOnTask(key, taskID) }

// realRun is the result of one attempt to measure a proposal for real.
type realRun = realrun.Result

// seededChange is a change to measure, with the seed to run it with when
// SetSeed is set (else the builder's seed).
type seededChange = realrun.Change

// RunRealJobs builds and executes jobs for real, as RunReal does, at most
// parallel at once, and returns the RealRuns a loop.Loop takes back
// (Absorb), in job order. On the first error (cancellation) it returns
// what it has, with the error.
func RunRealJobs(ctx context.Context, b builder.Builder, e builder.Executor, parallel int, jobs []loop.RunJob) ([]loop.RealRun, error) {
	sc := make([]seededChange, len(jobs))
	for i, j := range jobs {
		sc[i] = seededChange{TaskChange: j.Change, Seed: j.Seed, SetSeed: j.SetSeed}
	}
	runs, err := realrun.MeasureAll(ctx, b, e, parallel, sc)
	out := make([]loop.RealRun, len(runs))
	for i, r := range runs {
		out[i] = exportedRun(r)
	}
	return out, err
}

// exportedRun is r as the loop's RealRun.
func exportedRun(r realRun) loop.RealRun {
	return loop.RealRun{Record: r.Rec, Measured: r.Measured, Ran: r.Ran, Reused: r.Reused, Seed: r.Seed, Cost: r.Cost, Failure: r.Failure}
}
