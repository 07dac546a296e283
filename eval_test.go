package lm2lm_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// fixed proposes the same list of proposals for every state.
type fixed []records.Proposal

func (f fixed) Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	out := make([]proposer.Sample, n)
	for i := range out {
		out[i] = proposer.Sample{Proposal: f[i%len(f)]}
	}
	return out, ctx.Err()
}

// noisy runs proposals under truth plus a seed effect of seed/10 σ_e, so
// runs with different seeds are different measurements; it counts runs.
type noisy struct {
	oracle
	runs atomic.Int64
}

func (n *noisy) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	n.runs.Add(1)
	out, err := n.oracle.Execute(ctx, j)
	g := out.Gain + float64(j.Seed)/10*j.Task.SeedNoise
	out.Gain, out.Loss = g, j.Task.RefLoss-g
	return out, err
}

func storePool(t *testing.T, e builder.Executor) *builder.Pool {
	t.Helper()
	cfg := builder.DefaultPoolConfig()
	cfg.Store = records.NewMemStore()
	p, err := builder.NewPool(e, cfg)
	require.NoError(t, err)
	return p
}

// A second evaluation over the same store pays for nothing: every
// measurement is reused, and the first one's runs and cost are its own.
func TestEvaluateSecondPassReusesEverything(t *testing.T) {
	ex := &noisy{}
	pool := storePool(t, ex)
	cfg := lm2lm.DefaultEvalConfig()
	cfg.Seeds = []uint64{1, 2, 3, 4, 5}
	pol := mixed()
	first, err := lm2lm.Evaluate(context.Background(), cfg, pol, oracle{}, pool, tasks(), nil)
	require.NoError(t, err)
	require.EqualValues(t, first.Runs, ex.runs.Load())
	require.Equal(t, float64(first.Runs), first.Cost.DeviceSeconds, "one device-second per fresh run")
	require.Positive(t, first.Runs)

	second, err := lm2lm.Evaluate(context.Background(), cfg, pol, oracle{}, pool, tasks(), nil)
	require.NoError(t, err)
	require.Zero(t, second.Runs)
	require.Zero(t, second.Cost.DeviceSeconds)
	require.Equal(t, first.Runs+first.Reused, second.Reused)
	require.EqualValues(t, first.Runs, ex.runs.Load(), "the executor ran nothing more")
	require.Equal(t, first.AvgK, second.AvgK)
	for _, x := range second.Samples() {
		require.True(t, x.Reused || !x.Measured || x.Invalid)
	}
}

func mixed() proposer.Proposer {
	return fixed{prop("wider", "2"), prop("lr", "1"), prop("wider", "1"), prop("deeper", "1")}
}

// A policy that always proposes one change gets K distinct measurements
// per state: each sample runs with its own seed, none is reused.
func TestEvaluateDuplicatesAreIndependentDraws(t *testing.T) {
	ex := &noisy{}
	pool := storePool(t, ex)
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask, cfg.Seeds = 1, []uint64{1, 2, 3, 4, 5}
	rep, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, pool, tasks()[:1], nil)
	require.NoError(t, err)
	st := rep.States[0]
	require.Len(t, st.Samples, 4)
	seeds, gains := map[uint64]bool{}, map[float64]bool{}
	for k, x := range st.Samples {
		require.Equal(t, k, x.Index)
		require.False(t, x.Reused, "sample %d", k)
		seeds[x.Seed], gains[x.Gain] = true, true
		// wider/2 is +3 σ_e, the seed adds seed/10.
		require.InDelta(t, 3+float64(x.Seed)/10, x.Gain, 1e-9)
	}
	require.Len(t, seeds, 4)
	require.Len(t, gains, 4)
	require.Equal(t, 4, rep.Runs)
	require.Zero(t, rep.Reused)
	// Seeds 1..4 for state 0: Avg = 3 + (0.1+0.2+0.3+0.4)/4 = 3.25.
	require.InDelta(t, 3.25, st.Avg, 1e-9)

	// Without Seeds the builder's seed is kept: four samples, one
	// measurement, three of them served by the store or a twin.
	cfg.Seeds = nil
	rep, err = lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, storePool(t, &noisy{}), tasks()[:1], nil)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Runs)
	require.Equal(t, 3, rep.Reused)
}

