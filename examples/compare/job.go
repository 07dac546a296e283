package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/internal/labsetup"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// infeasibleGain is the gain, in σ_e units, an infeasible evaluation run
// counts as: −c, the reward rule's clip (METHOD.md §1 Reward 2); library
// choice: a run that cost a slot and improved nothing scores the worst
// normalised outcome instead of dropping out of Avg@4.
var infeasibleGain = -reward.DefaultConfig().Clip

// job is one (method, seed) to run.
type job struct {
	method string
	seed   uint64
}

func (j job) String() string { return fmt.Sprintf("%s seed %d", j.method, j.seed) }

// expectedRuns is the number of real runs a job is expected to make (the
// progress bar's total; WMRL's anchor runs add to it as they come).
func expectedRuns(o options, m method, tests int) int {
	p, _ := o.prof() // validated
	n := tests * p.evalStates * lm2lm.DefaultEvalConfig().K
	if m.kind != "none" {
		n += p.m0
	}
	if m.extra {
		for _, b := range p.schedule.Budgets {
			n += b
		}
	}
	if m.kind == "rl" && m.calibration != lm2lm.Static {
		for _, b := range p.schedule.Budgets {
			n += b
		}
	}
	if m.kind == "rl" {
		n += o.probe * probeGroup * (len(p.schedule.Steps) + 1)
	}
	return n
}

// newPolicy is the untrained policy of a job with the given seed. With
// -policy-hidden the hidden layer's initial weights come from the seed
// alone, so every method of a seed starts from the same policy. With
// -policy-descriptor-inputs its hidden layer reads every descriptor that
// varies over the training tasks train, standardised over them
// (proposer.StandardisedInputs); with -policy-descriptor-linear every head
// reads the same inputs linearly (proposer.PolicyConfig.DescriptorLinear).
func newPolicy(o options, seed uint64, train []records.Task) (*proposer.Policy, error) {
	pcfg := proposer.DefaultPolicyConfig()
	if o.policyLR > 0 {
		pcfg.Adam.LR = o.policyLR
	}
	if o.trainTemp > 0 {
		pcfg.Temperature = o.trainTemp
	}
	pcfg.DescriptionBuckets = o.descBuckets
	pcfg.DescriptorBuckets = o.descriptorBuckets
	pcfg.DescriptorSpread = o.descriptorSpread
	pcfg.HistoryProposalBuckets = o.histProposalBuckets
	pcfg.Hidden, pcfg.HiddenInitStd = o.policyHidden, o.policyHiddenStd
	if o.descriptorInputs || o.descriptorLinear {
		pcfg.DescriptorInputs = proposer.StandardisedInputs(train)
	}
	pcfg.DescriptorLinear = o.descriptorLinear
	var rng *rand.Rand
	if o.policyHidden > 0 {
		rng = labsetup.HiddenSource(seed)
	}
	pol, err := proposer.NewPolicy(lab.Catalogue(), pcfg, rng)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return pol, nil
}

