package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/lab/model/kernel"
	"github.com/lm2lm/lm2lm/records"
)

// Sentinel errors of the package.
var (
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("lab: invalid config")
	// ErrUnknownTask: the task ID is not one of the lab's tasks.
	ErrUnknownTask = errors.New("lab: unknown task")
	// ErrUnknownFamily: no task belongs to the family.
	ErrUnknownFamily = errors.New("lab: unknown family")
	// ErrReference: a reference run failed (diverged or invalid); the task
	// cannot be measured until its reference configuration is fixed.
	ErrReference = errors.New("lab: reference run failed")
)

// Config parameterises a Lab.
type Config struct {
	// Corpus configures corpus loading and the block-interleaved split;
	// default corpus.DefaultConfig().
	Corpus corpus.Config
	// Tasks are the lab's tasks; default DefaultTasks(). Use HoldOutFamily
	// to hold out a whole family.
	Tasks []TaskSpec
	// RefSeeds are the seeds of the reference runs that define b_e and σ_e;
	// default {1, 2, 3, 4, 5}. At least 3 distinct seeds (METHOD.md §1
	// Vocabulary: most tasks had 3 reference runs); library choice: five,
	// because runs are cheap and the estimate is rough: the 95% interval of
	// the true σ is 0.52–6.3 × σ_e from three seeds, 0.60–2.9 × from five
	// (χ² with n−1 degrees of freedom). Build gives jobs the
	// first one, so that a gain shares its seed with a reference run.
	RefSeeds []uint64
	// Parallel bounds the reference runs of one task trained at once;
	// default 2. Library choice: the reference machine has two cores and
	// runs are parallel across runs, never within one.
	Parallel int
	// Now is the clock for wall-clock costs; default time.Now.
	Now func() time.Time
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Corpus: corpus.DefaultConfig(), Tasks: DefaultTasks(), RefSeeds: []uint64{1, 2, 3, 4, 5}, Parallel: 2, Now: time.Now}
}

// Validate reports the first problem with c, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	if err := c.Corpus.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(c.RefSeeds) < 3 {
		return fmt.Errorf("%w: %d reference seeds, want ≥ 3", ErrInvalidConfig, len(c.RefSeeds))
	}
	seen := map[uint64]bool{}
	for _, s := range c.RefSeeds {
		if seen[s] {
			return fmt.Errorf("%w: reference seed %d repeated", ErrInvalidConfig, s)
		}
		seen[s] = true
	}
	if c.Parallel < 1 {
		return fmt.Errorf("%w: Parallel = %d, want ≥ 1", ErrInvalidConfig, c.Parallel)
	}
	if c.Now == nil {
		return fmt.Errorf("%w: Now is nil", ErrInvalidConfig)
	}
	if len(c.Tasks) == 0 {
		return fmt.Errorf("%w: no tasks", ErrInvalidConfig)
	}
	ids := map[string]bool{}
	for _, t := range c.Tasks {
		switch {
		case t.ID == "":
			return fmt.Errorf("%w: task with empty ID", ErrInvalidConfig)
		case ids[t.ID]:
			return fmt.Errorf("%w: task %s defined twice", ErrInvalidConfig, t.ID)
		case t.Family == "":
			return fmt.Errorf("%w: task %s has no family", ErrInvalidConfig, t.ID)
		case t.Corpus == "":
			return fmt.Errorf("%w: task %s has no corpus", ErrInvalidConfig, t.ID)
		case !t.Split.Valid():
			return fmt.Errorf("%w: task %s: split %q", ErrInvalidConfig, t.ID, t.Split)
		}
		if err := t.Config.Validate(); err != nil {
			return fmt.Errorf("%w: task %s: %w", ErrInvalidConfig, t.ID, err)
		}
		if err := t.validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if t.Config.Vocab != corpus.Symbols {
			return fmt.Errorf("%w: task %s: Vocab = %d, the corpora have %d symbols", ErrInvalidConfig, t.ID, t.Config.Vocab, corpus.Symbols)
		}
		ids[t.ID] = true
	}
	return nil
}

// Lab is the embedded LM development environment: tasks with cached
// reference runs, and the Builder and Executor of its proposals. A Lab is
// safe for concurrent use; it trains only inside the method called (no
// background goroutines).
type Lab struct {
	cfg   Config
	store records.Store
	specs map[string]TaskSpec
	order []string

	mu      sync.Mutex
	corpora map[string]*corpusEntry
	refs    map[string]*refEntry
}

type corpusEntry struct {
	once   sync.Once
	data   model.Data
	c      *corpus.Corpus
	err    error
	slices map[int][]byte // training slices by DataBytes; guarded by Lab.mu
}