// An infeasible sample counts −c σ_e in Avg@K and Best@K: replacing one of
// four +3 σ_e samples by an infeasible one lowers Avg from 3 to
// (3+3+3−6)/4 = 0.75, by (3+6)/4 = 2.25; the feasible-only average stays 3.
func TestEvaluateInfeasibleCountsMinusC(t *testing.T) {
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask = 1
	good, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks(), nil)
	require.NoError(t, err)
	bad, err := lm2lm.Evaluate(context.Background(), cfg,
		fixed{prop("wider", "2"), prop("wider", "2"), prop("wider", "2"), prop("nope", "1")}, oracle{}, oracle{}, tasks(), nil)
	require.NoError(t, err)
	require.InDelta(t, 3, good.AvgK, 1e-9)
	require.InDelta(t, 0.75, bad.AvgK, 1e-9)
	require.InDelta(t, 2.25, good.AvgK-bad.AvgK, 1e-9)
	require.InDelta(t, 3, bad.AvgKFeasible, 1e-9)
	require.InDelta(t, 3, bad.BestK, 1e-9)
	x := bad.States[0].Samples[3]
	require.True(t, x.Measured)
	require.False(t, x.Feasible)
	require.Equal(t, -6.0, x.Gain)
	// With c = 2 the same infeasible sample costs (3+2)/4 = 1.25.
	cfg.Clip = 2
	bad2, err := lm2lm.Evaluate(context.Background(), cfg,
		fixed{prop("wider", "2"), prop("wider", "2"), prop("wider", "2"), prop("nope", "1")}, oracle{}, oracle{}, tasks(), nil)
	require.NoError(t, err)
	require.InDelta(t, 1.75, bad2.AvgK, 1e-9)
	// A state whose every sample is infeasible has Avg = Best = −c and no
	// feasible-only average.
	all, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("nope", "1")}, oracle{}, oracle{}, tasks(), nil)
	require.NoError(t, err)
	require.Equal(t, -2.0, all.AvgK)
	require.Equal(t, -2.0, all.BestK)
	require.True(t, math.IsNaN(all.AvgKFeasible))
}

// historyPool holds n real records of each task.
func historyPool(t *testing.T, n int) *records.Pool {
	t.Helper()
	var rs []records.Record
	mechs := []string{"wider", "deeper", "lr", "trap", "decay", "smooth"}
	for _, task := range tasks() {
		for i := 0; i < n; i++ {
			rec, _, err := lm2lm.RunReal(context.Background(), oracle{}, oracle{}, task, prop(mechs[i%6], []string{"1", "2"}[i/6%2]))
			require.NoError(t, err)
			rs = append(rs, rec)
		}
	}
	p, err := records.NewPool(rs...)
	require.NoError(t, err)
	return p
}