// runJob trains the job's policy and evaluates it on the test tasks with
// real runs.
func runJob(ctx context.Context, e *env, o options, j job, rep *progress.Reporter) (Result, error) {
	start := time.Now()
	m := methods[j.method]
	prof, err := o.prof()
	if err != nil {
		return Result{}, err
	}
	res := Result{Version: resultVersion, Method: j.method, Seed: j.seed, Profile: o.profile, Suite: o.suite,
		Tasks: tasksDigest(o.suite), LeftOut: e.leftOut}
	cnt := &counter{next: progress.Executor(e.pool, rep)}
	var m0 records.Evidence
	if m.kind != "none" { // the untrained policy needs no records
		var err error
		if m0, err = initialRecords(ctx, e.lab, cnt, e.train, prof.m0, j.seed, o.parallel); err != nil {
			return res, fmt.Errorf("%s: M_0: %w", j, err)
		}
	}
	if m.extra {
		extra := 0
		for _, b := range prof.schedule.Budgets {
			extra += b
		}
		rng := rand.New(rand.NewPCG(j.seed, 0x6d3027))
		var err error
		if m0, _, err = baseline.StaticPlusRandom(ctx, rng, m0, e.train, lab.Catalogue(), extra, e.lab, cnt, o.parallel); err != nil {
			return res, fmt.Errorf("%s: M'_0: %w", j, err)
		}
	}
	res.M0 = m0.Len()
	res.Runs.M0 = cnt.take()
	pol, err := newPolicy(o, j.seed, e.train)
	if err != nil {
		return res, err
	}
	var prop proposer.Proposer = pol
	if o.top() {
		prop = proposer.Greedy{Policy: pol}
	}
	var world rwm.WorldModel
	var final records.Evidence
	switch m.kind {
	case "sft", "rft":
		err = supervise(ctx, m.kind, prof.steps, pol, m0, &res)
	case "rl":
		if world, final, err = train(ctx, e, cnt, o, m, j.seed, pol, m0, &res); err == nil && m.rerank {
			prop, err = baseline.NewRerank(rerankConfig(o), pol, world, final)
		}
	case "bestknown":
		prop, err = baseline.NewBestKnown(baseline.DefaultBestKnownConfig(), m0)
	case "rerank":
		var w rwm.WorldModel
		if w, err = newWorld(o, e.lab); err == nil {
			prop, err = baseline.NewRerank(rerankConfig(o), pol, w, m0)
		}
	}
	if err != nil {
		return res, fmt.Errorf("%s: training: %w", j, err)
	}
	res.Runs.Training = cnt.take()
	if err := pol.SetTemperature(o.temperature()); err != nil {
		return res, err
	}
	hist, err := histories(ctx, e, cnt, o.history, o.parallel)
	if err != nil {
		return res, fmt.Errorf("%s: histories of the test states: %w", j, err)
	}
	res.Runs.History = cnt.take()
	ecfg := lm2lm.DefaultEvalConfig()
	ecfg.StatesPerTask, ecfg.Parallel, ecfg.Seed, ecfg.Seeds = prof.evalStates, o.parallel, j.seed, e.refSeeds
	ecfg.Clip = -infeasibleGain
	if predicts(o, m) && world != nil {
		// The trained world model's judgement of the proposals it was
		// trained for, on tasks it has not seen (predictions only); with
		// -eval-predict-history it also reads each state's history, its
		// hyperparameters pinned on the final evidence when it tunes them
		// (rwm.Pinner), as the held-out-task rewards are.
		ecfg.World, ecfg.Evidence, ecfg.WithHistory = world, final, o.predictHistory
		if p, ok := world.(rwm.Pinner); ok && o.predictHistory {
			if ecfg.World, err = p.Pin(ctx, final); err != nil {
				return res, fmt.Errorf("%s: pin the world model for the evaluation: %w", j, err)
			}
		}
	}
	ev, err := lm2lm.Evaluate(ctx, ecfg, prop, e.lab, cnt, e.test, hist)
	if err != nil {
		return res, fmt.Errorf("%s: evaluation: %w", j, err)
	}
	res.Runs.Evaluation = cnt.take()
	res.States, res.Unmeasured = cells(ev)
	res.WallSeconds = math.Round(time.Since(start).Seconds()*10) / 10
	return res, nil
}

// predicts reports whether method m's evaluation carries its world
// model's predictions (-eval-predict, -eval-predict-history): every
// trained method but the real-gains diagnostic, whose "world model" is
// the lab itself, so its predictions would be real runs.
func predicts(o options, m method) bool {
	return (o.predict || o.predictHistory) && m.kind == "rl" && !m.realGains
}

// rerankConfig is the rerank methods' configuration: the defaults, with
// the test state's history as evidence under -rerank-history.
func rerankConfig(o options) baseline.RerankConfig {
	c := baseline.DefaultRerankConfig()
	c.History = o.rerankHistory
	return c
}

