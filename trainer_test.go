package lm2lm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// oracle is a synthetic research world with known true gains: each card's
// gain in σ_e units depends on its "level" parameter, and the "trap" card
// looks good to a world model with the wrong prior but really hurts.
type oracle struct{}

var truth = map[string]map[string]float64{
	"wider":  {"1": 1, "2": 3},
	"deeper": {"1": 0.5, "2": -1},
	"lr":     {"1": -2, "2": -4},
	"trap":   {"1": -5, "2": -6},
	"decay":  {"1": 0, "2": 0.5},
	"smooth": {"1": -1, "2": -0.5},
}

func catalogue() []records.Card {
	var cs []records.Card
	for _, m := range []string{"wider", "deeper", "lr", "trap", "decay", "smooth"} {
		cs = append(cs, records.Card{Mechanism: m, Description: m,
			Params: []records.ParamSpec{{Name: "level", Kind: "int", Choices: []string{"1", "2"}, Min: 1, Max: 2}}})
	}
	return cs
}

func (oracle) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	if err := ctx.Err(); err != nil {
		return builder.Job{}, err
	}
	if _, ok := truth[p.Mechanism][p.Params["level"]]; !ok {
		return builder.Job{}, fmt.Errorf("oracle: %s: %w", p.Key(), builder.ErrInfeasible)
	}
	return builder.Job{Task: t, Proposal: p, Seed: 7}, nil
}

func (oracle) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return builder.Outcome{}, fmt.Errorf("%w: %w", builder.ErrCancelled, err)
	}
	g := truth[j.Proposal.Mechanism][j.Proposal.Params["level"]] * j.Task.SeedNoise
	return builder.Outcome{Loss: j.Task.RefLoss - g, Gain: g, Seeds: []uint64{j.Seed},
		Cost: records.Cost{DeviceSeconds: 1, WallSeconds: 1}}, nil
}

func tasks() []records.Task {
	var ts []records.Task
	for i := 0; i < 3; i++ {
		ts = append(ts, records.Task{ID: fmt.Sprintf("t%d", i), Family: "f", Split: records.Train,
			Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.02, Budget: 100})
	}
	return ts
}

// m0 executes the given proposals on the first task for real.
func m0(t testing.TB, mechs ...string) records.Evidence {
	t.Helper()
	var rs []records.Record
	for _, m := range mechs {
		p := records.Proposal{Mechanism: m, Params: map[string]string{"level": "1"}}
		rec, _, err := lm2lm.RunReal(context.Background(), oracle{}, oracle{}, tasks()[0], p)
		require.NoError(t, err)
		rs = append(rs, rec)
	}
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	return ev
}

func smallConfig() lm2lm.Config {
	cfg := lm2lm.DefaultConfig()
	cfg.Steps = 32
	cfg.States = 24
	cfg.DAPO.Quota = 16
	cfg.Schedule = calibrate.Schedule{Steps: []int{8, 16}, Budgets: []int{4, 4}}
	return cfg
}

func newTrainer(t testing.TB, cfg lm2lm.Config, world rwm.WorldModel) (*lm2lm.Trainer, *proposer.Policy) {
	t.Helper()
	pcfg := proposer.DefaultPolicyConfig()
	pcfg.Adam.LR = 0.05
	pol, err := proposer.NewPolicy(catalogue(), pcfg, nil)
	require.NoError(t, err)
	tr, err := lm2lm.New(cfg, lm2lm.Components{
		Policy: pol, World: world, Builder: oracle{}, Executor: oracle{},
		Tasks: tasks(), Evidence: m0(t, "wider", "lr", "decay"),
	})
	require.NoError(t, err)
	return tr, pol
}

// expectedTruth is the policy's expected true gain (σ_e units) on a state
// with no history, from its card probabilities and uniform parameters.
func expectedTruth(pol *proposer.Policy) float64 {
	probs := pol.CardProbs(records.State{Task: tasks()[0]})
	var e float64
	for i, m := range pol.Mechanisms() {
		e += probs[i] * (truth[m]["1"] + truth[m]["2"]) / 2
	}
	return e
}

func TestTrainerCalibratesAndImproves(t *testing.T) {
	// METHOD.md §1 On-policy calibration: real executions = Σ B_u, and the
	// records join M; METHOD.md §1 Objective: J_train rises.
	cfg := smallConfig()
	// A world model with a wrong belief: "trap" predicted at +5σ (the
	// paper's over-predicted optimiser change), "wider" at +1σ.
	tr, pol := newTrainer(t, cfg, trapWorld(t))
	before := expectedTruth(pol)
	var cals []*lm2lm.CalibrationReport
	reps, err := tr.Run(context.Background(), func(r lm2lm.StepReport) {
		if r.Calibration != nil {
			cals = append(cals, r.Calibration)
		}
	})
	require.NoError(t, err)
	require.Len(t, reps, cfg.Steps)
	require.Len(t, cals, 2)
	require.Equal(t, 0, cals[0].Step%cfg.RolloutEvery)
	_, runs := tr.Cost()
	require.Equal(t, 8, runs, "Σ B_u real runs")
	require.Equal(t, 3+8, tr.Evidence().Len(), "M_0 plus the calibration records")
	for _, c := range cals {
		require.Equal(t, 4, c.Executed)
		require.Len(t, c.Records, 4)
	}
	// The first calibration executes what W rates highest: the trap.
	trapRuns := 0
	for _, r := range cals[0].Records {
		if r.Proposal.Mechanism == "trap" {
			trapRuns++
		}
	}
	require.Greater(t, trapRuns, 0, "top-rated calibration should execute the over-predicted trap")
	after := expectedTruth(pol)
	t.Logf("expected true gain: before %.3f after %.3f", before, after)
	require.Greater(t, after, before+0.5, "expected true gain before %.3f after %.3f", before, after)
}