// States carry real histories of their own task, of varied lengths; every
// policy sees the same states under one seed, and a task's states do not
// depend on the other tasks in the list.
func TestEvaluateStatesDifferInHistory(t *testing.T) {
	pool := historyPool(t, 12)
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask = 8
	a, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks(), pool)
	require.NoError(t, err)
	b, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("lr", "1")}, oracle{}, oracle{}, tasks(), pool)
	require.NoError(t, err)
	lengths := map[int]bool{}
	histories := map[string]bool{}
	for i, st := range a.States {
		require.Equal(t, st.State, b.States[i].State, "state %d differs between policies", i)
		var key string
		for _, r := range st.State.History {
			require.Equal(t, st.State.Task.ID, r.Task.ID)
			require.Equal(t, records.Real, r.Source)
			key += r.Proposal.Key() + ";"
		}
		lengths[len(st.State.History)] = true
		histories[st.State.Task.ID+"|"+key] = true
	}
	require.Greater(t, len(lengths), 3, "history lengths %v", lengths)
	require.Greater(t, len(histories), len(a.States)*3/4, "most states have their own history")
	only, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks()[2:], pool)
	require.NoError(t, err)
	for i, st := range only.States {
		require.Equal(t, a.States[16+i].State, st.State)
	}
	other := cfg
	other.Seed = 2
	c, err := lm2lm.Evaluate(context.Background(), other, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks(), pool)
	require.NoError(t, err)
	same := 0
	for i := range c.States {
		if len(c.States[i].State.History) == len(a.States[i].State.History) {
			same++
		}
	}
	require.Less(t, same, len(c.States), "another seed draws other states")
}

// With a world model the samples carry its predictions in σ_e units.
func TestEvaluatePredicted(t *testing.T) {
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask = 1
	cfg.World = predictions(map[string]float64{prop("wider", "2").Key(): 1.5})
	rep, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2"), prop("lr", "1")}, oracle{}, oracle{}, tasks()[:1], nil)
	require.NoError(t, err)
	xs := rep.Samples()
	require.Len(t, xs, 4)
	require.InDelta(t, 1.5, xs[0].Predicted, 1e-9)
	require.InDelta(t, 0, xs[1].Predicted, 1e-9)
	require.InDelta(t, 3, xs[0].Gain, 1e-9)
	require.InDelta(t, -2, xs[1].Gain, 1e-9)
	cfg.World = nil
	rep, err = lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks()[:1], nil)
	require.NoError(t, err)
	require.True(t, math.IsNaN(rep.Samples()[0].Predicted))
}

// evidenceCount predicts, for every proposal, a gain of one σ_e per
// record of its evidence: what the evidence held, read off Predicted.
type evidenceCount struct{}

func (evidenceCount) Predict(_ context.Context, q rwm.Query) (rwm.Prediction, error) {
	return rwm.Prediction{Valid: true, Gain: float64(q.Evidence.Len()) * q.Task.SeedNoise}, nil
}

// With WithHistory the world model reads Evidence followed by each
// state's own real history, so each sample's evidence grows by its
// state's history; without it every state sees Evidence alone.
func TestEvaluatePredictedWithHistory(t *testing.T) {
	pool := historyPool(t, 12)
	rec, _, err := lm2lm.RunReal(context.Background(), oracle{}, oracle{}, tasks()[0], prop("deeper", "2"))
	require.NoError(t, err)
	base, err := records.Evidence{}.Add(rec)
	require.NoError(t, err)
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask, cfg.World, cfg.Evidence = 6, evidenceCount{}, base
	plain, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks(), pool)
	require.NoError(t, err)
	cfg.WithHistory = true
	with, err := lm2lm.Evaluate(context.Background(), cfg, fixed{prop("wider", "2")}, oracle{}, oracle{}, tasks(), pool)
	require.NoError(t, err)
	longer := 0
	for i, st := range with.States {
		require.Equal(t, plain.States[i].State, st.State)
		for k, smp := range st.Samples {
			require.InDelta(t, 1, plain.States[i].Samples[k].Predicted, 1e-9, "Evidence alone")
			require.InDelta(t, float64(1+len(st.State.History)), smp.Predicted, 1e-9, "Evidence and the state's history")
			require.Equal(t, plain.States[i].Samples[k].Gain, smp.Gain, "the runs are the same")
		}
		if len(st.State.History) > 0 {
			longer++
		}
	}
	require.Greater(t, longer, len(with.States)/2, "most states have a history")
}

