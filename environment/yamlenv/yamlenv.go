// Package yamlenv is an environment on a team's own training code,
// opened from its config file (package envconfig; docs/own-environment.md):
// the store, the executor of the training command (a subprocess or
// Slurm), the catalogue, the builder that passes catalogue proposals to
// the command as data, the reference runs and the world model the file
// names. It is an environment.Environment beside package labenv, the
// embedded lab; drivers set it up through environment.Prepare.
package yamlenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/slurm"
	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	rwmopenai "github.com/lm2lm/lm2lm/rwm/openai"
)

// Env is an environment on a team's own training code, opened from its
// config file (package envconfig; docs/own-environment.md): the store, the
// executor of the training command, the catalogue and the builder that
// passes catalogue proposals to the command as data. It is safe for
// concurrent use.
type Env struct {
	cfg   envconfig.Config
	store *records.FileStore
	view  records.Store // the store as the training code's version sees it
	exec  builder.Executor
	cards []records.Card
	b     *envBuilder
	rec   *recorder // the pool, remembering failed runs

	refFailures []Failure // of the last ReferenceRuns
}

var _ environment.Environment = (*Env)(nil)

// Open opens the environment of cfg (resolved and validated): it reads the
// catalogue, makes the executor and opens the store. Close closes the
// store.
func Open(cfg envconfig.Config) (*Env, error) {
	cards, err := cfg.Cards()
	if err != nil {
		return nil, err
	}
	ex, err := executor(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Store), 0o755); err != nil {
		return nil, err
	}
	store, err := records.OpenFile(cfg.Store, records.DefaultFileConfig())
	if err != nil {
		return nil, err
	}
	e := &Env{cfg: cfg, store: store, view: View(store, cfg.Training.Version), exec: ex, cards: cards, b: newBuilder(cfg, cards)}
	pool, err := e.newPool(e.view)
	if err != nil {
		store.Close()
		return nil, err
	}
	e.rec = e.remember(pool)
	return e, nil
}

// remember wraps ex in a recorder of failed runs over the environment's
// store.
func (e *Env) remember(ex builder.Executor) *recorder {
	return &recorder{inner: ex, store: e.view, minNoise: e.cfg.Reference.MinSeedNoise, now: time.Now}
}

// Failures returns the runs through Executor that gave no outcome since
// the last call, paid now or read back from the store (Failure.Earlier),
// ordered by task, proposal and seed. Each paid now is in the store as a
// records.Failed record, with its log tail and log file.
func (e *Env) Failures() []Failure { return e.rec.take() }

// LogDir returns where every run's whole log is kept: logs/ beside the
// store.
func LogDir(cfg envconfig.Config) string { return filepath.Join(filepath.Dir(cfg.Store), "logs") }

// Close closes the store.
func (e *Env) Close() error { return e.store.Close() }

// File returns the config the environment was opened from.
func (e *Env) File() envconfig.Config { return e.cfg }

// Store returns the records store.
func (e *Env) Store() *records.FileStore { return e.store }

// Builder returns the builder of the training command's jobs; after
// References its jobs carry the reference losses by seed.
func (e *Env) Builder() builder.Builder { return e.b }

// Executor returns the pool over the training command: executor.slots
// slots, executor.max_attempts, training.timeout, the price per
// device-hour, and idempotent over the store (the records of
// training.version). A run that gives no outcome is kept in the store as a
// records.Failed record and not run again until it is forgotten (Forget);
// Failures lists them.
func (e *Env) Executor() builder.Executor { return e.rec }

// Catalogue returns the catalogue's cards.
func (e *Env) Catalogue() []records.Card { return e.cards }