// refEntry holds one task's reference runs. mu serialises their training.
type refEntry struct {
	mu   sync.Mutex
	ref  *Reference
	tag  string
	runs map[uint64]RefRun // every reference run known, by seed (RefSeeds and extra)
}

// RefRun is one seeded reference run.
type RefRun struct {
	Seed uint64
	Loss float64
	Cost records.Cost
}

// Reference is a task with its reference runs: Task.RefLoss is b_e (the
// mean of the runs with the lab's RefSeeds) and Task.SeedNoise is σ_e
// (their sample standard deviation, n−1; METHOD.md §1 Vocabulary).
type Reference struct {
	Task records.Task
	Runs []RefRun // one per RefSeed, in RefSeeds order
}

// LossFor returns the reference loss of seed when it is one of the runs.
func (r Reference) LossFor(seed uint64) (float64, bool) {
	for _, x := range r.Runs {
		if x.Seed == seed {
			return x.Loss, true
		}
	}
	return 0, false
}

// New returns a lab over cfg that caches reference runs in store (any
// records.Store; records.NewMemStore() keeps them for the process,
// records.OpenFile across processes). Corpora load lazily.
func New(cfg Config, store records.Store) (*Lab, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	l := &Lab{cfg: cfg, store: store, specs: map[string]TaskSpec{}, corpora: map[string]*corpusEntry{}, refs: map[string]*refEntry{}}
	l.cfg.Tasks = append([]TaskSpec(nil), cfg.Tasks...)
	l.cfg.RefSeeds = append([]uint64(nil), cfg.RefSeeds...)
	for _, t := range cfg.Tasks {
		l.specs[t.ID] = t
		l.order = append(l.order, t.ID)
	}
	return l, nil
}

// Config returns the lab's configuration.
func (l *Lab) Config() Config {
	c := l.cfg
	c.Tasks = append([]TaskSpec(nil), c.Tasks...)
	c.RefSeeds = append([]uint64(nil), c.RefSeeds...)
	return c
}

// Specs returns the task definitions in configuration order.
func (l *Lab) Specs() []TaskSpec { return append([]TaskSpec(nil), l.cfg.Tasks...) }

// Spec returns the definition of task id.
func (l *Lab) Spec(id string) (TaskSpec, error) {
	s, ok := l.specs[id]
	if !ok {
		return TaskSpec{}, fmt.Errorf("%w: %q", ErrUnknownTask, id)
	}
	return s, nil
}

// Tasks returns every task with its reference loss and seed noise, in
// configuration order, training the reference runs that the store does not
// hold yet.
func (l *Lab) Tasks(ctx context.Context) ([]records.Task, error) {
	out := make([]records.Task, 0, len(l.order))
	for _, id := range l.order {
		r, err := l.Reference(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, r.Task)
	}
	return out, nil
}

// Task returns task id with its reference loss and seed noise.
func (l *Lab) Task(ctx context.Context, id string) (records.Task, error) {
	r, err := l.Reference(ctx, id)
	return r.Task, err
}

// LeftOut is a task Ready left out: its reference run failed (Err wraps
// ErrReference), so it has no b_e or σ_e and is no research state.
type LeftOut struct {
	ID  string
	Err error
}

// Ready returns the tasks ids, in order, with their reference runs trained
// or read back (Task). A task whose reference run fails (ErrReference: it
// diverged) is left out and reported in leftOut, so that a driver names it
// rather than stopping; any other error stops Ready. done, when not nil, is
// called once per task handled, for progress.
func (l *Lab) Ready(ctx context.Context, ids []string, done func()) (tasks []records.Task, leftOut []LeftOut, err error) {
	for _, id := range ids {
		t, err := l.Task(ctx, id)
		if done != nil {
			done()
		}
		switch {
		case errors.Is(err, ErrReference):
			leftOut = append(leftOut, LeftOut{ID: id, Err: err})
		case err != nil:
			return nil, nil, err
		default:
			tasks = append(tasks, t)
		}
	}
	return tasks, leftOut, nil
}

// data returns the split of the task's corpus, loading it once, with the
// training side cut to the task's slice (TaskSpec.DataBytes).
func (l *Lab) data(spec TaskSpec) (model.Data, error) {
	l.mu.Lock()
	e := l.corpora[spec.Corpus]
	if e == nil {
		e = &corpusEntry{slices: map[int][]byte{}}
		l.corpora[spec.Corpus] = e
	}
	l.mu.Unlock()
	e.once.Do(func() {
		e.c, e.err = corpus.Load(spec.Corpus, l.cfg.Corpus)
		if e.err == nil {
			tr, va := e.c.Split(l.cfg.Corpus)
			e.data = model.Data{Train: tr, Val: va}
		}
	})
	if e.err != nil {
		return model.Data{}, fmt.Errorf("lab: task %s: %w", spec.ID, e.err)
	}
	if spec.DataBytes == 0 {
		return e.data, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tr, ok := e.slices[spec.DataBytes]
	if !ok {
		tr = corpus.Slice(e.data.Train, spec.DataBytes, l.cfg.Corpus.BlockSize)
		e.slices[spec.DataBytes] = tr
	}
	return model.Data{Train: tr, Val: e.data.Val}, nil
}

func (l *Lab) corpusDigest(spec TaskSpec) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.corpora[spec.Corpus].c.Digest
}

