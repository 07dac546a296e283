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
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/examples/compare/internal/probe"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/setting"
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
	n := tests * p.EvalStates * lm2lm.DefaultEvalConfig().K
	if m.usesM0() {
		n += p.M0
	}
	if m.extra {
		n += p.CalibrationBudget()
	}
	if m.trains() && m.calibration != lm2lm.Static {
		n += p.CalibrationBudget()
	}
	if m.trains() {
		n += o.probe * probe.Group * (len(p.Schedule.Steps) + 1)
	}
	return n
}

// newPolicy is the untrained policy of a job with the given seed: the
// setting's (setting.Setting.NewPolicy, as the main job's), its hidden
// layer's initial weights drawn from the seed alone, so every method of a
// seed starts from the same policy.
func newPolicy(o options, seed uint64) (*proposer.Policy, error) {
	set, _ := o.chosen() // validated
	pol, err := set.NewPolicy(seed)
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
	set, _ := o.chosen() // validated
	res := Result{Method: j.method, Seed: j.seed, Profile: o.profile, Suite: o.suite, Setting: set, ProfileConfig: prof,
		Tasks: o.tasksDigest(), LeftOut: e.leftOut}
	cnt := &counter{next: progress.Executor(e.pool, rep)}
	m0, err := initialRecords(ctx, e, o, m, j, prof, cnt)
	if err != nil {
		return res, err
	}
	res.M0 = m0.Len()
	res.Runs.M0 = cnt.take()
	known := m0 // what the method ranks or imitates
	if m.corpus {
		if known, err = withCorpus(m0, o.corpusEv); err != nil {
			return res, fmt.Errorf("%s: %w", j, err)
		}
		res.Corpus, res.CorpusRuns = o.corpusEv.Fingerprint(), o.corpusEv.Len()
	}
	pol, err := newPolicy(o, j.seed)
	if err != nil {
		return res, err
	}
	in := &jobIn{e: e, o: o, m: m, seed: j.seed, pol: pol, m0: m0, known: known, cnt: cnt, res: &res}
	prop, err := m.via.obtain(ctx, in)
	if in.stop != nil {
		defer in.stop()
	}
	world, final := in.world, in.final
	if err != nil {
		return res, fmt.Errorf("%s: training: %w", j, err)
	}
	if m.isExternal() {
		cnt.take() // nothing ran here: the run's own training runs are in res
	} else {
		res.Runs.Training = cnt.take()
	}
	evalTemp := set.Policy.EvalTemperature
	if res.RerankTemperature = o.rerankTempOf(j.method); res.RerankTemperature != 0 {
		evalTemp = res.RerankTemperature // the candidates of the trained policy's rerank (Result.RerankTemperature)
	}
	if err := pol.SetTemperature(evalTemp); err != nil {
		return res, err
	}
	hist, err := histories(ctx, e, cnt, prof.EvalHistory, o.parallel)
	if err != nil {
		return res, fmt.Errorf("%s: histories of the test states: %w", j, err)
	}
	res.Runs.History = cnt.take()
	ecfg := lm2lm.DefaultEvalConfig()
	ecfg.StatesPerTask, ecfg.Parallel, ecfg.Seed, ecfg.Seeds = prof.EvalStates, o.parallel, j.seed, e.refSeeds
	ecfg.Clip = -infeasibleGain
	if predicts(o, m) && world != nil {
		// The trained world model's judgement of the proposals it was
		// trained for, on tasks it has not seen (predictions only).
		ecfg.World, ecfg.Evidence = world, final
	}
	ev, err := lm2lm.Evaluate(ctx, ecfg, prop, e.lab, cnt, e.test, hist)
	if err != nil {
		return res, fmt.Errorf("%s: evaluation: %w", j, err)
	}
	res.Runs.Evaluation = cnt.take()
	res.States, res.Unmeasured = cells(ev)
	if res.Judgement, err = judgement(o, ev, prop, pol); err != nil {
		return res, fmt.Errorf("%s: judgement: %w", j, err)
	}
	res.WallSeconds = math.Round(time.Since(start).Seconds()*10) / 10
	return res, nil
}

