// Package servetest holds the fakes the environment service is tested
// with: a small catalogue over rwmtest's tasks and evidence, the embedded
// world model, a builder and an executor of deterministic runs
// (buildertest.Quadratic) behind an idempotent builder.Pool over a
// records store. It does I/O only where Options name files.
package servetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
	"github.com/lm2lm/lm2lm/serve"
)

// Catalogue is the fakes' mechanism library: rwmtest's proposals as cards.
func Catalogue() []records.Card {
	return []records.Card{
		{Mechanism: "lr-scale", Description: "scale the learning rate", Params: []records.ParamSpec{{Name: "factor", Choices: []string{"0.5", "2"}}}},
		{Mechanism: "warmup", Description: "warm the learning rate up", Params: []records.ParamSpec{{Name: "steps", Choices: []string{"1", "1.5"}}}},
		{Mechanism: "norm", Description: "change the normalisation", Params: []records.ParamSpec{{Name: "kind", Choices: []string{"rmsnorm", "layernorm"}}}},
		{Mechanism: "dropout", Description: "add dropout", Params: []records.ParamSpec{{Name: "p", Choices: []string{"0.1", "0.2"}}}},
	}
}

// Completions returns k completions an LLM policy might write: catalogue
// proposals as JSON, the no-change proposal, and (every seventh) an
// unparseable answer; i varies them.
func Completions(i, k int) []string {
	opts := []string{
		`{"mechanism": "lr-scale", "params": {"factor": "2"}, "rationale": "faster"}`,
		`{"mechanism": "lr-scale", "params": {"factor": "0.5"}}`,
		`{"mechanism": "warmup", "params": {"steps": "1"}}`,
		`I would try {"mechanism": "norm", "params": {"kind": "rmsnorm"}} here.`,
		`{"mechanism": "dropout", "params": {"p": "0.1"}}`,
		`{"mechanism": "none"}`,
		"no idea; `rm -rf /` $(reboot)",
		`{"mechanism": "warmup", "params": {"steps": "1.5"}}`,
	}
	out := make([]string, k)
	for j := range out {
		out[j] = opts[(i*3+j*5)%len(opts)]
	}
	return out
}

// Options configure Components.
type Options struct {
	// Store receives the real runs; nil = a new records.MemStore.
	Store records.Store
	// RunLog, when set, gets one line per run the executor completes
	// (appended and synced), so that runs paid across processes can be
	// counted.
	RunLog string
	// RunDelay delays each run after the first DelayAfter of the process;
	// ArmFile, when set, is created when a delayed run starts (a test then
	// knows a run is in flight).
	RunDelay   time.Duration
	DelayAfter int64
	ArmFile    string
	// PredictDelay delays each world-model call; PredictArm is created
	// at the first.
	PredictDelay time.Duration
	PredictArm   string
	// RunGate, when set, holds every run until it is closed.
	RunGate chan struct{}
	// PredictFail, when set, makes the world model fail every call with
	// this error (an outage, not a bad proposal).
	PredictFail error
}

// Executor runs buildertest's deterministic "training": the loss is
// buildertest.Quadratic of the job. It counts its runs.
type Executor struct {
	opt  Options
	runs atomic.Int64
}

// Runs returns the runs executed.
func (e *Executor) Runs() int64 { return e.runs.Load() }

// Execute implements builder.Executor.
func (e *Executor) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	if e.opt.RunGate != nil {
		select {
		case <-ctx.Done():
			return builder.Outcome{}, fmt.Errorf("%w: %w", builder.ErrCancelled, ctx.Err())
		case <-e.opt.RunGate:
		}
	}
	n := e.runs.Add(1)
	if e.opt.RunDelay > 0 && n > e.opt.DelayAfter {
		if e.opt.ArmFile != "" {
			_ = os.WriteFile(e.opt.ArmFile, nil, 0o600)
		}
		select {
		case <-ctx.Done():
			return builder.Outcome{}, fmt.Errorf("%w: %w", builder.ErrCancelled, ctx.Err())
		case <-time.After(e.opt.RunDelay):
		}
	}
	loss := buildertest.Quadratic(j.Task, j.Proposal, j.Seed)
	if e.opt.RunLog != "" {
		if err := appendLine(e.opt.RunLog, j.Task.ID+" "+j.Proposal.Key()); err != nil {
			return builder.Outcome{}, err
		}
	}
	return builder.Outcome{Loss: loss, Gain: j.Task.RefLoss - loss, Seeds: []uint64{j.Seed}, Cost: records.Cost{DeviceSeconds: 1}}, nil
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Builder builds a job of seed 7 for any catalogue proposal.
type Builder struct{}

// Build implements builder.Builder.
func (Builder) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	return builder.Job{Task: t, Proposal: p, Seed: 7, Spec: buildertest.Spec{}.JSON()}, nil
}

// slowWorld delays a world model's calls.
type slowWorld struct {
	rwm.WorldModel
	d   time.Duration
	arm string
}

func (w slowWorld) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if w.arm != "" {
		_ = os.WriteFile(w.arm, nil, 0o600)
	}
	select {
	case <-ctx.Done():
		return rwm.Prediction{}, ctx.Err()
	case <-time.After(w.d):
	}
	return w.WorldModel.Predict(ctx, q)
}

// failWorld fails every call.
type failWorld struct {
	rwm.WorldModel
	err error
}

func (w failWorld) Predict(context.Context, rwm.Query) (rwm.Prediction, error) {
	return rwm.Prediction{}, w.err
}

// Components returns the service's components over the fakes: four
// training tasks and two held-out ones of rwmtest, M_0 of 24 records, the
// embedded world model with default settings, and the executor (returned
// too) behind a builder.Pool over the store.
func Components(opt Options) (serve.Components, *Executor, error) {
	store := opt.Store
	if store == nil {
		store = records.NewMemStore()
	}
	ex := &Executor{opt: opt}
	// A fixed clock: record times and measured wall times are the same in
	// every process, so that states compare bit for bit.
	fixed := func() time.Time { return time.Unix(1_800_000_000, 0).UTC() }
	pool, err := builder.NewPool(ex, builder.PoolConfig{Slots: 2, MaxAttempts: 1, Store: store, Now: fixed})
	if err != nil {
		return serve.Components{}, nil, err
	}
	emb, err := rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	if err != nil {
		return serve.Components{}, nil, err
	}
	var world rwm.WorldModel = emb
	if opt.PredictDelay > 0 {
		world = slowWorld{WorldModel: world, d: opt.PredictDelay, arm: opt.PredictArm}
	}
	if opt.PredictFail != nil {
		world = failWorld{world, opt.PredictFail}
	}
	tasks := []records.Task{rwmtest.Task(0), rwmtest.Task(1), rwmtest.Task(2), rwmtest.Task(3)}
	var held []records.Task
	for i := 4; i < 6; i++ {
		t := rwmtest.Task(i)
		t.Split = records.HeldOut
		held = append(held, t)
	}
	return serve.Components{World: world, Builder: Builder{}, Executor: pool, Tasks: tasks, HeldOut: held,
		Evidence: rwmtest.Evidence(24), Catalogue: Catalogue()}, ex, nil
}

// Config returns a service configuration for tests in dir: calibrations
// of 3 runs at steps 2 and 4, small batches allowed.
func Config(dir string) serve.Config {
	cfg := serve.DefaultConfig()
	cfg.Dir = dir
	cfg.Schedule.Steps, cfg.Schedule.Budgets = []int{2, 4}, []int{3, 3}
	return cfg
}

// StateDir returns dir/state.
func StateDir(dir string) string { return filepath.Join(dir, "state") }
