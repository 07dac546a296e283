package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

var (
	_ builder.Builder  = (*Lab)(nil)
	_ builder.Executor = (*Lab)(nil)
)

// Build turns proposal p for task t into a job (METHOD.md §1 Vocabulary,
// Builder): the task's reference configuration edited by p's card (and,
// under a compute budget, trained for the steps the budget pays for; see
// TaskSpec.Budget), as the
// JSON of a model.Config in Job.Spec, with Job.Seed the first reference seed
// so that the gain shares its seed with a reference run (set Seed, or use
// WithSeeds, for others). An unknown card, a bad or out-of-range parameter,
// or an edit the model rejects returns an error wrapping
// builder.ErrInfeasible with the reason; an unknown task wraps
// ErrUnknownTask. Build does not train.
func (l *Lab) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	if err := ctx.Err(); err != nil {
		return builder.Job{}, fmt.Errorf("lab: build: %w: %w", builder.ErrCancelled, err)
	}
	spec, err := l.Spec(t.ID)
	if err != nil {
		return builder.Job{}, err
	}
	cfg, err := spec.apply(p)
	if err != nil {
		return builder.Job{}, fmt.Errorf("lab: build %s on %s: %w", p.Key(), t.ID, err)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return builder.Job{}, fmt.Errorf("lab: build %s on %s: %w", p.Key(), t.ID, err)
	}
	return builder.Job{Task: t, Proposal: p, Seed: l.cfg.RefSeeds[0], Spec: raw}, nil
}

// WithSeeds returns one copy of j per seed.
func WithSeeds(j builder.Job, seeds ...uint64) []builder.Job {
	out := make([]builder.Job, len(seeds))
	for i, s := range seeds {
		out[i] = j
		out[i].Seed = s
	}
	return out
}

// Execute trains the job's configuration with its seed on the task's
// corpus, evaluates it, and returns the measured loss with Gain = the
// reference loss of the same seed − loss (shared seeds halve the noise of
// a gain; METHOD.md §1 Vocabulary, gain g = b_e − ℓ), Seeds = {j.Seed} and
// its cost (CPU seconds of the training thread, wall seconds, FLOPs). A
// configuration equal to the reference reuses the reference run (the same
// seed gives the same loss bit for bit). The reference run of a seed
// outside RefSeeds is trained first when needed.
//
// A diverged run (non-finite or exploding loss) returns its Outcome with
// Infeasible set and an error wrapping builder.ErrInfeasible, as does a
// Spec that is not a valid model.Config. A done ctx returns an error
// wrapping builder.ErrCancelled and ctx.Err(). Execute is safe for
// concurrent use; each call trains on the calling goroutine.
func (l *Lab) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	seeds := []uint64{j.Seed}
	if err := ctx.Err(); err != nil {
		return builder.Outcome{Seeds: seeds}, fmt.Errorf("lab: execute: %w: %w", builder.ErrCancelled, err)
	}
	spec, err := l.Spec(j.Task.ID)
	if err != nil {
		return builder.Outcome{Seeds: seeds}, err
	}
	var cfg model.Config
	dec := json.NewDecoder(bytes.NewReader(j.Spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		reason := "spec is not a model configuration: " + err.Error()
		return builder.Outcome{Seeds: seeds, Infeasible: reason}, fmt.Errorf("lab: execute %s: %w: %s", j.Task.ID, builder.ErrInfeasible, reason)
	}
	if err := cfg.Validate(); err != nil {
		reason := err.Error()
		return builder.Outcome{Seeds: seeds, Infeasible: reason}, fmt.Errorf("lab: execute %s: %w: %w", j.Task.ID, builder.ErrInfeasible, err)
	}
	ref, err := l.refLoss(ctx, spec, j.Seed)
	if err != nil {
		return builder.Outcome{Seeds: seeds}, err
	}
	if cfg == spec.Config {
		return builder.Outcome{Loss: ref, Gain: 0, Seeds: seeds,
			Log: fmt.Sprintf("configuration equals the reference of %s; reference run of seed %d reused", spec.ID, j.Seed)}, nil
	}
	res, cost, err := l.train(ctx, spec, cfg, j.Seed)
	if err != nil {
		out := builder.Outcome{Seeds: seeds, Cost: cost}
		if errors.Is(err, builder.ErrCancelled) {
			return out, err
		}
		if errors.Is(err, model.ErrInvalidConfig) {
			out.Infeasible = err.Error()
			return out, fmt.Errorf("lab: execute %s: %w: %w", j.Task.ID, builder.ErrInfeasible, err)
		}
		return out, err
	}
	log := runLog(res)
	if res.Diverged || !stat.Finite(res.Loss) {
		reason := res.Reason
		if reason == "" {
			reason = fmt.Sprintf("non-finite validation loss %g", res.Loss)
		}
		out := builder.Outcome{Seeds: seeds, Cost: cost, Log: log, Infeasible: "diverged: " + reason}
		return out, fmt.Errorf("lab: execute %s seed %d: %w: diverged: %s", j.Task.ID, j.Seed, builder.ErrInfeasible, reason)
	}
	return builder.Outcome{Loss: res.Loss, Gain: ref - res.Loss, Seeds: seeds, Cost: cost, Log: log}, nil
}

// runLog summarises a run for Outcome.Log.
func runLog(r model.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "steps %d, validation loss %.5g, %.3g FLOPs", r.StepsRun, r.Loss, r.FLOPs)
	if n := len(r.TrainLoss); n > 0 {
		b.WriteString("; training loss")
		for _, i := range []int{0, n / 4, n / 2, 3 * n / 4, n - 1} {
			fmt.Fprintf(&b, " %.4g", r.TrainLoss[i])
		}
	}
	if r.Diverged {
		b.WriteString("; diverged: " + r.Reason)
	}
	return b.String()
}

// Run builds p for task id and executes it with each seed (default: the
// lab's RefSeeds), up to Config.Parallel runs at a time. Build errors are
// returned directly; per-seed results are in the returned runs.
func (l *Lab) Run(ctx context.Context, id string, p records.Proposal, seeds ...uint64) ([]RunResult, error) {
	t, err := l.Task(ctx, id)
	if err != nil {
		return nil, err
	}
	j, err := l.Build(ctx, t, p)
	if err != nil {
		return nil, err
	}
	if len(seeds) == 0 {
		seeds = l.cfg.RefSeeds
	}
	return RunAll(ctx, l, WithSeeds(j, seeds...), l.cfg.Parallel), nil
}

// RunResult is one job's outcome and error (see builder.Executor).
type RunResult struct {
	Job     builder.Job
	Outcome builder.Outcome
	Err     error
}

// RunAll executes jobs with ex, at most parallel at a time (parallel < 1
// means 1), and returns their results in job order. A failed job does not
// stop the others; when ctx is done, jobs not yet started report
// builder.ErrCancelled. Runs are parallel across runs, never within one.
func RunAll(ctx context.Context, ex builder.Executor, jobs []builder.Job, parallel int) []RunResult {
	out := make([]RunResult, len(jobs))
	var g errgroup.Group
	g.SetLimit(max(parallel, 1))
	for i, j := range jobs {
		out[i].Job = j
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				out[i].Err = fmt.Errorf("lab: run: %w: %w", builder.ErrCancelled, err)
				return nil
			}
			out[i].Outcome, out[i].Err = ex.Execute(ctx, j)
			return nil
		})
	}
	_ = g.Wait() // every goroutine returns nil; errors are per job
	return out
}