// initialRecords measures the job's M'_0 through cnt: M_0 drawn with
// environment.M0 from the job's seed (none for the untrained policies),
// and for a method with extra records the calibration budget's random
// records after it (baseline.StaticPlusRandom).
func initialRecords(ctx context.Context, e *env, o options, m method, j job, prof setting.Profile, cnt *counter) (records.Evidence, error) {
	var m0 records.Evidence
	if m.usesM0() { // the untrained policies need no records
		var err error
		if m0, _, err = environment.M0(ctx, e.lab, cnt, e.train, lab.Catalogue(), prof.M0, j.seed, o.parallel); err != nil {
			return m0, fmt.Errorf("%s: %w", j, err)
		}
	}
	if m.extra {
		extra := prof.CalibrationBudget()
		rng := rand.New(rand.NewPCG(j.seed, 0x6d3027))
		var err error
		if m0, _, err = baseline.StaticPlusRandom(ctx, rng, m0, e.train, lab.Catalogue(), extra, e.lab, cnt, o.parallel); err != nil {
			return m0, fmt.Errorf("%s: M'_0: %w", j, err)
		}
	}
	return m0, nil
}

// predicts reports whether method m's evaluation carries its world
// model's predictions (-eval-predict): every
// trained method but the real-gains diagnostic, whose "world model" is
// the lab itself, so its predictions would be real runs.
func predicts(o options, m method) bool {
	return o.predict && m.trains() && !m.realGains
}