// embeddedWithTrap is a world model whose prior over-predicts "trap".
func embeddedWithTrap() rwm.EmbeddedConfig {
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.Priors = map[string]records.Prior{"trap": {Mean: 5, Std: 1}, "wider": {Mean: 1, Std: 1}}
	cfg.Cards = catalogue()
	return cfg
}

// trapWorld is the embedded model of embeddedWithTrap.
func trapWorld(t testing.TB) *rwm.Embedded {
	t.Helper()
	m, err := rwm.NewEmbedded(embeddedWithTrap())
	require.NoError(t, err)
	return m
}

func TestTrainerStaticNeverExecutes(t *testing.T) {
	cfg := smallConfig()
	cfg.Steps = 16
	cfg.Calibration = lm2lm.Static
	tr, _ := newTrainer(t, cfg, trapWorld(t))
	_, err := tr.Run(context.Background(), nil)
	require.NoError(t, err)
	_, runs := tr.Cost()
	require.Zero(t, runs)
	require.Equal(t, 3, tr.Evidence().Len())
	// Synthetic state expansion grew the pool, but not the evidence.
	require.Greater(t, tr.Pool().Len(), 3)
	ev, err := tr.Pool().Evidence()
	require.NoError(t, err)
	require.Equal(t, 3, ev.Len())
}

func TestTrainerDeterministic(t *testing.T) {
	run := func() ([]float64, []string) {
		cfg := smallConfig()
		cfg.Steps = 16
		tr, _ := newTrainer(t, cfg, trapWorld(t))
		reps, err := tr.Run(context.Background(), nil)
		require.NoError(t, err)
		var loss []float64
		for _, r := range reps {
			loss = append(loss, r.Update.Loss)
		}
		var keys []string
		for i := 0; i < tr.Evidence().Len(); i++ {
			keys = append(keys, tr.Evidence().At(i).Proposal.Key())
		}
		return loss, keys
	}
	l1, k1 := run()
	l2, k2 := run()
	require.Equal(t, l1, l2)
	require.Equal(t, k1, k2)
}

func TestTrainerFlatWorldHasNoSignal(t *testing.T) {
	// METHOD.md §1 Policy optimisation: groups whose rewards are all equal
	// carry no signal. A world model that rejects every proposal gives every
	// one −c (METHOD.md §1 Reward 2), so every group is flat and the step
	// fails with ErrNoSignal instead of updating on nothing.
	cfg := smallConfig()
	pol := proposertest.FromProposals(records.Proposal{Mechanism: "wider", Params: map[string]string{"level": "1"}})
	w := &rwmtest.Fixed{Default: rwm.Prediction{Valid: false, Reason: "rejected"}}
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: w, Builder: oracle{}, Executor: oracle{}, Tasks: tasks()})
	require.NoError(t, err)
	_, err = tr.StepOnce(context.Background())
	require.ErrorIs(t, err, lm2lm.ErrNoSignal)
	require.Empty(t, pol.Updates())

	// A world that tells the changes apart gives signal and an update.
	w = &rwmtest.Fixed{Default: rwm.Prediction{Gain: 0.01, Valid: true}}
	pol = proposertest.FromProposals(
		records.Proposal{Mechanism: "wider", Params: map[string]string{"level": "1"}},
		records.Proposal{Mechanism: "lr", Params: map[string]string{"level": "1"}})
	w.ByKey = map[string]rwm.Prediction{pol.Script[1].Proposal.Key(): {Gain: -0.05, Valid: true}}
	tr, err = lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: w, Builder: oracle{}, Executor: oracle{}, Tasks: tasks()})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	require.Len(t, pol.Updates(), 1)
	require.NotNil(t, rep.Rollout)
	require.Equal(t, cfg.States, rep.Rollout.Groups)
}

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*lm2lm.Config){
		"steps":    func(c *lm2lm.Config) { c.Steps = 0 },
		"rollout":  func(c *lm2lm.Config) { c.RolloutEvery = 0 },
		"quota":    func(c *lm2lm.Config) { c.DAPO.Quota = c.States + 1 },
		"history":  func(c *lm2lm.Config) { c.MaxHistory = 9 },
		"schedule": func(c *lm2lm.Config) { c.Schedule.Steps = []int{12, 40, 64} },
		"parallel": func(c *lm2lm.Config) { c.Parallel = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := lm2lm.DefaultConfig()
			mut(&cfg)
			require.ErrorIs(t, cfg.Validate(), lm2lm.ErrConfig)
		})
	}
	require.NoError(t, lm2lm.DefaultConfig().Validate())
	_, err := lm2lm.New(lm2lm.DefaultConfig(), lm2lm.Components{})
	require.ErrorIs(t, err, lm2lm.ErrConfig)
}

