package lab_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// countingStore counts appended records.
type countingStore struct {
	*records.MemStore
	appended atomic.Int64
}

func (s *countingStore) Append(ctx context.Context, rs ...records.Record) error {
	s.appended.Add(int64(len(rs)))
	return s.MemStore.Append(ctx, rs...)
}

func newStore() *countingStore { return &countingStore{MemStore: records.NewMemStore()} }

// tinyTasks are cheap tasks (tens of milliseconds per run) for the fast tests.
func tinyTasks() []lab.TaskSpec {
	base := model.DefaultConfig()
	base.Steps, base.Hidden, base.EvalWindows, base.Batch = 40, 32, 256, 32
	ar, centre, mdm := base, base, base
	centre.Objective = model.CentreMasked
	mdm.Objective = model.MaskedDiffusion
	mdm.EvalWindows = 64
	return []lab.TaskSpec{
		{ID: "tiny-ar", Family: lab.FamilyARProse, Corpus: corpus.Opticks, Ref: "tiny", Split: records.Train, Config: ar},
		{ID: "tiny-centre", Family: lab.FamilyCentre, Corpus: corpus.Opticks, Ref: "tiny", Split: records.Train, Config: centre},
		{ID: "tiny-mdm", Family: lab.FamilyMDM, Corpus: corpus.Opticks, Ref: "tiny", Split: records.HeldOut, Config: mdm},
	}
}

func tinyLab(t *testing.T, store records.Store) *lab.Lab {
	t.Helper()
	cfg := lab.DefaultConfig()
	cfg.Tasks = tinyTasks()
	l, err := lab.New(cfg, store)
	require.NoError(t, err)
	return l
}

func TestDefaultTasks(t *testing.T) {
	specs := lab.DefaultTasks()
	cfg := lab.DefaultConfig()
	require.NoError(t, cfg.Validate())
	var train, held int
	metric := map[string]records.Metric{}
	objective := map[string]model.Objective{}
	for _, s := range specs {
		if s.Split == records.Train {
			train++
		} else {
			held++
		}
		metric[s.Family] = s.Metric()
		objective[s.Family] = s.Config.Objective
		require.Contains(t, s.Description(), s.Ref)
	}
	// ≥ 16 training and ≥ 4 held-out tasks; two AR families in bits
	// per byte and two diffusion families in nats per token (METHOD.md §1).
	require.GreaterOrEqual(t, train, 16)
	require.GreaterOrEqual(t, held, 4)
	require.Equal(t, records.BitsPerByte, metric[lab.FamilyARProse])
	require.Equal(t, records.BitsPerByte, metric[lab.FamilyARCode])
	require.Equal(t, records.NatsPerToken, metric[lab.FamilyMDM])
	require.Equal(t, records.NatsPerToken, metric[lab.FamilyCentre])
	require.Equal(t, model.MaskedDiffusion, objective[lab.FamilyMDM])
	require.Equal(t, model.CentreMasked, objective[lab.FamilyCentre])
	require.Equal(t, []string{lab.FamilyARProse, lab.FamilyARCode, lab.FamilyMDM, lab.FamilyCentre}, lab.Families(specs))

	out, err := lab.HoldOutFamily(specs, lab.FamilyARCode)
	require.NoError(t, err)
	for i, s := range out {
		if s.Family == lab.FamilyARCode {
			require.Equal(t, records.HeldOut, s.Split)
		} else {
			require.Equal(t, specs[i].Split, s.Split)
		}
	}
	require.Equal(t, records.Train, specs[6].Split, "HoldOutFamily must not modify its input")
	_, err = lab.HoldOutFamily(specs, "gpt-5")
	require.ErrorIs(t, err, lab.ErrUnknownFamily)
}

func TestConfigValidate(t *testing.T) {
	for name, edit := range map[string]func(*lab.Config){
		"two seeds":   func(c *lab.Config) { c.RefSeeds = []uint64{1, 2} },
		"dup seed":    func(c *lab.Config) { c.RefSeeds = []uint64{1, 2, 1} },
		"no parallel": func(c *lab.Config) { c.Parallel = 0 },
		"nil clock":   func(c *lab.Config) { c.Now = nil },
		"no tasks":    func(c *lab.Config) { c.Tasks = nil },
		"dup task":    func(c *lab.Config) { c.Tasks = append(c.Tasks, c.Tasks[0]) },
		"bad model":   func(c *lab.Config) { c.Tasks[0].Config.Steps = 0 },
		"bad vocab":   func(c *lab.Config) { c.Tasks[0].Config.Vocab = 200 },
		"bad split":   func(c *lab.Config) { c.Tasks[0].Split = "dev" },
		"bad corpus":  func(c *lab.Config) { c.Corpus.BlockSize = 0 },
	} {
		c := lab.DefaultConfig()
		edit(&c)
		require.ErrorIs(t, c.Validate(), lab.ErrInvalidConfig, name)
		_, err := lab.New(c, records.NewMemStore())
		require.ErrorIs(t, err, lab.ErrInvalidConfig, name)
	}
	_, err := lab.New(lab.DefaultConfig(), nil)
	require.ErrorIs(t, err, lab.ErrInvalidConfig)
}