// judgement is the evaluation's judgement diagnostic against -landscape
// (probe.Judge, by the suite's strata); nil without it.
func judgement(o options, ev lm2lm.EvalReport, prop proposer.Proposer, pol *proposer.Policy) ([]evalstat.Judgement, error) {
	if o.land == nil {
		return nil, nil
	}
	return probe.Judge(func(task string) string { return stratumOf(o.suite, task) }, o.land.Gains, ev, prop, pol)
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

func (untrained) obtain(_ context.Context, in *jobIn) (proposer.Proposer, error) { return in.pol, nil }

func (s supervised) obtain(ctx context.Context, in *jobIn) (proposer.Proposer, error) {
	prof, _ := in.o.prof() // validated
	return in.pol, supervise(ctx, s.kind, prof.Steps, in.pol, in.known, in.res)
}

func (bestKnown) obtain(_ context.Context, in *jobIn) (proposer.Proposer, error) {
	return baseline.NewBestKnown(baseline.DefaultBestKnownConfig(), in.known)
}

func (worldRank) obtain(_ context.Context, in *jobIn) (proposer.Proposer, error) {
	var w rwm.WorldModel
	var err error
	if in.m.prior {
		w, in.res.Prior, err = priorWorld(in.o, in.e.lab)
	} else {
		w, err = newWorld(in.o, in.e.lab)
	}
	if err != nil {
		return nil, err
	}
	return rerankOf(in, w, in.m0)
}

// rerankOf is a reranking method's proposer: world model w with evidence
// ev choosing among the policy's samples (the setting's RerankConfig) or,
// for a choice method, among every change of the catalogue.
func rerankOf(in *jobIn, w rwm.WorldModel, ev records.Evidence) (proposer.Proposer, error) {
	set, _ := in.o.chosen() // validated
	cfg := set.RerankConfig()
	var base proposer.Proposer = in.pol
	if in.m.choice {
		all, err := baseline.NewEnumerate(cards.All(lab.Catalogue()))
		if err != nil {
			return nil, err
		}
		base, cfg.N = all, all.Len()
	}
	return baseline.NewRerank(cfg, base, w, ev)
}

// obtain trains the policy with the trainer; with the method's rerank, the
// proposer is the trained world model's rerank of the trained policy.
func (rl) obtain(ctx context.Context, in *jobIn) (proposer.Proposer, error) {
	var err error
	if in.world, in.final, err = train(ctx, in.e, in.cnt, in.o, in.m, in.seed, in.pol, in.m0, in.res); err != nil || !in.m.rerank {
		return in.pol, err
	}
	return rerankOf(in, in.world, in.final)
}

func (external) obtain(ctx context.Context, in *jobIn) (proposer.Proposer, error) {
	prop, stop, err := transformerProposer(ctx, in.o, in.m, in.seed, in.res)
	if err == nil {
		in.stop = stop
	}
	return prop, err
}

// newWorld returns the setting's embedded world model over the lab
// (setting.Setting.NewWorld, as the main job's).
func newWorld(o options, l *lab.Lab) (rwm.WorldModel, error) {
	set, _ := o.chosen() // validated
	return set.NewWorld(l)
}

// priorWorld returns rerank-prior's world model: the setting's world
// model with the lab's pretrained prior (setting.World.Prior: lab/prior
// V2's mean and hyperparameters, no re-tuning, the context clipped at
// setting.PriorClip σ_e), and the prior's digest.
func priorWorld(o options, l *lab.Lab) (rwm.WorldModel, string, error) {
	set, _ := o.chosen() // validated
	set.World.Prior, set.World.Tune = true, false
	w, err := set.NewWorld(l)
	if err != nil {
		return nil, "", err
	}
	d, err := set.PriorDigest()
	return w, d, err
}

// train runs the trainer (LM2LM, its ablations, WMRL) and keeps its
// per-step numbers and calibration monitors. It returns the trainer's world
// model and its final evidence (M_0 plus every calibration record).
func train(ctx context.Context, e *env, cnt *counter, o options, m method, seed uint64, pol *proposer.Policy, m0 records.Evidence, res *Result) (rwm.WorldModel, records.Evidence, error) {
	prof, _ := o.prof()  // validated
	set, _ := o.chosen() // validated
	world, err := newWorld(o, e.lab)
	if err == nil {
		world, err = set.TrainerWorld(world, m0)
	}
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
	mon := probe.NewMonitor(probe.Config{World: world, Policy: pol, Evidence: m0, Builder: e.lab, Executor: probeCnt,
		Train: e.train, Seed: seed, Tasks: o.probe, Steps: prof.Schedule.Steps, Last: cfg.Steps, Teacher: teacherConfig(o, e)})
	_, err = tr.Run(ctx, func(s lm2lm.StepReport) {
		res.Steps = append(res.Steps, stepResult(s))
		if c := s.Calibration; c != nil {
			res.Calibrations = append(res.Calibrations, calibrationResult(c))
		}
		mon.Observe(ctx, s)
	})
	res.Probes, res.Locality, res.Teacher, res.Runs.Probe = mon.Probes(), mon.Locality(), mon.Teacher(), probeCnt.take()
	if err != nil {
		return nil, records.Evidence{}, err
	}
	return world, tr.Evidence(), mon.Err()
}

// teacherConfig is the teacher probe's configuration when the landscape
// holds training tasks (a diagnostic suite such as v2-train), nil
// otherwise.
func teacherConfig(o options, e *env) *probe.TeacherConfig {
	if o.land == nil || !slices.ContainsFunc(e.train, func(t records.Task) bool { _, ok := o.land.Gains[t.ID]; return ok }) {
		return nil
	}
	set, _ := o.chosen() // validated
	return &probe.TeacherConfig{Land: o.land.Gains, Catalogue: cards.All(lab.Catalogue()), HeldOutTask: set.Trainer.HeldOutTask}
}

// trainerConfig returns the trainer's configuration of method m under o:
// the profile's sizes and the setting's trainer part, as the main job's,
// the method's calibration mode and WMRL (setting.LabWMRL), -pessimism and
// -trigger.
func trainerConfig(o options, m method, seed uint64) lm2lm.Config {
	prof, _ := o.prof()  // validated
	set, _ := o.chosen() // validated
	cfg := lm2lm.DefaultConfig()
	prof.ApplyTrainer(&cfg)
	set.ApplyTrainer(&cfg)
	cfg.Calibration, cfg.Parallel, cfg.Seed = m.calibration, o.parallel, seed
	cfg.Reward.Pessimism = o.pessimism
	cfg.Trigger = trigger(o, m, prof.Schedule)
	if m.wmrl {
		w := setting.LabWMRL()
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
		st.Reward, st.MeanGain = stat.OrNil(r.MeanReward), stat.OrNil(r.MeanGain)
		if len(r.Share) > 0 {
			st.TopMechanism, st.TopShare = r.Share[0].Mechanism, stat.OrNil(r.Share[0].Fraction)
		}
	}
	return st
}

func calibrationResult(c *lm2lm.CalibrationReport) CalibrationResult {
	out := CalibrationResult{Step: c.Step, Executed: c.Executed, Infeasible: c.Infeasible,
		Delta: stat.OrNil(c.Monitors.Bias.Delta), Cosine: stat.OrNil(c.Monitors.Cosine), Accuracy: stat.OrNil(c.Monitors.Accuracy),
		Gap: stat.OrNil(calibrate.Gap(c.Predicted, c.Real)), Trigger: c.Trigger}
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