func TestEvaluate(t *testing.T) {
	// METHOD.md §1 Data and evaluation: Avg@4, Best@4, negative rate,
	// fraction above 2σ_e, all from real runs. A scripted proposer that
	// always proposes wider/2 (+3σ) and lr/1 (−2σ) alternately by rng.
	pol := proposertest.FromProposals(
		records.Proposal{Mechanism: "wider", Params: map[string]string{"level": "2"}},
		records.Proposal{Mechanism: "lr", Params: map[string]string{"level": "1"}},
		records.Proposal{Mechanism: "nope", Params: map[string]string{"level": "1"}},
	)
	cfg := lm2lm.DefaultEvalConfig()
	cfg.StatesPerTask = 2
	rep, err := lm2lm.Evaluate(context.Background(), cfg, pol, oracle{}, oracle{}, tasks(), nil)
	require.NoError(t, err)
	require.Len(t, rep.States, 6)
	var n, neg, above, infeasible int
	var sumAvg, sumBest, sumFeas float64
	var states, feasStates int
	for _, s := range rep.States {
		require.Len(t, s.Records, 4)
		require.Len(t, s.Samples, 4)
		var sum, best, feas float64
		k, nf := 0, 0
		for _, r := range s.Records {
			n++
			// An infeasible run counts −c σ_e = −6 in Avg@K and Best@K.
			g := -6.0
			if r.Infeasible != "" {
				infeasible++
				neg++
			} else {
				g = r.Gain / r.Task.SeedNoise
				feas += g
				nf++
				if g <= 0 {
					neg++
				}
				if g > 2 {
					above++
				}
			}
			if k == 0 || g > best {
				best = g
			}
			sum += g
			k++
		}
		states++
		sumAvg += sum / float64(k)
		sumBest += best
		require.InDelta(t, sum/float64(k), s.Avg, 1e-9)
		require.InDelta(t, best, s.Best, 1e-9)
		if nf > 0 {
			feasStates++
			sumFeas += feas / float64(nf)
			require.InDelta(t, feas/float64(nf), s.AvgFeasible, 1e-9)
		} else {
			require.True(t, math.IsNaN(s.AvgFeasible))
		}
	}
	require.InDelta(t, sumAvg/float64(states), rep.AvgK, 1e-9)
	require.InDelta(t, sumBest/float64(states), rep.BestK, 1e-9)
	require.InDelta(t, sumFeas/float64(feasStates), rep.AvgKFeasible, 1e-9)
	require.InDelta(t, float64(neg)/float64(n), rep.NegativeRate, 1e-12)
	require.InDelta(t, float64(above)/float64(n), rep.Above2Sigma, 1e-12)
	require.InDelta(t, float64(infeasible)/float64(n), rep.InfeasibleRate, 1e-12)
	require.Greater(t, infeasible, 0)
	require.Equal(t, n-infeasible, rep.Runs, "infeasible builds never reach the executor")
	// Same seed, same states: a policy against itself wins half.
	require.InDelta(t, 0.5, lm2lm.WinRate(rep, rep), 1e-12)
}

func TestEvaluateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pol := proposertest.FromProposals(records.Proposal{Mechanism: "wider", Params: map[string]string{"level": "2"}})
	_, err := lm2lm.Evaluate(ctx, lm2lm.DefaultEvalConfig(), pol, oracle{}, oracle{}, tasks(), nil)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
}

func TestCheckpointResume(t *testing.T) {
	// Stopping after any step and resuming from a checkpoint continues
	// exactly as an uninterrupted run.
	cfg := smallConfig()
	cfg.Steps = 20
	straight, _ := newTrainer(t, cfg, trapWorld(t))
	want, err := straight.Run(context.Background(), nil)
	require.NoError(t, err)

	for _, stopAt := range []int{5, 8, 13} {
		first, _ := newTrainer(t, cfg, trapWorld(t))
		var got []lm2lm.StepReport
		for first.Step() < stopAt {
			r, err := first.StepOnce(context.Background())
			require.NoError(t, err)
			got = append(got, r)
		}
		cp, err := first.MarshalBinary()
		require.NoError(t, err)

		resumed, _ := newTrainer(t, cfg, trapWorld(t))
		require.NoError(t, resumed.UnmarshalBinary(cp))
		require.Equal(t, stopAt, resumed.Step())
		rest, err := resumed.Run(context.Background(), nil)
		require.NoError(t, err)
		got = append(got, rest...)
		require.Len(t, got, len(want))
		for i := range want {
			require.Equal(t, want[i].Update.Loss, got[i].Update.Loss, "stop at %d, step %d", stopAt, i+1)
		}
		require.Equal(t, straight.Evidence().Fingerprint(), resumed.Evidence().Fingerprint())
		c1, r1 := straight.Cost()
		c2, r2 := resumed.Cost()
		require.Equal(t, c1, c2)
		require.Equal(t, r1, r2)
	}

	other := cfg
	other.Seed = 99
	tr, _ := newTrainer(t, other, trapWorld(t))
	cp, err := straight.MarshalBinary()
	require.NoError(t, err)
	require.ErrorIs(t, tr.UnmarshalBinary(cp), lm2lm.ErrCheckpoint)
	require.ErrorIs(t, tr.UnmarshalBinary([]byte("{")), lm2lm.ErrCheckpoint)
}