func TestEveryChoiceBuildsOnEveryTask(t *testing.T) {
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	ctx := context.Background()
	for _, s := range l.Specs() {
		task := records.Task{ID: s.ID}
		for _, c := range lab.Catalogue() {
			for _, p := range cards.Proposals(c) {
				j, err := l.Build(ctx, task, p)
				require.NoError(t, err, "%s on %s", p.Key(), s.ID)
				var cfg model.Config
				require.NoError(t, json.Unmarshal(j.Spec, &cfg))
				require.NoError(t, cfg.Validate())
				require.Equal(t, uint64(1), j.Seed)
			}
		}
		j, err := l.Build(ctx, task, records.Proposal{Mechanism: records.NoChange})
		require.NoError(t, err)
		var cfg model.Config
		require.NoError(t, json.Unmarshal(j.Spec, &cfg))
		require.Equal(t, s.Config, cfg)
	}
}

func TestBuildErrors(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	ctx := context.Background()
	_, err := l.Build(ctx, records.Task{ID: "tiny-ar"}, records.Proposal{Mechanism: "teleport"})
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, cards.ErrUnknownCard)
	_, err = l.Build(ctx, records.Task{ID: "tiny-ar"}, records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "1e9"}})
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorContains(t, err, "outside")
	_, err = l.Build(ctx, records.Task{ID: "nope"}, records.Proposal{Mechanism: records.NoChange})
	require.ErrorIs(t, err, lab.ErrUnknownTask)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Build(cctx, records.Task{ID: "tiny-ar"}, records.Proposal{Mechanism: records.NoChange})
	require.ErrorIs(t, err, builder.ErrCancelled)
}

func TestReferenceRunsAreCachedInTheStore(t *testing.T) {
	store := newStore()
	l := tinyLab(t, store)
	ctx := context.Background()
	tasks, err := l.Tasks(ctx)
	require.NoError(t, err)
	require.Len(t, tasks, 3)
	require.EqualValues(t, 15, store.appended.Load(), "five reference runs per task")
	for _, task := range tasks {
		require.NoError(t, task.Validate())
		ref, err := l.Reference(ctx, task.ID)
		require.NoError(t, err)
		require.Len(t, ref.Runs, 5)
		// METHOD.md §1 Vocabulary: b_e is the mean and σ_e the std of the
		// reference losses over seeds.
		var ls []float64
		for _, r := range ref.Runs {
			ls = append(ls, r.Loss)
			require.Greater(t, r.Cost.DeviceSeconds, 0.0)
			require.Greater(t, r.Cost.FLOPs, 0.0)
		}
		var mean, ss float64
		for _, x := range ls {
			mean += x / 5
		}
		for _, x := range ls {
			ss += (x - mean) * (x - mean)
		}
		std := math.Sqrt(ss / 4)
		require.InDelta(t, mean, task.RefLoss, 1e-12)
		require.InDelta(t, std, task.SeedNoise, 1e-12)
		require.Greater(t, task.SeedNoise, 0.0)
	}
	// The stored runs are reference no-change records with one seed each.
	rs, err := store.Scan(ctx, records.Filter{TaskID: "tiny-ar"})
	require.NoError(t, err)
	require.Len(t, rs, 5)
	for _, r := range rs {
		require.True(t, r.Proposal.IsNoChange())
		require.Equal(t, records.Reference, r.Source)
		require.Len(t, r.Seeds, 1)
	}

	// A second lab on the same store does not retrain: nothing is appended
	// and the runs, costs included, are the stored ones.
	l2 := tinyLab(t, store)
	tasks2, err := l2.Tasks(ctx)
	require.NoError(t, err)
	require.Equal(t, tasks, tasks2)
	require.EqualValues(t, 15, store.appended.Load())
	ref1, _ := l.Reference(ctx, "tiny-mdm")
	ref2, _ := l2.Reference(ctx, "tiny-mdm")
	require.Equal(t, ref1, ref2)

	// A changed reference configuration is not served from the stale runs.
	cfg := lab.DefaultConfig()
	cfg.Tasks = tinyTasks()
	cfg.Tasks[0].Config.Steps = 41
	l3, err := lab.New(cfg, store)
	require.NoError(t, err)
	_, err = l3.Reference(ctx, "tiny-ar")
	require.NoError(t, err)
	require.EqualValues(t, 20, store.appended.Load())
}

func TestReferenceSurvivesAFileStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "refs.jsonl")
	fs, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	ctx := context.Background()
	l := tinyLab(t, fs)
	a, err := l.Task(ctx, "tiny-centre")
	require.NoError(t, err)
	require.NoError(t, fs.Close())
	fs, err = records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	defer fs.Close()
	l2 := tinyLab(t, fs)
	b, err := l2.Task(ctx, "tiny-centre")
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, 5, fs.Len())
}

func TestExecuteGainUsesTheSameSeed(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	ctx := context.Background()
	for _, id := range []string{"tiny-ar", "tiny-centre", "tiny-mdm"} {
		task, err := l.Task(ctx, id)
		require.NoError(t, err)
		ref, err := l.Reference(ctx, id)
		require.NoError(t, err)
		p, err := lab.ParseProposal("embed-dim factor=1.5") // embedding 16 → 24
		require.NoError(t, err)
		j, err := l.Build(ctx, task, p)
		require.NoError(t, err)
		for _, jj := range lab.WithSeeds(j, 2, 3) {
			out, err := l.Execute(ctx, jj)
			require.NoError(t, err)
			refLoss, ok := ref.LossFor(jj.Seed)
			require.True(t, ok)
			require.Equal(t, refLoss-out.Loss, out.Gain, "gain against the same seed's reference")
			require.Equal(t, []uint64{jj.Seed}, out.Seeds)
			require.Greater(t, out.Cost.DeviceSeconds, 0.0)
			require.Greater(t, out.Cost.WallSeconds, 0.0)
			require.Greater(t, out.Cost.FLOPs, 0.0)
			require.Empty(t, out.Infeasible)
			require.NoError(t, out.Record(jj).Validate())
		}
	}
}

func TestExecuteIsDeterministic(t *testing.T) {
	ctx := context.Background()
	run := func() builder.Outcome {
		l := tinyLab(t, records.NewMemStore())
		task, err := l.Task(ctx, "tiny-ar")
		require.NoError(t, err)
		j, err := l.Build(ctx, task, records.Proposal{Mechanism: "activation", Params: map[string]string{"name": "gelu"}})
		require.NoError(t, err)
		j.Seed = 3
		out, err := l.Execute(ctx, j)
		require.NoError(t, err)
		return out
	}
	a, b := run(), run()
	require.Equal(t, math.Float64bits(a.Loss), math.Float64bits(b.Loss), "same task, proposal and seed: same loss bit for bit")
	require.Equal(t, math.Float64bits(a.Gain), math.Float64bits(b.Gain))
}

func TestNoChangeAndExtraSeeds(t *testing.T) {
	store := newStore()
	l := tinyLab(t, store)
	ctx := context.Background()
	task, err := l.Task(ctx, "tiny-ar")
	require.NoError(t, err)
	ref, _ := l.Reference(ctx, "tiny-ar")
	j, err := l.Build(ctx, task, records.Proposal{Mechanism: records.NoChange})
	require.NoError(t, err)
	out, err := l.Execute(ctx, j)
	require.NoError(t, err)
	require.Zero(t, out.Gain)
	require.Equal(t, ref.Runs[0].Loss, out.Loss)

	// A seed outside RefSeeds: the reference is trained for it too, stored,
	// and the gain is against it.
	before := store.appended.Load()
	p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}
	j, err = l.Build(ctx, task, p)
	require.NoError(t, err)
	j.Seed = 99
	out, err = l.Execute(ctx, j)
	require.NoError(t, err)
	require.Equal(t, before+1, store.appended.Load())
	j0, _ := l.Build(ctx, task, records.Proposal{Mechanism: records.NoChange})
	j0.Seed = 99
	ref99, err := l.Execute(ctx, j0)
	require.NoError(t, err)
	require.Equal(t, ref99.Loss-out.Loss, out.Gain)
	require.Equal(t, before+1, store.appended.Load(), "the extra reference is trained once")
	// b_e and σ_e still come from RefSeeds only.
	task2, err := lab.New(l.Config(), store)
	require.NoError(t, err)
	t2, err := task2.Task(ctx, "tiny-ar")
	require.NoError(t, err)
	require.Equal(t, task, t2)
}