// executor returns the configured executor of the training command.
func executor(cfg envconfig.Config) (builder.Executor, error) {
	t := cfg.Training
	switch cfg.Executor.Kind {
	case envconfig.Slurm:
		s := cfg.Executor.Slurm
		sc := slurm.DefaultConfig()
		sc.Command, sc.PassEnv, sc.Env = t.Command, t.PassEnv, t.Env
		sc.Partition, sc.Account, sc.QOS = s.Partition, s.Account, s.QOS
		sc.GRES, sc.SlotGRES, sc.CPUsPerTask, sc.Mem = s.GRES, s.SlotGRES, s.CPUsPerTask, s.Mem
		sc.TimeLimit, sc.WorkDir, sc.ExtraArgs = s.TimeLimit, s.WorkDir, s.ExtraArgs
		sc.LogDir = LogDir(cfg)
		if err := os.MkdirAll(s.WorkDir, 0o755); err != nil {
			return nil, err
		}
		return slurm.New(sc)
	default:
		sc := builder.DefaultSubprocessConfig()
		sc.Command, sc.PassEnv, sc.Env = t.Command, t.PassEnv, t.Env
		sc.LogDir = LogDir(cfg)
		return builder.NewSubprocess(sc)
	}
}

// newPool wraps the executor in a builder.Pool; with store set, runs are
// idempotent through it.
func (e *Env) newPool(store records.Store) (*builder.Pool, error) {
	pc := builder.DefaultPoolConfig()
	pc.Slots, pc.MaxAttempts, pc.Timeout = e.cfg.Executor.Slots, e.cfg.Executor.MaxAttempts, e.cfg.Training.Timeout
	pc.PricePerDeviceHour, pc.Store = e.cfg.PricePerDeviceHour, store
	return builder.NewPool(e.exec, pc)
}

// Spec is the job spec the training command reads: the task's reference
// recipe, to which it applies the job's proposal, the proposal's
// parameters typed by its card (a float or int parameter a JSON number,
// an enum a string; proposal.params holds them all as the strings of the
// proposal's key), and the reference losses measured so far by seed (a
// script may report its gain against the reference run of the same seed).
type Spec struct {
	Recipe          map[string]any     `json:"recipe"`
	Params          map[string]any     `json:"params,omitempty"`
	ReferenceLosses map[string]float64 `json:"reference_losses,omitempty"`
}

// typedParams returns p's parameters typed by its card: a float or int
// parameter as a number, anything else (an enum, a value that does not
// parse) as its string. Nil for the no-change proposal.
func (b *envBuilder) typedParams(p records.Proposal) map[string]any {
	c, ok := b.cards[records.CanonicalName(p.Mechanism)]
	if !ok || len(p.Params) == 0 {
		return nil
	}
	kinds := map[string]string{}
	for _, ps := range c.Params {
		kinds[ps.Name] = ps.Kind
	}
	out := make(map[string]any, len(p.Params))
	for k, v := range p.Params {
		out[k] = v
		if kinds[k] != "float" && kinds[k] != "int" {
			continue
		}
		if x, err := strconv.ParseFloat(records.CanonicalValue(v), 64); err == nil && !math.IsInf(x, 0) && !math.IsNaN(x) {
			out[k] = x
		}
	}
	return out
}

// envBuilder passes catalogue proposals to the training command: it checks
// the proposal against the catalogue and writes the task's recipe into the
// job's spec. It is safe for concurrent use.
type envBuilder struct {
	tasks map[string]envconfig.Task
	cards map[string]records.Card
	slots int64
	mu    sync.Mutex
	refs  map[string]map[string]float64
}

var _ builder.Builder = (*envBuilder)(nil)

func newBuilder(cfg envconfig.Config, cards []records.Card) *envBuilder {
	b := &envBuilder{tasks: map[string]envconfig.Task{}, cards: map[string]records.Card{}, slots: cfg.Training.Slots,
		refs: map[string]map[string]float64{}}
	for _, t := range cfg.Tasks {
		b.tasks[t.ID] = t
	}
	for _, c := range cards {
		b.cards[records.CanonicalName(c.Mechanism)] = c
	}
	return b
}

func (b *envBuilder) setReference(id string, seed uint64, loss float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refs[id] == nil {
		b.refs[id] = map[string]float64{}
	}
	b.refs[id][strconv.FormatUint(seed, 10)] = loss
}