func wmrlConfig() *lm2lm.WMRLConfig {
	w := lm2lm.DefaultWMRLConfig()
	w.AnchorFraction = 0.25
	w.MinPairs, w.RefitEvery, w.Capacity = 16, 8, 500
	w.HalfLife, w.Warmup = 4, 2
	return &w
}

func TestTrainerWMRL(t *testing.T) {
	// METHOD.md §2: anchor groups (here 25% of the kept groups) are executed
	// for real and trained on real rewards; the isotonic map fitted on their
	// pairs debiases the world model; anchor advantages are up-weighted.
	// The world model over-predicts "trap" and calibration is Static, so
	// only WMRL's corrections can stop the policy chasing it.
	train := func(w *lm2lm.WMRLConfig) (float64, []lm2lm.StepReport, int) {
		cfg := smallConfig()
		cfg.Calibration = lm2lm.Static
		cfg.WMRL = w
		tr, pol := newTrainer(t, cfg, trapWorld(t))
		reps, err := tr.Run(context.Background(), nil)
		require.NoError(t, err)
		_, runs := tr.Cost()
		require.Equal(t, 3, tr.Evidence().Len(), "WMRL's anchors never enter the world model's context")
		return expectedTruth(pol), reps, runs
	}
	static, _, runs := train(nil)
	require.Zero(t, runs)
	withWMRL, reps, runs := train(wmrlConfig())
	t.Logf("expected true gain after training: static %.3f, static + WMRL %.3f (%d real runs)", static, withWMRL, runs)
	var anchors, fitted int
	for _, r := range reps {
		if r.Rollout == nil {
			continue
		}
		a := r.Rollout.Anchors
		require.NotNil(t, a)
		require.Equal(t, calibrate.AnchorCount(r.Rollout.Kept, 0.25, 1, 0), a.Groups)
		require.GreaterOrEqual(t, a.Weight, 1.0)
		require.LessOrEqual(t, a.Weight, 4.0)
		anchors += a.Runs
		if a.Fitted {
			fitted++
		}
	}
	require.Equal(t, anchors, runs)
	require.Greater(t, fitted, 0, "the debiaser should fit once it has 16 pairs")
	require.Greater(t, withWMRL, static+0.5)

	cfg := smallConfig()
	cfg.WMRL = wmrlConfig()
	cfg.WMRL.AnchorFraction = 2
	require.ErrorIs(t, cfg.Validate(), lm2lm.ErrConfig)
}

// cycle is a deterministic proposer: its k-th Propose call returns (up to
// n of) the proposals of groups[k mod len(groups)] in order, so a test fixes
// each group's composition. It records the batches it is updated on.
type cycle struct {
	groups [][]records.Proposal

	mu      sync.Mutex
	calls   int
	updates [][]proposer.Item
}

func (c *cycle) Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	g := c.groups[c.calls%len(c.groups)]
	c.calls++
	c.mu.Unlock()
	var out []proposer.Sample
	for i := 0; i < n && i < len(g); i++ {
		out = append(out, proposer.Sample{Proposal: g[i], Tokens: []string{g[i].Key()}, LogProbs: []float64{-1}, Temperature: 1})
	}
	return out, nil
}

func (c *cycle) Update(ctx context.Context, batch []proposer.Item) (proposer.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, append([]proposer.Item(nil), batch...))
	return proposer.Stats{Tokens: len(batch)}, nil
}

func (c *cycle) Supervise(context.Context, []proposer.Item) (proposer.Stats, error) {
	return proposer.Stats{}, nil
}

func prop(mech, level string) records.Proposal {
	return records.Proposal{Mechanism: mech, Params: map[string]string{"level": level}}
}

// oneStepConfig is one rollout of `states` groups of g proposals feeding one
// update, calibrating at step 0 with the given budget (0 = Static).
func oneStepConfig(states, g, budget int) lm2lm.Config {
	cfg := lm2lm.DefaultConfig()
	cfg.Steps, cfg.RolloutEvery, cfg.States = 1, 1, states
	cfg.DAPO.GroupSize, cfg.DAPO.Quota = g, states
	cfg.Calibration = lm2lm.Static
	if budget > 0 {
		cfg.Calibration = lm2lm.TopRated
		cfg.Schedule = calibrate.Schedule{Steps: []int{0}, Budgets: []int{budget}}
	}
	return cfg
}