// refTag identifies the reference configuration, corpus, split and matrix
// kernel backend that a stored reference run belongs to; stored runs with
// another tag (an edited configuration, a different Go installation's
// source, another backend, whose losses agree only to about 1e-4) are
// ignored.
func (l *Lab) refTag(spec TaskSpec) string {
	cfgJSON, _ := json.Marshal(spec.Config) // a struct of plain fields cannot fail
	h := sha256.New()
	h.Write(cfgJSON)
	fmt.Fprintf(h, "|%s|%d|%d|%s", l.corpusDigest(spec), l.cfg.Corpus.BlockSize, l.cfg.Corpus.ValEvery, kernel.Default())
	if spec.DataBytes > 0 {
		fmt.Fprintf(h, "|slice %d", spec.DataBytes)
	}
	return "lab reference run " + hex.EncodeToString(h.Sum(nil)[:12])
}

func (l *Lab) entry(id string) *refEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.refs[id]
	if e == nil {
		e = &refEntry{}
		l.refs[id] = e
	}
	return e
}

// Reference returns task id's reference runs, b_e and σ_e. They are
// computed once: runs found in the store (same configuration, corpus,
// kernel backend and seed) are reused and missing ones are trained (up to Config.Parallel at a
// time) and appended to the store as real no-change records, so a second
// call, or a second process sharing a durable store, does not retrain.
// They are stored with Source records.Reference, never records.Real, so
// that a lookup of the no-change proposal's outcome (builder.Pool's) cannot
// mistake a reference run for it. (Stores written before reference runs had
// their own source hold them as real records; such runs are ignored here
// and retrained, and such a store should not back a Pool.)
func (l *Lab) Reference(ctx context.Context, id string) (Reference, error) {
	spec, err := l.Spec(id)
	if err != nil {
		return Reference{}, err
	}
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ref != nil {
		return *e.ref, nil
	}
	if err := l.loadRuns(ctx, spec, e); err != nil {
		return Reference{}, err
	}
	var missing []uint64
	for _, s := range l.cfg.RefSeeds {
		if _, ok := e.runs[s]; !ok {
			missing = append(missing, s)
		}
	}
	fresh, err := l.trainRefs(ctx, spec, missing)
	if err != nil {
		return Reference{}, err
	}
	for _, r := range fresh {
		e.runs[r.Seed] = r
	}
	ref := Reference{Runs: make([]RefRun, len(l.cfg.RefSeeds))}
	losses := make([]float64, len(l.cfg.RefSeeds))
	for i, s := range l.cfg.RefSeeds {
		ref.Runs[i] = e.runs[s]
		losses[i] = e.runs[s].Loss
	}
	mean, std := stat.MeanStd(losses)
	ref.Task = records.Task{
		ID: spec.ID, Family: spec.Family, Split: spec.Split, Metric: spec.Metric(),
		RefLoss: mean, SeedNoise: max(std, minSeedNoise), Budget: spec.Config.Steps,
		Description: spec.Description(), Descriptors: l.descriptors(spec),
	}
	if err := l.storeRuns(ctx, ref.Task, e.tag, fresh); err != nil {
		return Reference{}, err
	}
	e.ref = &ref
	return ref, nil
}

// minSeedNoise floors σ_e so that a task is valid (records.Task requires
// σ_e > 0) even if every reference seed gave the same loss.
const minSeedNoise = 1e-6

// loadRuns reads the stored reference runs of spec into e (once).
func (l *Lab) loadRuns(ctx context.Context, spec TaskSpec, e *refEntry) error {
	if e.runs != nil {
		return nil
	}
	if _, err := l.data(spec); err != nil {
		return err
	}
	e.tag = l.refTag(spec)
	key := records.Proposal{Mechanism: records.NoChange}.Key()
	rs, err := l.store.Scan(ctx, records.Filter{TaskID: spec.ID, Key: key, Source: records.Reference})
	if err != nil {
		return storeErr(ctx, "scan reference runs of "+spec.ID, err)
	}
	e.runs = map[uint64]RefRun{}
	for _, r := range rs {
		if r.Proposal.Text != e.tag || len(r.Seeds) != 1 || r.Infeasible != "" {
			continue
		}
		if _, ok := e.runs[r.Seeds[0]]; !ok {
			e.runs[r.Seeds[0]] = RefRun{Seed: r.Seeds[0], Loss: r.Loss, Cost: r.Cost}
		}
	}
	return nil
}

