package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/slurm"
	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	rwmopenai "github.com/lm2lm/lm2lm/rwm/openai"
)

// env is an environment opened from its config: the store, the executor
// and the catalogue.
type env struct {
	cfg   envconfig.Config
	store *records.FileStore
	exec  builder.Executor
	cards []records.Card
	mode  progress.Mode
	w     io.Writer
}

func open(cfg envconfig.Config, mode progress.Mode, w io.Writer) (*env, error) {
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
	return &env{cfg: cfg, store: store, exec: ex, cards: cards, mode: mode, w: w}, nil
}

func (e *env) Close() error { return e.store.Close() }

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
		if err := os.MkdirAll(s.WorkDir, 0o755); err != nil {
			return nil, err
		}
		return slurm.New(sc)
	default:
		sc := builder.DefaultSubprocessConfig()
		sc.Command, sc.PassEnv, sc.Env = t.Command, t.PassEnv, t.Env
		return builder.NewSubprocess(sc)
	}
}

// pool wraps the executor in a builder.Pool; with store set, runs are
// idempotent through it.
func (e *env) pool(store records.Store) (*builder.Pool, error) {
	pc := builder.DefaultPoolConfig()
	pc.Slots, pc.MaxAttempts, pc.Timeout = e.cfg.Executor.Slots, e.cfg.Executor.MaxAttempts, e.cfg.Training.Timeout
	pc.PricePerDeviceHour, pc.Store = e.cfg.PricePerDeviceHour, store
	return builder.NewPool(e.exec, pc)
}

func (e *env) progress(title string, total int) (*progress.Reporter, error) {
	return progress.New(e.w, progress.Config{Title: title, Total: total, Mode: e.mode})
}