func TestDivergenceIsInfeasible(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	ctx := context.Background()
	task, err := l.Task(ctx, "tiny-ar")
	require.NoError(t, err)
	spec, err := l.Spec("tiny-ar")
	require.NoError(t, err)
	cfg := spec.Config
	cfg.Optimizer, cfg.LR, cfg.InitScale = "sgd", 100, 10
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	out, err := l.Execute(ctx, builder.Job{Task: task, Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "50000"}}, Seed: 1, Spec: raw})
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.Contains(t, out.Infeasible, "diverged")
	require.Greater(t, out.Cost.DeviceSeconds, 0.0)
	require.NoError(t, out.Record(builder.Job{Task: task, Proposal: records.Proposal{Mechanism: "x"}}).Validate())

	// A spec that is not a configuration, or an invalid one, is infeasible too.
	for _, spec := range []string{`{`, `{"Embed": 0}`, `{"Colour": "red"}`} {
		out, err = l.Execute(ctx, builder.Job{Task: task, Seed: 1, Spec: json.RawMessage(spec)})
		require.ErrorIs(t, err, builder.ErrInfeasible, spec)
		require.NotEmpty(t, out.Infeasible)
	}
	_, err = l.Execute(ctx, builder.Job{Task: records.Task{ID: "nope"}, Spec: raw})
	require.ErrorIs(t, err, lab.ErrUnknownTask)
}

func TestCancellation(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	ctx := context.Background()
	task, err := l.Task(ctx, "tiny-ar")
	require.NoError(t, err)
	j, err := l.Build(ctx, task, records.Proposal{Mechanism: "width", Params: map[string]string{"factor": "2"}})
	require.NoError(t, err)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Execute(cctx, j)
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled while training: a long run stops early.
	var spec model.Config
	require.NoError(t, json.Unmarshal(j.Spec, &spec))
	spec.Steps = int(model.MaxRunFLOPs / 2 / model.StepFLOPs(spec)) // within the caps, minutes of work
	j.Spec, _ = json.Marshal(spec)
	cctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = l.Execute(cctx, j)
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Reference runs are cancelled too, and a later call retries them.
	l2 := tinyLab(t, records.NewMemStore())
	cctx, cancel = context.WithCancel(ctx)
	cancel()
	_, err = l2.Task(cctx, "tiny-ar")
	require.ErrorIs(t, err, builder.ErrCancelled)
	_, err = l2.Task(ctx, "tiny-ar")
	require.NoError(t, err)
}

func TestRunAllMatchesSequential(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	ctx := context.Background()
	var jobs []builder.Job
	for _, id := range []string{"tiny-ar", "tiny-centre"} {
		task, err := l.Task(ctx, id)
		require.NoError(t, err)
		for _, text := range []string{"lr-scale factor=2", "norm kind=rmsnorm", "teleport"} {
			p, err := lab.ParseProposal(text)
			if err != nil {
				require.ErrorIs(t, err, builder.ErrInfeasible)
				continue
			}
			j, err := l.Build(ctx, task, p)
			require.NoError(t, err)
			jobs = append(jobs, lab.WithSeeds(j, 1, 2)...)
		}
	}
	par := lab.RunAll(ctx, l, jobs, 2)
	require.Len(t, par, len(jobs))
	for i, j := range jobs {
		out, err := l.Execute(ctx, j)
		require.NoError(t, err)
		require.NoError(t, par[i].Err)
		require.Equal(t, j, par[i].Job)
		require.Equal(t, out.Loss, par[i].Outcome.Loss)
	}
	runs, err := l.Run(ctx, "tiny-ar", records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}})
	require.NoError(t, err)
	require.Len(t, runs, 5)
	require.Equal(t, par[0].Outcome.Loss, runs[0].Outcome.Loss)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, r := range lab.RunAll(cctx, l, jobs, 2) {
		require.ErrorIs(t, r.Err, builder.ErrCancelled)
	}
}

func TestCorpusErrorsReachTheCaller(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.txt")
	require.NoError(t, os.WriteFile(small, []byte("too short"), 0o600))
	cfg := lab.DefaultConfig()
	cfg.Tasks = tinyTasks()[:1]
	cfg.Tasks = append(cfg.Tasks, cfg.Tasks[0], cfg.Tasks[0])
	cfg.Tasks[1].ID, cfg.Tasks[1].Corpus, cfg.Tasks[1].Kind = "missing", filepath.Join(dir, "nope.txt"), corpus.KindProse
	cfg.Tasks[2].ID, cfg.Tasks[2].Corpus, cfg.Tasks[2].Kind = "small", small, corpus.KindProse
	l, err := lab.New(cfg, records.NewMemStore())
	require.NoError(t, err)
	_, err = l.Task(context.Background(), "missing")
	require.ErrorIs(t, err, corpus.ErrCorpusMissing)
	_, err = l.Task(context.Background(), "small")
	require.ErrorIs(t, err, corpus.ErrCorpusTooSmall)
	_, err = l.Tasks(context.Background())
	require.Error(t, err)
	_, err = l.Task(context.Background(), "unknown")
	require.ErrorIs(t, err, lab.ErrUnknownTask)
}

