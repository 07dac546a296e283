// Package environment is the set-up every LM2LM driver shares: an
// environment's tasks get their reference runs (b_e and σ_e, METHOD.md §1
// Vocabulary), M_0 is drawn from the catalogue and measured for real
// (METHOD.md §1 Data and evaluation: mechanism-library sampling), and the
// tasks are split into training and held-out ones.
//
// An Environment is anything that can do the reference stage and hands
// out a builder, an executor and a catalogue. Two implementations ship
// beside this package: package yamlenv, an environment on a team's own
// training code from its config file (package envconfig;
// docs/own-environment.md), and package labenv, the embedded lab. The main
// job, cmd/lm2lm, the environment service on the lab (serve/servelab),
// the PyTorch example and the README's tour set up through Prepare, which
// returns what they print (the reference rows, the split, M_0 and what it
// paid) and reports each stage as it ends (Options.OnStage); the
// comparison driver sets up through Prepare's reference stage and draws
// each seed's M_0 with the same M0 (its runs counted in the seed's
// budget). So the reference runs and M_0's draw are written once.
//
// Prepare runs every real run through the environment's executor, which
// is idempotent over the environment's store: run again after a kill, it
// pays for nothing twice.
package environment

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/records"
)

// Environment is what LM2LM trains against: tasks with reference runs, the
// builder and executor that measure a proposal on a task, and the
// catalogue of mechanism cards proposals come from.
type Environment interface {
	// References measures (or reads back from the store) every task's
	// reference runs and returns the tasks that have b_e and σ_e, in the
	// environment's order, and those left out with the reason (an
	// infeasible reference run). p shows progress (nil: none).
	References(ctx context.Context, p Progress) ([]records.Task, []LeftOut, error)
	// Builder builds a proposal on a task into a job.
	Builder() builder.Builder
	// Executor runs jobs, idempotently over the environment's store.
	Executor() builder.Executor
	// Catalogue is the mechanism cards proposals are drawn from.
	Catalogue() []records.Card
}

// LeftOut is a task without b_e and σ_e and why.
type LeftOut struct {
	ID  string
	Err error
}

// Progress starts a progress display of total units titled title (a
// progress.Reporter); nil shows nothing.
type Progress func(title string, total int) (*progress.Reporter, error)

// Start returns p's reporter, or one that shows nothing.
func (p Progress) Start(title string, total int) (*progress.Reporter, error) {
	if p == nil {
		return progress.New(io.Discard, progress.Config{Title: title, Total: total, Mode: progress.Lines})
	}
	return p(title, total)
}

// M0Stream is the PCG stream M_0's draw uses with the run's seed
// (rand.NewPCG(seed, M0Stream)): every driver draws the same M_0 for the
// same seed, tasks and catalogue. Its value spells "m0".
const M0Stream = 0x6d30

// DrawM0 draws n distinct (training task, catalogue proposal) pairs
// uniformly (records.DrawChanges; METHOD.md §1 Data and evaluation:
// mechanism-library sampling). The draw depends on seed, train and cat
// only.
func DrawM0(seed uint64, train []records.Task, cat []records.Card, n int) []baseline.Draw {
	var draws []baseline.Draw
	for _, it := range records.DrawChanges(rand.New(rand.NewPCG(seed, M0Stream)), train, cat, n, nil) {
		draws = append(draws, baseline.Draw{Task: it.Task, Proposal: it.Proposal})
	}
	return draws
}

// M0 measures DrawM0's draws for real through b and ex, at most parallel
// at once (baseline.RunDraws), and returns them as the initial real
// records M_0 with what the runs cost (runs paid now and reused).
func M0(ctx context.Context, b builder.Builder, ex builder.Executor, train []records.Task, cat []records.Card, n int, seed uint64, parallel int) (records.Evidence, baseline.Spent, error) {
	recs, spent, err := baseline.RunDraws(ctx, b, ex, DrawM0(seed, train, cat, n), parallel)
	if err != nil {
		return records.Evidence{}, spent, fmt.Errorf("environment: M_0: %w", err)
	}
	ev, err := records.NewEvidence(recs...)
	if err != nil {
		return records.Evidence{}, spent, fmt.Errorf("environment: M_0: %w", err)
	}
	return ev, spent, nil
}