// Spec is the job spec the training command reads: the task's reference
// recipe, to which it applies the job's proposal, and the reference losses
// measured so far by seed (a script may report its gain against the
// reference run of the same seed).
type Spec struct {
	Recipe          map[string]any     `json:"recipe"`
	ReferenceLosses map[string]float64 `json:"reference_losses,omitempty"`
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
	spec := Spec{Recipe: b.tasks[t.ID].Recipe}
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

// RefTask is one task's reference result in the report.
type RefTask struct {
	Task    records.Task `json:"task"` // with b_e (ref_loss) and σ_e (seed_noise)
	Losses  []float64    `json:"losses"`
	Seeds   []uint64     `json:"seeds"`
	LeftOut string       `json:"left_out,omitempty"` // why the task has no b_e (an infeasible reference run)
	PaidNow int          `json:"paid_now"`
	Reused  int          `json:"reused"`
	DeviceS float64      `json:"device_seconds"`
}

// references runs every task's reference recipe for its seeds (or reads
// the runs back from the store) and returns b_e and σ_e per task. Each run
// is appended to the store as soon as it finishes, as a records.Reference
// record (not Real: its no-change proposal must not stand for a paired
// no-change run), so a killed and rerun stage pays for no run twice.
func (e *env) references(ctx context.Context, b *envBuilder) ([]RefTask, error) {
	none := records.Proposal{Mechanism: records.NoChange}
	type todo struct {
		i    int
		seed uint64
	}
	out := make([]RefTask, len(e.cfg.Tasks))
	stored := make([]map[uint64]records.Record, len(e.cfg.Tasks))
	var missing []todo
	for i, t := range e.cfg.TaskRecords() {
		out[i] = RefTask{Task: t, Seeds: e.cfg.Tasks[i].Seeds}
		rs, err := e.store.Scan(ctx, records.Filter{TaskID: t.ID, Key: none.Key(), Source: records.Reference})
		if err != nil {
			return nil, err
		}
		stored[i] = map[uint64]records.Record{}
		for _, r := range rs {
			if len(r.Seeds) == 1 {
				stored[i][r.Seeds[0]] = r
			}
		}
		for _, s := range out[i].Seeds {
			if _, ok := stored[i][s]; ok {
				out[i].Reused++
			} else {
				missing = append(missing, todo{i, s})
			}
		}
	}
	pool, err := e.pool(nil)
	if err != nil {
		return nil, err
	}
	rep, err := e.progress("reference runs", len(missing))
	if err != nil {
		return nil, err
	}
	ex := progress.Executor(pool, rep)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(int(e.cfg.Executor.Slots))
	for _, m := range missing {
		g.Go(func() error {
			t := out[m.i].Task // b_e and σ_e unknown: 0 in the job
			j, err := b.job(t, none, m.seed, false)
			if err != nil {
				return err
			}
			o, err := ex.Execute(gctx, j)
			r := o.Record(j)
			r.Source, r.Seeds, r.Time = records.Reference, []uint64{m.seed}, time.Now().UTC()
			switch {
			case errors.Is(err, builder.ErrInfeasible):
				r.Loss, r.Gain = 0, 0
				if r.Infeasible == "" {
					r.Infeasible = err.Error()
				}
			case err != nil:
				return fmt.Errorf("reference run of %s seed %d: %w", t.ID, m.seed, err)
			default:
				r.Gain = 0
			}
			// The record's task is the task as known at the run: b_e its own
			// loss; the stage computes the task's b_e and σ_e from all seeds.
			r.Task.RefLoss, r.Task.SeedNoise = r.Loss, e.cfg.Reference.MinSeedNoise
			if err := e.store.Append(ctx, r); err != nil {
				return err
			}
			mu.Lock()
			stored[m.i][m.seed] = r
			out[m.i].PaidNow++
			out[m.i].DeviceS += r.Cost.DeviceSeconds
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	rep.Finish()
	if err != nil {
		return nil, err
	}
	for i := range out {
		for _, s := range out[i].Seeds {
			r := stored[i][s]
			if r.Infeasible != "" {
				out[i].LeftOut = fmt.Sprintf("seed %d: %s", s, r.Infeasible)
				break
			}
			out[i].Losses = append(out[i].Losses, r.Loss)
			b.setReference(out[i].Task.ID, s, r.Loss)
		}
		if out[i].LeftOut == "" {
			mean, std := meanStd(out[i].Losses)
			out[i].Task.RefLoss, out[i].Task.SeedNoise = mean, max(std, e.cfg.Reference.MinSeedNoise)
		}
	}
	return out, nil
}

// meanStd returns the mean and the sample standard deviation (0 for one
// value).
func meanStd(xs []float64) (float64, float64) {
	var s float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	if len(xs) < 2 {
		return m, 0
	}
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	v /= float64(len(xs) - 1)
	return m, math.Sqrt(v)
}

// ready returns the training and held-out tasks with b_e and σ_e.
func ready(refs []RefTask) (train, held []records.Task) {
	for _, r := range refs {
		if r.LeftOut != "" {
			continue
		}
		if r.Task.Split == records.Train {
			train = append(train, r.Task)
		} else {
			held = append(held, r.Task)
		}
	}
	return train, held
}

// M0Report is what the m0 verb measured.
type M0Report struct {
	Records    int          `json:"records"`
	Infeasible int          `json:"infeasible"`
	PaidNow    int          `json:"paid_now"`
	Reused     int          `json:"reused"`
	Cost       records.Cost `json:"cost_paid_now"`
	Seed       uint64       `json:"seed"`
}

// m0 draws M_0 (records.DrawChanges over the training tasks and the
// catalogue, seeded from the file) and measures it through a Pool over the
// store (baseline.RunDraws): stored runs are served, not paid again.
func (e *env) m0(ctx context.Context, b *envBuilder, train []records.Task) (records.Evidence, M0Report, error) {
	rep := M0Report{Seed: e.cfg.M0.Seed}
	if len(train) == 0 {
		return records.Evidence{}, rep, errors.New("lm2lm: no training task has a reference (b_e, σ_e)")
	}
	var draws []baseline.Draw
	for _, it := range records.DrawChanges(rand.New(rand.NewPCG(e.cfg.M0.Seed, 0x6d30)), train, e.cards, e.cfg.M0.Size, nil) {
		draws = append(draws, baseline.Draw{Task: it.Task, Proposal: it.Proposal})
	}
	pool, err := e.pool(e.store)
	if err != nil {
		return records.Evidence{}, rep, err
	}
	pr, err := e.progress("M_0 runs", len(draws))
	if err != nil {
		return records.Evidence{}, rep, err
	}
	recs, spent, err := baseline.RunDraws(ctx, b, progress.Executor(pool, pr), draws, int(e.cfg.Executor.Slots))
	pr.Finish()
	if err != nil {
		return records.Evidence{}, rep, err
	}
	ev, err := records.NewEvidence(recs...)
	if err != nil {
		return records.Evidence{}, rep, err
	}
	for _, r := range recs {
		if r.Infeasible != "" {
			rep.Infeasible++
		}
	}
	rep.Records, rep.PaidNow, rep.Reused, rep.Cost = ev.Len(), spent.Runs, spent.Reused, spent.Cost
	return ev, rep, nil
}

// world returns the configured world model.
func (e *env) world(getenv func(string) string) (rwm.WorldModel, error) {
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

// writeReport writes v as indented JSON to <out>/name, replacing it
// atomically.
func (e *env) writeReport(name string, v any) (string, error) {
	if err := os.MkdirAll(e.cfg.Out, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(e.cfg.Out, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}