// Build returns the job of p on t with the task's first reference seed, so
// that a gain shares its seed with a reference run. A mechanism outside the
// catalogue, a missing or unknown parameter or a value outside the card's
// choices and range is infeasible.
func (b *envBuilder) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	if err := ctx.Err(); err != nil {
		return builder.Job{}, fmt.Errorf("%w: %w", builder.ErrCancelled, err)
	}
	ts, ok := b.tasks[t.ID]
	if !ok {
		return builder.Job{}, fmt.Errorf("lm2lm: unknown task %q", records.Excerpt(t.ID))
	}
	if err := b.check(p); err != nil {
		return builder.Job{}, fmt.Errorf("%w: %s on %s: %v", builder.ErrInfeasible, p.Key(), t.ID, err)
	}
	return b.job(t, p, ts.Seeds[0], true)
}

func (b *envBuilder) job(t records.Task, p records.Proposal, seed uint64, withRefs bool) (builder.Job, error) {
	spec := Spec{Recipe: b.tasks[t.ID].Recipe, Params: b.typedParams(p)}
	if spec.Recipe == nil {
		spec.Recipe = map[string]any{}
	}
	if withRefs {
		b.mu.Lock()
		if r := b.refs[t.ID]; len(r) > 0 {
			spec.ReferenceLosses = map[string]float64{}
			for k, v := range r {
				spec.ReferenceLosses[k] = v
			}
		}
		b.mu.Unlock()
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return builder.Job{}, fmt.Errorf("lm2lm: spec of %s: %w", t.ID, err)
	}
	return builder.Job{Task: t, Proposal: p, Seed: seed, Spec: raw, Slots: b.slots}, nil
}

func (b *envBuilder) check(p records.Proposal) error {
	if p.IsNoChange() {
		return nil
	}
	c, ok := b.cards[records.CanonicalName(p.Mechanism)]
	if !ok {
		return fmt.Errorf("mechanism %q is not in the catalogue", records.Excerpt(p.Mechanism))
	}
	known := map[string]records.ParamSpec{}
	for _, ps := range c.Params {
		known[records.CanonicalName(ps.Name)] = ps
	}
	for k := range p.Params {
		if _, ok := known[records.CanonicalName(k)]; !ok {
			return fmt.Errorf("card %s has no parameter %q", c.Mechanism, records.Excerpt(k))
		}
	}
	for _, ps := range c.Params {
		v, ok := p.Params[ps.Name]
		if !ok {
			return fmt.Errorf("parameter %s is missing", ps.Name)
		}
		cv := records.CanonicalValue(v)
		in := false
		for _, ch := range ps.Choices {
			in = in || records.CanonicalValue(ch) == cv
		}
		if in {
			continue
		}
		x, err := strconv.ParseFloat(cv, 64)
		if ps.Kind == "enum" || err != nil || !(ps.Min < ps.Max) || x < ps.Min || x > ps.Max {
			return fmt.Errorf("parameter %s = %q is outside the card's choices and range", ps.Name, records.Excerpt(v))
		}
	}
	return nil
}