// cells turns an evaluation into per-state gains in σ_e units, an
// infeasible run counting infeasibleGain (lm2lm.SampleEval.Gain). States are named "<task>#<i>",
// the i-th state of the task, so every method of one seed names the same
// states alike. It also returns the count of proposals that produced no
// record (build or run failures that were not the proposal's fault) and
// the states left with no gain at all are dropped. With an evaluation
// world model (-eval-predict) each state also keeps its prediction of
// every measured proposal.
func cells(ev lm2lm.EvalReport) ([]StateResult, int) {
	var out []StateResult
	unmeasured := ev.Invalid + len(ev.Failures)
	perTask := map[string]int{}
	for _, st := range ev.States {
		id := st.State.Task.ID
		s := StateResult{ID: fmt.Sprintf("%s#%d", id, perTask[id]), Task: id}
		perTask[id]++
		for _, smp := range st.Samples {
			if !smp.Measured {
				continue // invalid or failed: in ev.Invalid or ev.Failures
			}
			s.Gains = append(s.Gains, smp.Gain) // σ_e units, −c when infeasible
			if !math.IsNaN(smp.Predicted) {
				s.Predicted = append(s.Predicted, smp.Predicted)
			}
			if !smp.Feasible {
				s.Infeasible++
			}
		}
		if len(s.Gains) > 0 {
			out = append(out, s)
		}
	}
	return out, unmeasured
}

// newWorld returns the embedded world model of -world-descriptors,
// -world-effects and -world-tune (labsetup.NewWorld, as the main job's).
func newWorld(o options, l *lab.Lab) (rwm.WorldModel, error) {
	return labsetup.NewWorld(l, o.world())
}

// world is the world model's part of the setting.
func (o options) world() labsetup.World {
	return labsetup.World{Descriptors: o.worldDesc, Effects: o.worldEffects, Tune: o.worldTune}
}

// policy is the policy's part of the setting that the main job shares.
func (o options) policy() labsetup.Policy {
	return labsetup.Policy{LR: o.policyLR, DescriptionBuckets: o.descBuckets, DescriptorBuckets: o.descriptorBuckets,
		Hidden: o.policyHidden, EvalTemperature: o.temperature(), TrainTemperature: o.trainTemp}
}

// trainer is the trainer's part of the setting that the main job shares.
func (o options) trainer() labsetup.Trainer { return labsetup.Trainer{HeldOutTask: o.heldOutTask} }

// train runs the trainer (LM2LM, its ablations, WMRL) and keeps its
// per-step numbers and calibration monitors. It returns the trainer's world
// model and its final evidence (M_0 plus every calibration record).
func train(ctx context.Context, e *env, cnt *counter, o options, m method, seed uint64, pol *proposer.Policy, m0 records.Evidence, res *Result) (rwm.WorldModel, records.Evidence, error) {
	prof, _ := o.prof() // validated
	world, err := newWorld(o, e.lab)
	if err != nil {
		return nil, records.Evidence{}, err
	}
	if m.realGains {
		world = realGains{b: e.lab, ex: cnt}
	}
	cfg := trainerConfig(o, m, seed)
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: world, Builder: e.lab,
		Executor: cnt, Tasks: e.train, Evidence: m0})
	if err != nil {
		return nil, records.Evidence{}, err
	}
	probeCnt := &counter{next: cnt.next}
	pr := &prober{e: e, ex: probeCnt, world: world, pol: pol, evidence: m0, seed: seed, tasks: o.probe}
	var probeErr error
	_, err = tr.Run(ctx, func(s lm2lm.StepReport) {
		res.Steps = append(res.Steps, stepResult(s))
		if c := s.Calibration; c != nil {
			res.Calibrations = append(res.Calibrations, calibrationResult(c))
			if probeErr == nil {
				probeErr = pr.add(c)
			}
		}
		if o.probe > 0 && probeErr == nil && (slices.Contains(prof.schedule.Steps, s.Step) || s.Step == cfg.Steps) {
			var p CalibrationResult
			p, probeErr = pr.measure(ctx, s.Step)
			res.Probes = append(res.Probes, p)
		}
	})
	res.Runs.Probe = probeCnt.take()
	if err != nil {
		return nil, records.Evidence{}, err
	}
	return world, tr.Evidence(), probeErr
}