func (l *Lab) storeRuns(ctx context.Context, t records.Task, tag string, runs []RefRun) error {
	if len(runs) == 0 {
		return nil
	}
	now := l.cfg.Now()
	rs := make([]records.Record, len(runs))
	for i, r := range runs {
		rs[i] = records.Record{
			Task: t, Proposal: records.Proposal{Mechanism: records.NoChange, Text: tag},
			Gain: t.RefLoss - r.Loss, Loss: r.Loss, Source: records.Reference,
			Seeds: []uint64{r.Seed}, Cost: r.Cost, Time: now,
		}
	}
	if err := l.store.Append(ctx, rs...); err != nil {
		return storeErr(ctx, "append reference runs of "+t.ID, err)
	}
	return nil
}

func storeErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("lab: %s: %w: %w", what, builder.ErrCancelled, err)
	}
	return fmt.Errorf("lab: %s: %w", what, err)
}

// trainRefs trains the reference configuration of spec with each seed, up
// to Config.Parallel at once.
func (l *Lab) trainRefs(ctx context.Context, spec TaskSpec, seeds []uint64) ([]RefRun, error) {
	out := make([]RefRun, len(seeds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(l.cfg.Parallel)
	for i, s := range seeds {
		g.Go(func() error {
			r, err := l.refRun(gctx, spec, s)
			out[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func (l *Lab) refRun(ctx context.Context, spec TaskSpec, seed uint64) (RefRun, error) {
	res, cost, err := l.train(ctx, spec, spec.Config, seed)
	if err != nil {
		if errors.Is(err, builder.ErrCancelled) {
			return RefRun{}, err
		}
		return RefRun{}, fmt.Errorf("%w: task %s seed %d: %w", ErrReference, spec.ID, seed, err)
	}
	if res.Diverged || !stat.Finite(res.Loss) {
		return RefRun{}, fmt.Errorf("%w: task %s seed %d diverged: %s", ErrReference, spec.ID, seed, res.Reason)
	}
	return RefRun{Seed: seed, Loss: res.Loss, Cost: cost}, nil
}

// refLoss returns the reference loss of task id with seed, training (and
// storing) an extra reference run when seed is not one of RefSeeds and no
// stored run has it.
func (l *Lab) refLoss(ctx context.Context, spec TaskSpec, seed uint64) (float64, error) {
	ref, err := l.Reference(ctx, spec.ID)
	if err != nil {
		return 0, err
	}
	if loss, ok := ref.LossFor(seed); ok {
		return loss, nil
	}
	e := l.entry(spec.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.runs[seed]; ok {
		return r.Loss, nil
	}
	r, err := l.refRun(ctx, spec, seed)
	if err != nil {
		return 0, err
	}
	if err := l.storeRuns(ctx, ref.Task, e.tag, []RefRun{r}); err != nil {
		return 0, err
	}
	e.runs[seed] = r
	return r.Loss, nil
}

// train runs model.Train on spec's corpus and measures its cost.
func (l *Lab) train(ctx context.Context, spec TaskSpec, cfg model.Config, seed uint64) (model.Result, records.Cost, error) {
	d, err := l.data(spec)
	if err != nil {
		return model.Result{}, records.Cost{}, err
	}
	if err := ctx.Err(); err != nil {
		return model.Result{}, records.Cost{}, fmt.Errorf("lab: %w: %w", builder.ErrCancelled, err)
	}
	start := l.cfg.Now()
	var res model.Result
	cpu := threadCPU(func() { res, err = model.Train(ctx, cfg, d, seed) })
	cost := records.Cost{DeviceSeconds: cpu, WallSeconds: l.cfg.Now().Sub(start).Seconds(), FLOPs: res.FLOPs}
	if cost.DeviceSeconds <= 0 {
		cost.DeviceSeconds = cost.WallSeconds
	}
	if err != nil {
		if ctx.Err() != nil {
			return res, cost, fmt.Errorf("lab: %w: %w", builder.ErrCancelled, err)
		}
		return res, cost, fmt.Errorf("lab: train %s seed %d: %w", spec.ID, seed, err)
	}
	return res, cost, nil
}

// IDs returns the task IDs of the given split ("" = all), sorted.
func (l *Lab) IDs(split records.Split) []string {
	var out []string
	for _, id := range l.order {
		if split == "" || l.specs[id].Split == split {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