// predictions returns a fixed world model predicting gains (in σ_e units of
// tasks()) by proposal; unnamed proposals are predicted at 0.
func predictions(sigmas map[string]float64) *rwmtest.Fixed {
	w := &rwmtest.Fixed{Default: rwm.Prediction{Gain: 0, Valid: true}, ByKey: map[string]rwm.Prediction{}}
	for k, s := range sigmas {
		w.ByKey[k] = rwm.Prediction{Gain: s * tasks()[0].SeedNoise, Valid: true}
	}
	return w
}

func TestNoChangeEarnsNoOpReward(t *testing.T) {
	// METHOD.md §1 Reward 2: a proposal that changes nothing earns −3, even
	// though a world model (the embedded one does) answers Valid = false
	// for it. Group [wider/1 at +1σ, no change], τ_e = σ_e:
	// r = [1, −3], σ_G = 2, the bonus of wider is 0.3·2·1 = 0.6, so
	// R = [1.6, −3], mean −0.7, advantages ±2.3.
	nc := records.Proposal{Mechanism: records.NoChange}
	w := predictions(map[string]float64{prop("wider", "1").Key(): 1})
	w.ByKey[nc.Key()] = rwm.Prediction{Valid: false, Reason: "no change"}
	pol := &cycle{groups: [][]records.Proposal{{prop("wider", "1"), nc}}}
	tr, err := lm2lm.New(oneStepConfig(1, 2, 0), lm2lm.Components{Policy: pol, World: w, Tasks: tasks()[:1]})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, rep.Rollout.Invalid)
	require.InDelta(t, -0.7, rep.Rollout.MeanReward, 1e-12)
	require.InDelta(t, 2.3, pol.updates[0][0].Advantage, 1e-12)
	require.InDelta(t, -2.3, pol.updates[0][1].Advantage, 1e-12)
	require.Equal(t, int64(1), w.Calls(), "the no-change proposal is not sent to the world model")
}

func TestCalibrationRatesByNormalisedReward(t *testing.T) {
	// METHOD.md §1 On-policy calibration picks argmax Σ r(s, a; M_u): the
	// normalised reward of (s, a), not the group-dependent diversity bonus.
	// Group A: m1/1 at +2σ and three m1 at 0 (σ_G 0.866, d̃ 1: R = 2.26).
	// Group B: m2/1 at +1.9σ and three m3 at 0 (σ_G 0.823, d̃ 2: R = 2.39).
	// τ_e = σ_e (the MAD of the predictions is 0). With B = 1 the +2σ change
	// of group A is the top-rated one.
	w := predictions(map[string]float64{prop("m1", "1").Key(): 2, prop("m2", "1").Key(): 1.9})
	pol := &cycle{groups: [][]records.Proposal{
		{prop("m1", "1"), prop("m1", "2"), prop("m1", "3"), prop("m1", "4")},
		{prop("m2", "1"), prop("m3", "1"), prop("m3", "2"), prop("m3", "3")},
	}}
	tr, err := lm2lm.New(oneStepConfig(2, 4, 1), lm2lm.Components{Policy: pol, World: w,
		Builder: oracle{}, Executor: oracle{}, Tasks: tasks()[:1]})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	require.NotNil(t, rep.Calibration)
	require.Len(t, rep.Calibration.Records, 1)
	require.Equal(t, prop("m1", "1").Key(), rep.Calibration.Records[0].Proposal.Key())
	require.Equal(t, [][]float64{{2}}, rep.Calibration.Predicted)
}

func TestCalibrationSkipsKnownChanges(t *testing.T) {
	// DuplicateRuns false: a change already measured on its task (in M) is
	// not run again; with an idempotent executor the second run would be
	// the same record again, spending a calibration run on nothing new.
	group := [][]records.Proposal{{prop("wider", "1"), prop("deeper", "1"), prop("lr", "1"), prop("decay", "1")}}
	w := predictions(map[string]float64{prop("wider", "1").Key(): 3, prop("deeper", "1").Key(): 1})
	for _, dup := range []bool{false, true} {
		cfg := oneStepConfig(1, 4, 1)
		cfg.DuplicateRuns = dup
		tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: &cycle{groups: group}, World: w,
			Builder: oracle{}, Executor: oracle{}, Tasks: tasks()[:1], Evidence: m0(t, "wider")})
		require.NoError(t, err)
		rep, err := tr.StepOnce(context.Background())
		require.NoError(t, err)
		require.Len(t, rep.Calibration.Records, 1)
		want := "deeper"
		if dup {
			want = "wider"
		}
		require.Equal(t, want, rep.Calibration.Records[0].Proposal.Mechanism, "DuplicateRuns %v", dup)
		require.Equal(t, 2, tr.Evidence().Len())
	}
}

// failAfter is a world model that fails once on the first query whose
// context holds more than n records (a transient outage after calibration).
type failAfter struct {
	rwm.WorldModel
	n      int
	failed atomic.Bool
}

