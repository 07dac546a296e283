// Package labenv is the embedded lab (package lab) as an
// environment.Environment: its tasks' reference runs, its builder and
// executor behind one idempotent pool over the store, and its catalogue.
// The main job, cmd/lm2lm-serve, the transformer example, the README's
// tour and the comparison driver set the lab up through it and
// environment.Prepare.
package labenv

import (
	"context"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// Env is the embedded lab as an environment.
type Env struct {
	lab  *lab.Lab
	pool *builder.Pool
}

var _ environment.Environment = (*Env)(nil)

// Open makes the lab of cfg over store and its pool: cfg.Parallel slots,
// one attempt (a lab run that fails does not fail differently twice), runs
// served from store when already there.
func Open(cfg lab.Config, store records.Store) (*Env, error) {
	l, err := lab.New(cfg, store)
	if err != nil {
		return nil, err
	}
	pool, err := builder.NewPool(l, builder.PoolConfig{Slots: int64(cfg.Parallel), MaxAttempts: 1, Store: store})
	if err != nil {
		return nil, err
	}
	return &Env{lab: l, pool: pool}, nil
}

// Suite returns the V2 suite's training and test tasks at sizes (per
// family), from lab.DefaultSuiteSeed.
func Suite(sizes lab.SuiteSizes) []lab.TaskSpec {
	s := lab.GenerateSuite(lab.DefaultSpace(), sizes, lab.DefaultSuiteSeed)
	return append(append([]lab.TaskSpec(nil), s.Train...), s.Test()...)
}

// Lab returns the lab.
func (e *Env) Lab() *lab.Lab { return e.lab }

// Pool returns the idempotent pool over the lab.
func (e *Env) Pool() *builder.Pool { return e.pool }

// Builder returns the lab.
func (e *Env) Builder() builder.Builder { return e.lab }

// Executor returns the pool.
func (e *Env) Executor() builder.Executor { return e.pool }

// Catalogue returns lab.Catalogue().
func (e *Env) Catalogue() []records.Card { return lab.Catalogue() }

// References trains (or reads back) every task's reference runs (lab.Ready),
// progress counted in tasks. A task whose reference run diverged
// (lab.ErrReference) is left out.
func (e *Env) References(ctx context.Context, p environment.Progress) ([]records.Task, []environment.LeftOut, error) {
	ids := e.lab.IDs("")
	var done func()
	if p != nil {
		rep, err := p("reference runs (tasks)", len(ids))
		if err != nil {
			return nil, nil, err
		}
		defer rep.Finish()
		done = func() { rep.Done(1) }
	}
	tasks, out, err := e.lab.Ready(ctx, ids, done)
	if err != nil {
		return nil, nil, err
	}
	left := make([]environment.LeftOut, len(out))
	for i, x := range out {
		left[i] = environment.LeftOut{ID: x.ID, Err: x.Err}
	}
	return tasks, left, nil
}