// ReferenceRuns runs every task's reference recipe for its seeds (or reads
// the runs back from the store) and returns b_e and σ_e per task. Each run
// is appended to the store as soon as it finishes, as a records.Reference
// record (not Real: its no-change proposal must not stand for a paired
// no-change run), so a killed and rerun stage pays for no run twice. A run
// that gives no outcome is a records.Failed record, not paid again until
// forgotten; its task is left out with the failure (RefTask.Failed) and
// ReferenceFailures lists it.
//
// Afterwards the builder's jobs carry the reference losses by seed.
func (e *Env) ReferenceRuns(ctx context.Context, p environment.Progress) ([]environment.RefTask, error) {
	type todo struct {
		i    int
		seed uint64
	}
	out, stored, err := scanReferences(ctx, e.cfg, e.view)
	if err != nil {
		return nil, err
	}
	var missing []todo
	for i := range out {
		for _, s := range out[i].Seeds {
			// A stored failure is asked for again: the recorder answers it
			// from the store, and the stage lists it.
			if refStatus(stored[i], s) == Reused {
				out[i].Reused++
			} else {
				missing = append(missing, todo{i, s})
			}
		}
	}
	// Reference records are appended here, as Reference: the pool has no
	// store.
	pool, err := e.newPool(nil)
	if err != nil {
		return nil, err
	}
	rec := e.remember(pool)
	rep, err := p.Start("reference runs", len(missing))
	if err != nil {
		return nil, err
	}
	ex := progress.Executor(rec, rep)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(int(e.cfg.Executor.Slots))
	for _, m := range missing {
		g.Go(func() error {
			r, paid, err := e.referenceRun(ctx, gctx, ex, out[m.i].Task, m.seed)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if paid {
				out[m.i].PaidNow++
				out[m.i].DeviceS += r.Cost.DeviceSeconds
			} else {
				out[m.i].Reused++
			}
			stored[m.i][m.seed] = r
			return nil
		})
	}
	err = g.Wait()
	rep.Finish()
	e.refFailures = rec.take()
	if err != nil {
		return nil, err
	}
	aggregate(e.cfg, out, stored)
	for _, r := range out {
		if r.LeftOut == "" {
			for i, s := range r.Seeds {
				e.b.setReference(r.Task.ID, s, r.Losses[i])
			}
		}
	}
	return out, nil
}

// ReferenceFailures returns the reference runs of the last ReferenceRuns
// that gave no outcome (paid then, or read back from the store).
func (e *Env) ReferenceFailures() []Failure { return e.refFailures }

// referenceRun runs task t's reference recipe with seed through ex (b_e
// and σ_e unknown: 0 in the job) and appends its record to the store as a
// records.Reference record; an infeasible run is a record with Infeasible
// set, a run that gave no outcome a records.Failed record (appended by the
// recorder ex wraps), any other failure an error. paid reports whether the
// run was paid for now.
func (e *Env) referenceRun(ctx, runCtx context.Context, ex builder.Executor, t records.Task, seed uint64) (records.Record, bool, error) {
	j, err := e.b.job(t, records.Proposal{Mechanism: records.NoChange}, seed, false)
	if err != nil {
		return records.Record{}, false, err
	}
	o, err := ex.Execute(runCtx, j)
	r := o.Record(j)
	r.Source, r.Seeds, r.Time = records.Reference, []uint64{seed}, time.Now().UTC()
	switch {
	case errors.Is(err, builder.ErrInfeasible):
		r.Loss, r.Gain = 0, 0
		if r.Infeasible == "" {
			r.Infeasible = err.Error()
		}
	case builder.Class(err) == builder.ErrFailed && runCtx.Err() == nil:
		r.Source, r.Failure = records.Failed, err.Error()
		return r, !o.Reused, nil
	case err != nil:
		return r, false, fmt.Errorf("reference run of %s seed %d: %w", t.ID, seed, err)
	default:
		r.Gain = 0
	}
	// The record's task is the task as known at the run: b_e its own loss;
	// the stage computes the task's b_e and σ_e from all seeds.
	r.Task.RefLoss, r.Task.SeedNoise = r.Loss, e.cfg.Reference.MinSeedNoise
	return r, true, e.view.Append(ctx, r)
}

// aggregate sets b_e and σ_e of every task of out from its stored
// reference runs by seed (mean and sample standard deviation, σ_e floored
// at reference.min_seed_noise), or why it has none.
func aggregate(cfg envconfig.Config, out []environment.RefTask, stored []map[uint64]records.Record) {
	for i := range out {
		for _, s := range out[i].Seeds {
			r, ok := stored[i][s]
			why := ""
			switch {
			case !ok:
				why = "no reference run in the store"
			case r.Source == records.Failed:
				out[i].Failed++
				why = "run failed: " + r.Failure
			case r.Infeasible != "":
				why = r.Infeasible
			default:
				out[i].Losses = append(out[i].Losses, r.Loss)
			}
			if why != "" && out[i].LeftOut == "" {
				out[i].LeftOut = fmt.Sprintf("seed %d: %s", s, why)
			}
		}
		if out[i].LeftOut == "" {
			mean, std := stat.MeanStd(out[i].Losses)
			out[i].Task.RefLoss, out[i].Task.SeedNoise = mean, max(std, cfg.Reference.MinSeedNoise)
		} else {
			out[i].Losses = nil
		}
	}
}