func (f *failAfter) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if q.Evidence.Len() > f.n && f.failed.CompareAndSwap(false, true) {
		return rwm.Prediction{}, errors.New("outage")
	}
	return f.WorldModel.Predict(ctx, q)
}

func TestCalibrationRunsOncePerPoint(t *testing.T) {
	// A step that fails after its calibration (here the re-scoring under
	// M_{u+1}) and is retried, directly or from a checkpoint, must not
	// execute and pay for the calibration again: real runs = Σ B_u.
	cfg := smallConfig()
	cfg.Steps = 8
	cfg.Schedule = calibrate.Schedule{Steps: []int{0}, Budgets: []int{2}}
	for _, resume := range []bool{false, true} {
		tr, _ := newTrainer(t, cfg, &failAfter{WorldModel: trapWorld(t), n: 3})
		_, err := tr.StepOnce(context.Background())
		require.ErrorContains(t, err, "outage")
		if resume {
			cp, err := tr.MarshalBinary()
			require.NoError(t, err)
			tr, _ = newTrainer(t, cfg, trapWorld(t))
			require.NoError(t, tr.UnmarshalBinary(cp))
		}
		rep, err := tr.StepOnce(context.Background())
		require.NoError(t, err)
		if resume {
			require.Nil(t, rep.Calibration, "a checkpoint drops the pending report")
		} else {
			require.NotNil(t, rep.Calibration, "the completing step reports the calibration")
			require.Equal(t, 2, rep.Calibration.Executed)
		}
		_, runs := tr.Cost()
		require.Equal(t, 2, runs, "resume %v", resume)
		require.Equal(t, 3+2, tr.Evidence().Len())
	}
}

func TestAnchorsRunEachChangeOnce(t *testing.T) {
	// METHOD.md §2 anchor groups: each distinct (task, change) is executed
	// once per rollout; a within-group duplicate earns min − δ whatever it
	// measures (METHOD.md §1 Reward 3), and a repeat of one job measures
	// nothing new. Two anchor groups of [wider/1, wider/1, lr/1, lr/1] on
	// one task need 2 runs, not 8.
	w := predictions(map[string]float64{prop("wider", "1").Key(): 1, prop("lr", "1").Key(): -1})
	cfg := oneStepConfig(2, 4, 0)
	wc := lm2lm.DefaultWMRLConfig()
	wc.AnchorFraction = 1
	cfg.WMRL = &wc
	pol := &cycle{groups: [][]records.Proposal{{prop("wider", "1"), prop("wider", "1"), prop("lr", "1"), prop("lr", "1")}}}
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: w, Builder: oracle{}, Executor: oracle{}, Tasks: tasks()[:1]})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	_, runs := tr.Cost()
	require.Equal(t, 2, runs)
	require.Equal(t, 2, rep.Rollout.Anchors.Groups)
	require.Equal(t, 2, rep.Rollout.Anchors.Runs)
	require.Equal(t, 2, rep.Rollout.Anchors.Pairs)
	// Real rewards on τ_e = 1.4826·σ_e (the MAD of the predictions ±1σ is
	// σ_e): wider +1σ, lr −2σ, duplicates min − δ. wider and lr get the same
	// bonus (each mechanism appears twice, d̃ = 1), so wider's advantage
	// exceeds lr's by 3/1.4826 (METHOD.md §1 Reward 1, 4).
	adv := pol.updates[0]
	require.Len(t, adv, 8)
	require.InDelta(t, 3/reward.MADScale, adv[0].Advantage-adv[2].Advantage, 1e-9)
}

// flaky executes like oracle but fails "crash" with a failure of unknown
// cause and reports a NaN gain for "nan".
type flaky struct{ oracle }

func (flaky) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	return builder.Job{Task: t, Proposal: p, Seed: 7}, nil
}

func (f flaky) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	switch j.Proposal.Mechanism {
	case "crash":
		return builder.Outcome{Cost: records.Cost{DeviceSeconds: 2}}, fmt.Errorf("script crashed: %w", builder.ErrFailed)
	case "nan":
		return builder.Outcome{Gain: math.NaN(), Loss: math.NaN()}, nil
	}
	return f.oracle.Execute(ctx, j)
}