// trainerConfig returns the trainer's configuration of method m under o.
func trainerConfig(o options, m method, seed uint64) lm2lm.Config {
	prof, _ := o.prof() // validated
	cfg := lm2lm.DefaultConfig()
	cfg.Steps, cfg.States, cfg.DAPO.Quota, cfg.Schedule = prof.steps, prof.states, prof.quota, prof.schedule
	cfg.Calibration, cfg.Parallel, cfg.Seed = m.calibration, o.parallel, seed
	cfg.Reward.Pessimism = o.pessimism
	cfg.PerTask, cfg.HeldOutTask = o.perTask, o.heldOutTask
	if o.group > 0 {
		cfg.DAPO.GroupSize = o.group
	}
	cfg.Trigger = trigger(o, m, prof.schedule)
	if m.wmrl {
		// As the main job: WMRL's defaults wait for 200 anchor pairs before
		// the first fit; a laptop-sized run has fewer, so it fits sooner.
		w := lm2lm.DefaultWMRLConfig()
		w.MinPairs, w.RefitEvery, w.HalfLife, w.Warmup = 32, 16, 8, 4
		cfg.WMRL = &w
	}
	return cfg
}

// trigger returns the adaptive calibration trigger of a calibrating method
// under -trigger, nil otherwise. Its MinPairs is capped at the smallest
// budget (library choice: the residuals it reads are one calibration's
// runs, so a profile with 8-run calibrations could never fire at 16).
func trigger(o options, m method, s calibrate.Schedule) *lm2lm.TriggerConfig {
	if !o.trigger || m.calibration == lm2lm.Static {
		return nil
	}
	t := lm2lm.DefaultTriggerConfig()
	t.Rule.MinPairs = min(t.Rule.MinPairs, slices.Min(s.Budgets))
	return &t
}

func stepResult(s lm2lm.StepReport) StepResult {
	st := StepResult{Step: s.Step, Loss: s.Update.Loss, Entropy: s.Update.Entropy}
	if r := s.Rollout; r != nil {
		st.Reward, st.MeanGain = num(r.MeanReward), num(r.MeanGain)
		if len(r.Share) > 0 {
			st.TopMechanism, st.TopShare = r.Share[0].Mechanism, num(r.Share[0].Fraction)
		}
	}
	return st
}

func calibrationResult(c *lm2lm.CalibrationReport) CalibrationResult {
	out := CalibrationResult{Step: c.Step, Executed: c.Executed, Infeasible: c.Infeasible,
		Delta: num(c.Monitors.Bias.Delta), Cosine: num(c.Monitors.Cosine), Accuracy: num(c.Monitors.Accuracy),
		Gap: num(calibrate.Gap(c.Predicted, c.Real)), Trigger: c.Trigger}
	for g := range c.Predicted {
		for k := range c.Predicted[g] {
			out.Predicted = append(out.Predicted, c.Predicted[g][k])
			out.Real = append(out.Real, c.Real[g][k])
		}
	}
	return out
}

// supervise trains the policy by maximum likelihood on the real records of
// M_0 instead of RL (baseline.SupervisedItems and baseline.Supervise):
// "sft" imitates every feasible record, "rft" (RFT-Real) only those with a
// positive gain; one Supervise step per training step, on the whole set.
func supervise(ctx context.Context, kind string, steps int, pol *proposer.Policy, m0 records.Evidence, res *Result) error {
	items, err := baseline.SupervisedItems(baseline.Supervision(kind), pol, m0)
	if err != nil {
		return err
	}
	return baseline.Supervise(ctx, pol, items, steps, func(i int, st proposer.Stats) {
		res.Steps = append(res.Steps, StepResult{Step: i, Loss: st.Loss, Entropy: st.Entropy})
	})
}

// realGains is the real-gains diagnostic's world model: each prediction is
// the proposal's real run on the task (lm2lm.RunReal through the job's
// counter, so every run is paid for and counted in the method's budget, and
// a (task, proposal) already run is read back), its gain exact up to seed
// noise, an infeasible run invalid. A policy trained on it shows what the
// trainer and the policy reach when the world model is the lab itself.
type realGains struct {
	b  builder.Builder
	ex builder.Executor
}

func (w realGains) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	rec, _, err := lm2lm.RunReal(ctx, w.b, w.ex, q.Task, q.Proposal)
	if err != nil {
		return rwm.Prediction{}, fmt.Errorf("real gains: %w", err)
	}
	if rec.Infeasible != "" {
		return rwm.Prediction{Reason: "infeasible run: " + records.Excerpt(rec.Infeasible)}, nil
	}
	return rwm.Prediction{Gain: rec.Gain, Valid: true, Reason: "real run"}, nil
}