// Split returns the training tasks and the held-out ones (every split but
// records.Train), each in the order given.
func Split(tasks []records.Task) (train, held []records.Task) {
	for _, t := range tasks {
		if t.Split == records.Train {
			train = append(train, t)
		} else {
			held = append(held, t)
		}
	}
	return train, held
}

// ReferenceRows is an Environment whose reference stage reports a row per
// task: its losses, seeds and what it paid and reused (RefTask). Prepare
// returns the rows (Prepared.References).
type ReferenceRows interface {
	ReferenceRuns(ctx context.Context, p Progress) ([]RefTask, error)
}

// Stage is a stage of Prepare.
type Stage int

const (
	// StageReferences: the reference runs are measured and the tasks
	// split.
	StageReferences Stage = iota
	// StageM0: M_0 is measured.
	StageM0
)

// Options sizes Prepare.
type Options struct {
	// M0 is the number of catalogue changes drawn over the training tasks
	// and run for real as M_0; 0 skips M_0.
	M0 int
	// Seed seeds M_0's draw (DrawM0).
	Seed uint64
	// Parallel is the most M_0 runs at once; ≥ 1.
	Parallel int
	// Progress shows the stages' progress; nil shows nothing.
	Progress Progress
	// OnStage, when set, is called as each stage ends with what is
	// prepared so far, so that a driver prints and reports a stage when it
	// ends; an error it returns stops Prepare.
	OnStage func(Stage, Prepared) error
}

// stage calls OnStage.
func (o Options) stage(s Stage, p Prepared) error {
	if o.OnStage == nil {
		return nil
	}
	return o.OnStage(s, p)
}

// Prepared is an environment ready to train on: what the drivers print.
type Prepared struct {
	Train, HeldOut []records.Task
	LeftOut        []LeftOut
	// References are the reference stage's rows when the environment
	// reports them (ReferenceRows); nil otherwise.
	References []RefTask
	// M0 is the initial real records (empty when Options.M0 is 0).
	M0 records.Evidence
	// M0Spent is what M_0's runs cost now: runs paid and reused.
	M0Spent baseline.Spent
}

// Prepare runs the set-up every driver shares: the reference stage, the
// split (StageReferences), then M_0 over the training tasks (StageM0,
// unless Options.M0 is 0).
func Prepare(ctx context.Context, env Environment, o Options) (Prepared, error) {
	if o.Parallel < 1 {
		return Prepared{}, fmt.Errorf("environment: Parallel = %d, want ≥ 1", o.Parallel)
	}
	var p Prepared
	var tasks []records.Task
	if rr, ok := env.(ReferenceRows); ok {
		rows, err := rr.ReferenceRuns(ctx, o.Progress)
		if err != nil {
			return Prepared{}, err
		}
		p.References = rows
		tasks, p.LeftOut = Ready(rows)
	} else {
		var err error
		if tasks, p.LeftOut, err = env.References(ctx, o.Progress); err != nil {
			return Prepared{}, err
		}
	}
	p.Train, p.HeldOut = Split(tasks)
	if err := o.stage(StageReferences, p); err != nil || o.M0 == 0 {
		return p, err
	}
	if len(p.Train) == 0 {
		return p, fmt.Errorf("environment: M_0: no training task has a reference (b_e, σ_e)")
	}
	rep, err := o.Progress.Start("M_0: real runs", o.M0)
	if err != nil {
		return p, err
	}
	p.M0, p.M0Spent, err = M0(ctx, env.Builder(), progress.Executor(env.Executor(), rep), p.Train, env.Catalogue(), o.M0, o.Seed, o.Parallel)
	rep.Finish()
	if err != nil {
		return p, err
	}
	return p, o.stage(StageM0, p)
}
