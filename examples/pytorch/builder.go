package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// ErrUnknownTask: Build was given a task the Builder does not hold.
var ErrUnknownTask = errors.New("pytorch: unknown task")

// TaskSpec is one task of train.py: a corpus and a reference recipe.
type TaskSpec struct {
	// Task is the task's record; RefLoss and SeedNoise are set by
	// Builder.SetReference from the reference runs.
	Task records.Task
	// Corpus is the text file trained on (made absolute by NewBuilder).
	Corpus string
	// Heldout, when set, is the validation text kept apart from Corpus
	// (made absolute by NewBuilder): the spec's "heldout", which a
	// sandboxed overlay run never sees and evaluate.py scores
	// (docs/code-builder.md, A loss the overlay cannot forge).
	Heldout   string
	Reference Recipe
}

// Config parameterises a Builder.
type Config struct {
	Tasks []TaskSpec
	// RefSeeds are the reference runs' seeds; Build gives jobs the first, so
	// that a gain shares its seed with a reference run. Default {1, 2, 3}
	// (METHOD.md §1 Vocabulary: most tasks had 3 reference runs).
	RefSeeds []uint64
	// EvalBytes is how many validation bytes a run scores. Default 8192
	// (library choice: about 1.5% of the Opticks, a fraction of a CPU
	// second).
	EvalBytes int
	// Device is train.py's device: "auto" (CUDA when present), "cpu" or
	// "cuda". Default "auto".
	Device string
	// Threads is the CPU threads of a run. Default 1 (library choice: runs
	// are parallel across runs, and one thread keeps CPU runs bit-for-bit
	// reproducible).
	Threads int
}

// DefaultConfig returns the defaults for tasks.
func DefaultConfig(tasks []TaskSpec) Config {
	return Config{Tasks: tasks, RefSeeds: []uint64{1, 2, 3}, EvalBytes: 8192, Device: "auto", Threads: 1}
}

// Builder maps catalogue proposals to train.py recipes (METHOD.md §1
// Vocabulary, Builder): Build applies the proposal's card to the task's
// reference recipe and writes the job spec. It is safe for concurrent use.
type Builder struct {
	cfg   Config
	mu    sync.Mutex
	tasks map[string]TaskSpec
	refs  map[string]map[uint64]float64
}

var _ builder.Builder = (*Builder)(nil)

// NewBuilder checks cfg and returns a Builder.
func NewBuilder(cfg Config) (*Builder, error) {
	if len(cfg.RefSeeds) == 0 || cfg.EvalBytes < 1 || cfg.Threads < 1 || !oneOf(cfg.Device, "auto", "cpu", "cuda") {
		return nil, fmt.Errorf("pytorch: bad config (ref seeds %v, eval bytes %d, threads %d, device %q)",
			cfg.RefSeeds, cfg.EvalBytes, cfg.Threads, cfg.Device)
	}
	b := &Builder{cfg: cfg, tasks: map[string]TaskSpec{}, refs: map[string]map[uint64]float64{}}
	for _, t := range cfg.Tasks {
		if _, dup := b.tasks[t.Task.ID]; dup || t.Task.ID == "" {
			return nil, fmt.Errorf("pytorch: task ID %q empty or repeated", t.Task.ID)
		}
		if err := t.Reference.Validate(); err != nil {
			return nil, fmt.Errorf("pytorch: task %s: %w", t.Task.ID, err)
		}
		abs, err := filepath.Abs(t.Corpus)
		if err != nil {
			return nil, err
		}
		t.Corpus = abs
		if t.Heldout != "" {
			if t.Heldout, err = filepath.Abs(t.Heldout); err != nil {
				return nil, err
			}
		}
		b.tasks[t.Task.ID] = t
	}
	return b, nil
}

// SetReference records the reference recipe's loss of task id with seed;
// later jobs carry it, so that train.py does not train the reference again.
func (b *Builder) SetReference(id string, seed uint64, loss float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refs[id] == nil {
		b.refs[id] = map[uint64]float64{}
	}
	b.refs[id][seed] = loss
}

// Build returns the job of proposal p on task t: the reference recipe
// edited by p's card, as the JSON of a Spec with the known reference
// losses, and Seed the first reference seed. An unknown card or a bad or
// out-of-range parameter, or a recipe train.py would reject, returns an
// error wrapping builder.ErrInfeasible; an unknown task wraps
// ErrUnknownTask. Build does not run anything.
func (b *Builder) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	if err := ctx.Err(); err != nil {
		return builder.Job{}, fmt.Errorf("pytorch: build: %w: %w", builder.ErrCancelled, err)
	}
	return b.build(t, p, true)
}

// referenceJob returns the job of a reference run of t with seed: the
// reference recipe without a reference to measure against, so that the
// script reports no gain and the executor fills in b_e − ℓ (the run
// defines b_e; its task's RefLoss is not known yet).
func (b *Builder) referenceJob(t records.Task, seed uint64) (builder.Job, error) {
	j, err := b.build(t, records.Proposal{Mechanism: records.NoChange}, false)
	j.Seed = seed
	return j, err
}

func (b *Builder) build(t records.Task, p records.Proposal, withRef bool) (builder.Job, error) {
	b.mu.Lock()
	ts, ok := b.tasks[t.ID]
	var losses map[string]float64
	for s, l := range b.refs[t.ID] {
		if losses == nil {
			losses = map[string]float64{}
		}
		losses[strconv.FormatUint(s, 10)] = l
	}
	b.mu.Unlock()
	if !ok {
		return builder.Job{}, fmt.Errorf("%w: %q", ErrUnknownTask, t.ID)
	}
	r, err := Apply(ts.Reference, p)
	if err != nil {
		return builder.Job{}, fmt.Errorf("pytorch: build %s on %s: %w", p.Key(), t.ID, err)
	}
	spec := Spec{Corpus: ts.Corpus, Heldout: ts.Heldout, Block: 1024, ValEvery: 10, EvalBytes: b.cfg.EvalBytes, Recipe: r,
		Device: b.cfg.Device, Threads: b.cfg.Threads}
	if withRef {
		ref := ts.Reference
		spec.Reference, spec.ReferenceLosses = &ref, losses
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return builder.Job{}, fmt.Errorf("pytorch: build %s on %s: %w", p.Key(), t.ID, err)
	}
	return builder.Job{Task: t, Proposal: p, Seed: b.cfg.RefSeeds[0], Spec: raw}, nil
}