func TestUnmeasuredRunsAreReported(t *testing.T) {
	// A run that fails through no fault of the proposal, or whose outcome
	// is not a valid record, is not measured: calibration keeps the other
	// records and says which failed and why; so does Evaluate.
	group := []records.Proposal{prop("wider", "1"), prop("crash", "1"), prop("nan", "1"), prop("lr", "1")}
	w := predictions(map[string]float64{prop("wider", "1").Key(): 1, prop("lr", "1").Key(): -1})
	tr, err := lm2lm.New(oneStepConfig(1, 4, 4), lm2lm.Components{Policy: &cycle{groups: [][]records.Proposal{group}},
		World: w, Builder: flaky{}, Executor: flaky{}, Tasks: tasks()[:1]})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	c := rep.Calibration
	require.Equal(t, 2, c.Executed)
	require.Len(t, c.Failures, 2)
	require.Contains(t, c.Failures[0]+c.Failures[1], "script crashed")
	require.Contains(t, c.Failures[0]+c.Failures[1], "not finite")
	cost, runs := tr.Cost()
	require.Equal(t, 4, runs)
	require.InDelta(t, 1+1+2, cost.DeviceSeconds, 1e-12, "the crashed run's reported cost counts")

	ev, err := lm2lm.Evaluate(context.Background(), lm2lm.DefaultEvalConfig(), &cycle{groups: [][]records.Proposal{group}},
		flaky{}, flaky{}, tasks()[:1], nil)
	require.NoError(t, err)
	require.Len(t, ev.Failures, 2*4)
	require.Equal(t, 4*4, ev.Runs)
	require.InDelta(t, 0.5, ev.NegativeRate, 1e-12)
}

func TestShortGroups(t *testing.T) {
	// A proposer may return fewer than G samples; mini-batches are still
	// whole groups (and a rollout with fewer items than G does not fail).
	pol := &cycle{groups: [][]records.Proposal{{prop("wider", "1"), prop("lr", "1"), prop("decay", "1")}}}
	w := predictions(map[string]float64{prop("wider", "1").Key(): 1, prop("lr", "1").Key(): -1})
	cfg := oneStepConfig(2, 8, 0)
	cfg.Steps, cfg.RolloutEvery = 8, 8
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: w, Tasks: tasks()[:1]})
	require.NoError(t, err)
	_, err = tr.Run(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, pol.updates, 8)
	for _, b := range pol.updates {
		require.Len(t, b, 3)
	}
}

func TestNonFinitePredictionIsInvalid(t *testing.T) {
	// A prediction marked valid with a NaN gain is a bad prediction: the
	// proposal scores −c (METHOD.md §1 Reward 2) and training goes on.
	w := predictions(map[string]float64{prop("lr", "1").Key(): -1})
	w.ByKey[prop("wider", "1").Key()] = rwm.Prediction{Gain: math.NaN(), Valid: true}
	pol := &cycle{groups: [][]records.Proposal{{prop("wider", "1"), prop("lr", "1")}}}
	tr, err := lm2lm.New(oneStepConfig(1, 2, 0), lm2lm.Components{Policy: pol, World: w, Tasks: tasks()[:1]})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rollout.Invalid)
	require.Equal(t, 1, tr.Pool().Len(), "only lr/1 joins the pool as a synthetic record")
}

func TestWinRateSkipsMismatchedStates(t *testing.T) {
	st := func(id string, avg float64) lm2lm.StateEval {
		return lm2lm.StateEval{State: records.State{Task: records.Task{ID: id}}, Avg: avg}
	}
	a := lm2lm.EvalReport{States: []lm2lm.StateEval{st("t0", 1), st("t1", 1)}}
	b := lm2lm.EvalReport{States: []lm2lm.StateEval{st("t0", 0), st("t2", 2)}}
	require.Equal(t, 1.0, lm2lm.WinRate(a, b))
}

func TestWMRLWithoutDebias(t *testing.T) {
	// With Debias off the debiaser's parameters are not validated, so they
	// must not be used either (a negative Bins would panic).
	wc := lm2lm.DefaultWMRLConfig()
	wc.Debias, wc.Bins, wc.MinPairs = false, -1, 0
	require.NoError(t, wc.Validate())
	cfg := oneStepConfig(1, 2, 0)
	cfg.WMRL = &wc
	w := predictions(map[string]float64{prop("wider", "1").Key(): 1})
	pol := &cycle{groups: [][]records.Proposal{{prop("wider", "1"), prop("lr", "1")}}}
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: w, Builder: oracle{}, Executor: oracle{}, Tasks: tasks()[:1]})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	require.False(t, rep.Rollout.Anchors.Fitted)
	require.Zero(t, rep.Rollout.Anchors.Pairs)
	require.Equal(t, 2, rep.Rollout.Anchors.Runs)
}

func TestFailedUpdateKeepsItsBatch(t *testing.T) {
	// A failed policy update is not counted and its mini-batch is not lost:
	// retrying the step updates on the same batch, so the run goes on as if
	// nothing had failed.
	props := []records.Proposal{
		{Mechanism: "wider", Params: map[string]string{"level": "2"}},
		{Mechanism: "lr", Params: map[string]string{"level": "1"}},
		{Mechanism: "decay", Params: map[string]string{"level": "2"}},
	}
	run := func(failAt int) [][]proposer.Item {
		cfg := smallConfig()
		cfg.Steps = 12
		cfg.Calibration = lm2lm.Static
		pol := proposertest.FromProposals(props...)
		tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: trapWorld(t), Tasks: tasks()})
		require.NoError(t, err)
		for tr.Step() < cfg.Steps {
			if tr.Step() == failAt {
				pol.Err = errors.New("device lost")
				_, err := tr.StepOnce(context.Background())
				require.Error(t, err)
				pol.Err = nil
				failAt = -1
				continue
			}
			_, err := tr.StepOnce(context.Background())
			require.NoError(t, err)
		}
		return pol.Updates()
	}
	want := run(-1)
	got := run(5)
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, want[i], got[i], "update %d", i+1)
	}
}