// StoredReferences is ReferenceRuns without running anything: b_e and σ_e
// of every task from the reference runs in store (of training.version), a
// task with a seed not yet run left out with the reason. PaidNow is 0;
// Reused counts the stored runs. It reads store only (which may be opened
// read-only).
func StoredReferences(ctx context.Context, cfg envconfig.Config, store records.Store) ([]environment.RefTask, error) {
	out, stored, err := scanReferences(ctx, cfg, View(store, cfg.Training.Version))
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Reused = len(stored[i])
		for _, r := range stored[i] {
			out[i].DeviceS += r.Cost.DeviceSeconds
		}
	}
	aggregate(cfg, out, stored)
	return out, nil
}

// scanReferences reads every task's stored reference runs by seed: its
// reference record, else its failure (a records.Failed record).
func scanReferences(ctx context.Context, cfg envconfig.Config, store records.Store) ([]environment.RefTask, []map[uint64]records.Record, error) {
	none := records.Proposal{Mechanism: records.NoChange}
	out := make([]environment.RefTask, len(cfg.Tasks))
	stored := make([]map[uint64]records.Record, len(cfg.Tasks))
	for i, t := range cfg.TaskRecords() {
		out[i] = environment.RefTask{Task: t, Seeds: cfg.Tasks[i].Seeds}
		rs, err := store.Scan(ctx, records.Filter{TaskID: t.ID, Key: none.Key()})
		if err != nil {
			return nil, nil, err
		}
		stored[i] = map[uint64]records.Record{}
		for _, r := range rs {
			if len(r.Seeds) != 1 || !slices.Contains(out[i].Seeds, r.Seeds[0]) {
				continue
			}
			if _, ok := stored[i][r.Seeds[0]]; r.Source == records.Reference || r.Source == records.Failed && !ok {
				stored[i][r.Seeds[0]] = r
			}
		}
	}
	return out, stored, nil
}

// References runs ReferenceRuns and returns the tasks that have b_e and
// σ_e, in the file's order, and those left out.
func (e *Env) References(ctx context.Context, p environment.Progress) ([]records.Task, []environment.LeftOut, error) {
	refs, err := e.ReferenceRuns(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	tasks, left := environment.Ready(refs)
	return tasks, left, nil
}

// World returns the world model of world_model: an OpenAI-compatible
// server (rwm/openai, at most its concurrency calls at once; the API key
// from the variable api_key_env names, read through getenv, and nothing
// else from the process environment) or the embedded model over the
// catalogue's priors.
func (e *Env) World(getenv func(string) string) (rwm.WorldModel, error) {
	w := e.cfg.WorldModel
	if w.Kind == envconfig.OpenAI {
		o := w.OpenAI
		oc := rwmopenai.DefaultConfig()
		oc.BaseURL, oc.Model, oc.Temperature = o.BaseURL, o.Model, o.Temperature
		if o.APIKeyEnv != "" {
			oc.APIKey = getenv(o.APIKeyEnv)
			if oc.APIKey == "" {
				return nil, fmt.Errorf("lm2lm: world_model.openai.api_key_env names %s, which is not set", o.APIKeyEnv)
			}
		}
		// Nothing else comes from the environment: the file names the server.
		oc.Getenv = func(string) string { return "" }
		m, err := rwmopenai.New(oc)
		if err != nil {
			return nil, err
		}
		return rwm.NewLimit(m, o.Concurrency)
	}
	wc := rwm.DefaultEmbeddedConfig()
	wc.Priors, wc.Cards = rwm.PriorsFromCards(e.cards), e.cards
	return rwm.NewEmbedded(wc)
}

// WriteReport writes v as indented JSON to <out>/name, replacing it
// atomically, and returns its path.
func (e *Env) WriteReport(name string, v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	return environment.WriteOut(e.cfg.Out, name, append(b, '\n'))
}
