package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// method runs LM2LM on the example's tasks with ex: reference runs, M_0,
// DAPO with on-policy calibration, and a held-out evaluation of the policy
// before and after training, every run a real train.py run.
func method(ctx context.Context, w io.Writer, o options, prof profile, ex builder.Executor) (err error) {
	start := time.Now()
	prose, code, err := Corpora(filepath.Join(o.out, "corpora"))
	if err != nil {
		return err
	}
	store, err := records.OpenFile(filepath.Join(o.out, "records.jsonl"), records.DefaultFileConfig())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); err == nil {
			err = cerr
		}
	}()
	bcfg := DefaultConfig(Tasks(prose, code, prof.tasks))
	bcfg.Device, bcfg.Threads = o.device, o.threads
	b, err := NewBuilder(bcfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "LM2LM with PyTorch runs (%s executor, profile %s, seed %d)\n", o.executor, o.profile, o.seed)
	pool, err := builder.NewPool(ex, builder.PoolConfig{Slots: int64(o.parallel), MaxAttempts: 2,
		Backoff: time.Second, MaxBackoff: 10 * time.Second, Store: store})
	if err != nil {
		return err
	}
	te := &env{b: b, ex: ex, pool: pool, store: store, parallel: o.parallel}
	prep, err := environment.Prepare(ctx, te, environment.Options{M0: prof.M0, Seed: o.seed, Parallel: max(o.parallel, 1),
		OnStage: func(s environment.Stage, p environment.Prepared) error {
			if s == environment.StageReferences {
				for _, t := range te.tasks {
					fmt.Fprintf(w, "  %-16s %-8s b_e %.4f bits/byte, σ_e %.4f (%d reference seeds)\n", t.ID, t.Split, t.RefLoss, t.SeedNoise, len(bcfg.RefSeeds))
				}
			}
			return nil
		}})
	if err != nil {
		return err
	}
	train, held, m0, cat := prep.Train, prep.HeldOut, prep.M0, te.Catalogue()
	fmt.Fprintf(w, "M_0: %d real records (%.0f s)\n", m0.Len(), time.Since(start).Seconds())
	pol, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil)
	if err != nil {
		return err
	}
	ecfg := lm2lm.DefaultEvalConfig()
	ecfg.StatesPerTask, ecfg.Parallel, ecfg.Seed = prof.EvalStates, o.parallel, o.seed
	base, err := lm2lm.Evaluate(ctx, ecfg, pol, b, pool, held, nil)
	if err != nil {
		return err
	}
	runs, err := trainPolicy(ctx, w, o, prof, pol, b, pool, train, m0)
	if err != nil {
		return err
	}
	trained, err := lm2lm.Evaluate(ctx, ecfg, pol, b, pool, held, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nheld-out tasks (J_test): gains in σ_e units, %d states × %d real runs\n", len(base.States), ecfg.K)
	fmt.Fprintf(w, "%-10s %8s %8s %10s %11s\n", "policy", "Avg@4", "Best@4", "neg. rate", "infeasible")
	for _, x := range []struct {
		name string
		r    lm2lm.EvalReport
	}{{"Base", base}, {"trained", trained}} {
		fmt.Fprintf(w, "%-10s %+8.2f %+8.2f %9.1f%% %10.1f%%\n", x.name, x.r.AvgK, x.r.BestK, 100*x.r.NegativeRate, 100*x.r.InfeasibleRate)
	}
	fmt.Fprintf(w, "real runs: M_0 %d, calibration %d, evaluation %d + %d; wall %.0f s\n",
		m0.Len(), runs, base.Runs, trained.Runs, time.Since(start).Seconds())
	return nil
}

// trainPolicy runs the trainer with the embedded world model on M_0 and
// returns the number of real calibration runs.
func trainPolicy(ctx context.Context, w io.Writer, o options, prof profile, pol *proposer.Policy, b *Builder,
	ex builder.Executor, train []records.Task, m0 records.Evidence) (int, error) {
	cat := Catalogue()
	wcfg := rwm.DefaultEmbeddedConfig()
	wcfg.Priors, wcfg.Cards = rwm.PriorsFromCards(cat), cat
	cfg := lm2lm.DefaultConfig()
	prof.ApplyTrainer(&cfg)
	cfg.Parallel, cfg.Seed = o.parallel, o.seed
	world, err := rwm.NewEmbedded(wcfg)
	if err != nil {
		return 0, err
	}
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: world, Builder: b, Executor: ex,
		Tasks: train, Evidence: m0})
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(w, "\ntraining: %d steps, %d states × %d proposals per rollout, calibration at %v with budgets %v\n",
		cfg.Steps, cfg.States, cfg.DAPO.GroupSize, cfg.Schedule.Steps, cfg.Schedule.Budgets)
	_, err = tr.Run(ctx, func(s lm2lm.StepReport) {
		if r := s.Rollout; r != nil && len(r.Share) > 0 {
			fmt.Fprintf(w, "  step %3d: mean reward %+.3f, predicted gain %+.2f σ_e, top mechanism %s (%.0f%%)\n",
				s.Step, r.MeanReward, r.MeanGain, r.Share[0].Mechanism, 100*r.Share[0].Fraction)
		}
		if c := s.Calibration; c != nil {
			fmt.Fprintf(w, "  calibration at step %d: %d real runs (%d infeasible), mean real gain %+.2f σ_e\n",
				c.Step, c.Executed, c.Infeasible, c.MeanRealGain)
			for _, r := range c.Records {
				fmt.Fprintf(w, "    %s %s: %s\n", r.Task.ID, r.Proposal.Key(), outcome(r))
			}
		}
	})
	if err != nil {
		return 0, err
	}
	_, runs := tr.Cost()
	return runs, nil
}

func outcome(r records.Record) string {
	if r.Infeasible != "" {
		return "infeasible (" + r.Infeasible + ")"
	}
	return fmt.Sprintf("%+.2f σ_e (loss %.4f)", r.Gain/r.Task.SeedNoise, r.Loss)
}

// env is the example's tasks as an environment.Environment: reference
// runs through the executor (References), M_0 and every later run through
// the idempotent pool over the store, the example's catalogue.
type env struct {
	b        *Builder
	ex       builder.Executor
	pool     *builder.Pool
	store    records.Store
	parallel int
	tasks    []records.Task // the tasks with b_e and σ_e, once measured
}

var _ environment.Environment = (*env)(nil)

// References measures every task's reference runs (References); a
// reference run that fails is an error, so none is left out.
func (e *env) References(ctx context.Context, _ environment.Progress) ([]records.Task, []environment.LeftOut, error) {
	tasks, err := References(ctx, e.b, e.ex, e.store, e.parallel)
	e.tasks = tasks
	return tasks, nil, err
}

// Builder returns the example's builder.
func (e *env) Builder() builder.Builder { return e.b }

// Executor returns the idempotent pool.
func (e *env) Executor() builder.Executor { return e.pool }

// Catalogue returns the example's cards.
func (e *env) Catalogue() []records.Card { return Catalogue() }