func TestShareCountsUnparseableSamples(t *testing.T) {
	// METHOD.md §1 On-policy calibration (case study): each mechanism
	// direction's share of the sampled proposals; samples that could not be
	// parsed are counted under lm2lm.Unparseable, not under "".
	cfg := smallConfig()
	cfg.Calibration = lm2lm.Static
	pol := proposertest.NewScripted(
		proposer.Sample{Proposal: records.Proposal{Mechanism: "wider", Params: map[string]string{"level": "2"}}},
		proposer.Sample{Invalid: true, Reason: "no JSON object"},
	)
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: trapWorld(t), Tasks: tasks()})
	require.NoError(t, err)
	rep, err := tr.StepOnce(context.Background())
	require.NoError(t, err)
	var total float64
	names := map[string]bool{}
	for _, sh := range rep.Rollout.Share {
		names[sh.Mechanism] = true
		total += sh.Fraction
	}
	require.InDelta(t, 1, total, 1e-12)
	require.True(t, names[lm2lm.Unparseable])
	require.True(t, names["wider"])
	require.False(t, names[""])
	require.Positive(t, rep.Rollout.Invalid)
}

func TestCheckpointResumeBitIdentical(t *testing.T) {
	// Stopping after several steps (mid-rollout, at a rollout boundary just
	// before a calibration, after it) and resuming from a checkpoint gives
	// the same step reports, the same final policy and the same final
	// trainer state byte for byte, with LM2LM's calibration alone and with
	// WMRL's anchors, debiaser and weighter on as well (METHOD.md §2).
	ctx := context.Background()
	for _, withWMRL := range []bool{false, true} {
		cfg := smallConfig()
		cfg.Steps = 20
		if withWMRL {
			cfg.WMRL = wmrlConfig()
		}
		straight, pol := newTrainer(t, cfg, trapWorld(t))
		want, err := straight.Run(ctx, nil)
		require.NoError(t, err)
		wantPol, err := pol.MarshalBinary()
		require.NoError(t, err)
		wantState, err := straight.MarshalBinary()
		require.NoError(t, err)
		for _, stopAt := range []int{3, 8, 13} {
			first, _ := newTrainer(t, cfg, trapWorld(t))
			var got []lm2lm.StepReport
			for first.Step() < stopAt {
				r, err := first.StepOnce(ctx)
				require.NoError(t, err)
				got = append(got, r)
			}
			cp, err := first.MarshalBinary()
			require.NoError(t, err)
			resumed, rpol := newTrainer(t, cfg, trapWorld(t))
			require.NoError(t, resumed.UnmarshalBinary(cp))
			rest, err := resumed.Run(ctx, nil)
			require.NoError(t, err)
			got = append(got, rest...)
			if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
				t.Fatalf("WMRL %v, stop at %d: reports differ (-straight +resumed):\n%s", withWMRL, stopAt, diff)
			}
			gotPol, err := rpol.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, wantPol, gotPol, "WMRL %v, stop at %d: final policy", withWMRL, stopAt)
			gotState, err := resumed.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, string(wantState), string(gotState), "WMRL %v, stop at %d: final trainer state", withWMRL, stopAt)
		}
		if withWMRL {
			var anchors int
			for _, r := range want {
				if r.Rollout != nil && r.Rollout.Anchors != nil && r.Rollout.Anchors.Fitted {
					anchors++
				}
			}
			require.Positive(t, anchors, "the debiaser fits within the run, so its state matters")
		}
	}
}

func TestCheckpointWMRLMismatch(t *testing.T) {
	// A checkpoint with WMRL state does not restore into a trainer with WMRL
	// off, nor the other way round.
	ctx := context.Background()
	cfg := smallConfig()
	cfg.Steps = 4
	off, _ := newTrainer(t, cfg, trapWorld(t))
	_, err := off.Run(ctx, nil)
	require.NoError(t, err)
	cfg.WMRL = wmrlConfig()
	on, _ := newTrainer(t, cfg, trapWorld(t))
	_, err = on.Run(ctx, nil)
	require.NoError(t, err)
	cpOff, err := off.MarshalBinary()
	require.NoError(t, err)
	cpOn, err := on.MarshalBinary()
	require.NoError(t, err)
	fresh, _ := newTrainer(t, cfg, trapWorld(t))
	require.ErrorIs(t, fresh.UnmarshalBinary(cpOff), lm2lm.ErrCheckpoint)
	require.Zero(t, fresh.Step(), "a refused checkpoint leaves the trainer unchanged")
	cfg.WMRL = nil
	fresh, _ = newTrainer(t, cfg, trapWorld(t))
	require.ErrorIs(t, fresh.UnmarshalBinary(cpOn), lm2lm.ErrCheckpoint)
}