// TestKnownEffects is the lab's statistical check: on a short budget a
// learning rate ×10 hurts and a wider embedding helps, each measured as the
// mean gain over the three reference seeds (METHOD.md §1 Vocabulary, gain
// g = b_e − ℓ with shared seeds). Seeded and deterministic, not timed.
func TestKnownEffects(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 9 short runs (several seconds)")
	}
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	ctx := context.Background()
	const id = "ar-prose/opticks/base-300"
	task, err := l.Task(ctx, id)
	require.NoError(t, err)
	mean := func(text string) float64 {
		p, err := lab.ParseProposal(text)
		require.NoError(t, err)
		runs, err := l.Run(ctx, id, p)
		require.NoError(t, err)
		var g float64
		for _, r := range runs {
			require.NoError(t, r.Err)
			g += r.Outcome.Gain
		}
		g /= float64(len(runs))
		t.Logf("%s: mean gain %.4f bits/byte = %.1f σ_e", text, g, g/task.SeedNoise)
		return g
	}
	require.Less(t, mean("lr-scale factor=10"), -2*task.SeedNoise)
	require.Greater(t, mean("embed-dim factor=2"), 2*task.SeedNoise)
}

func ExampleRender() {
	p := records.Proposal{Mechanism: "Adam-Beta2", Params: map[string]string{"value": "0.950"}}
	fmt.Println(lab.Render(p))
	q, err := lab.ParseProposal("warmup-cosine(warmup_frac=0.10, min_frac=0)")
	fmt.Println(q.Key(), err)
	_, err = lab.ParseProposal("depth add=12")
	fmt.Println(errors.Is(err, builder.ErrInfeasible), err)
	// Output:
	// adam-beta2 value=0.95
	// warmup-cosine{min_frac=0,warmup_frac=0.1} <nil>
	// true cards: depth add: 12 outside int in [-6, 6]
}

func TestRepresentativeChangesTheReference(t *testing.T) {
	for _, s := range lab.DefaultTasks() {
		for _, c := range lab.Catalogue() {
			p := lab.Representative(s, c)
			cfg, err := lab.ApplyProposal(s.Config, p)
			require.NoError(t, err)
			require.NotEqual(t, s.Config, cfg, "%s on %s", p.Key(), s.ID)
		}
	}
	// The batch-size card doubles the reference's batch at fixed tokens:
	// 32 → 64 windows and 300 → 150 steps on the mdm references.
	mdm := lab.DefaultTasks()[12]
	require.Equal(t, 32, mdm.Config.Batch)
	require.Equal(t, 300, mdm.Config.Steps)
	c, ok := cards.Lookup("batch-size")
	require.True(t, ok)
	p := lab.Representative(mdm, c)
	require.Equal(t, "batch-size{factor=2}", p.Key())
	cfg, err := lab.ApplyProposal(mdm.Config, p)
	require.NoError(t, err)
	require.Equal(t, [2]int{64, 150}, [2]int{cfg.Batch, cfg.Steps})
}

// FuzzParseProposal: whatever text an LLM writes, ParseProposal either
// rejects it as infeasible or accepts a proposal that renders and parses
// back to itself and that the lab can build (or reject as infeasible).
func FuzzParseProposal(f *testing.F) {
	f.Add("embed-dim factor=2")
	f.Add("lr-scale(factor=10)\nlarger steps")
	f.Add("none")
	f.Add("batch-size: factor = 0.25")
	f.Add("depth add=-1")
	f.Add("wsd{decay_frac=0.9}")
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := lab.ParseProposal(s)
		if err != nil {
			if !errors.Is(err, builder.ErrInfeasible) {
				t.Fatalf("ParseProposal(%q) = %v, not infeasible", s, err)
			}
			return
		}
		q, err := lab.ParseProposal(lab.Render(p))
		if err != nil || q.Key() != p.Key() || q.Text != p.Text {
			t.Fatalf("round trip of %q: %v, %#v vs %#v", s, err, p, q)
		}
		if _, err := l.Build(context.Background(), records.Task{ID: "ar-code/go-source/hot-300"}, p); err != nil && !errors.Is(err, builder.ErrInfeasible) {
			t.Fatalf("Build(%s) = %v", p.Key(), err)
		}
	})
}