// Trainer.Cost counts fresh executions only: a second training over the
// same store measures the same calibration proposals and pays for none.
func TestTrainerCostCountsFreshRunsOnly(t *testing.T) {
	ex := &noisy{}
	pool := storePool(t, ex)
	cfg := smallConfig()
	cfg.Steps = 10
	train := func() *lm2lm.Trainer {
		pcfg := proposer.DefaultPolicyConfig()
		pol, err := proposer.NewPolicy(catalogue(), pcfg, nil)
		require.NoError(t, err)
		tr, err := lm2lm.New(cfg, lm2lm.Components{
			Policy: pol, World: predictions(map[string]float64{}), Builder: oracle{}, Executor: pool,
			Tasks: tasks(), Evidence: m0(t, "wider", "lr", "decay"),
		})
		require.NoError(t, err)
		_, err = tr.Run(context.Background(), nil)
		require.NoError(t, err)
		return tr
	}
	first := train()
	cost, runs := first.Cost()
	require.Equal(t, 4, runs, "one calibration of budget 4 by step 10")
	require.Equal(t, 4.0, cost.DeviceSeconds)
	require.Zero(t, first.Reused())
	second := train()
	cost, runs = second.Cost()
	require.Zero(t, runs)
	require.Zero(t, cost.DeviceSeconds)
	require.Equal(t, 4, second.Reused())
	require.EqualValues(t, 4, ex.runs.Load())
}

// someInvalid is a proposer whose first sample of every state cannot be
// parsed; the others come from the policy of a random stream.
type someInvalid struct{ p proposer.Proposer }

func (s someInvalid) Propose(ctx context.Context, st records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	out, err := s.p.Propose(ctx, st, n, rng)
	if len(out) > 0 {
		out[0] = proposer.Sample{Invalid: true}
	}
	return out, err
}

// jobLog records every job an executor is asked to run.
type jobLog struct {
	oracle
	mu   sync.Mutex
	jobs []string
}

func (l *jobLog) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	l.mu.Lock()
	l.jobs = append(l.jobs, fmt.Sprintf("%s %s %d", j.Task.ID, j.Proposal.Key(), j.Seed))
	l.mu.Unlock()
	return l.oracle.Execute(ctx, j)
}

// EvalRuns lists, without running, exactly the runs Evaluate then runs
// with the same arguments (a proposer that samples from the states'
// streams), and the invalid samples it skips.
func TestEvalRunsAreEvaluatesRuns(t *testing.T) {
	cat := []records.Card{{Mechanism: "wider", Description: "w", Params: []records.ParamSpec{{Name: "level", Kind: "enum", Choices: []string{"1", "2"}}}},
		{Mechanism: "lr", Description: "l", Params: []records.ParamSpec{{Name: "level", Kind: "enum", Choices: []string{"1", "2"}}}}}
	pol, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil)
	require.NoError(t, err)
	prop := someInvalid{pol}
	for _, seeds := range [][]uint64{nil, {1, 2, 3}} {
		cfg := lm2lm.DefaultEvalConfig()
		cfg.Seeds = seeds
		jobs, invalid, err := lm2lm.EvalRuns(context.Background(), cfg, prop, tasks(), nil)
		require.NoError(t, err)
		require.Equal(t, 3*4, invalid, "one per state: 3 tasks × 4 states")
		require.Len(t, jobs, 3*4*3)
		var want []string
		for _, j := range jobs {
			seed := uint64(7) // the oracle builder's
			if j.SetSeed {
				seed = j.Seed
			}
			want = append(want, fmt.Sprintf("%s %s %d", j.Change.Task.ID, j.Change.Proposal.Key(), seed))
		}
		ex := &jobLog{}
		rep, err := lm2lm.Evaluate(context.Background(), cfg, prop, oracle{}, ex, tasks(), nil)
		require.NoError(t, err)
		require.Equal(t, invalid, rep.Invalid)
		require.ElementsMatch(t, want, ex.jobs, "seeds %v", seeds)
	}
}
