package lm2lm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// Errors of the package.
var (
	// ErrConfig marks an invalid Config or missing component.
	ErrConfig = errors.New("lm2lm: invalid config")
	// ErrNoSignal marks a rollout in which no group carried signal, so no
	// update was possible (every proposal got the same reward).
	ErrNoSignal = errors.New("lm2lm: rollout carries no signal")
)

// Calibration selects what calibration points execute: TopRated (LM2LM),
// RandomCalibration or Static (METHOD.md §1 On-policy calibration and its
// ablations; loop.Calibration).
type Calibration = loop.Calibration

// The calibration modes (loop.TopRated, loop.RandomCalibration,
// loop.Static).
const (
	TopRated          = loop.TopRated
	RandomCalibration = loop.RandomCalibration
	Static            = loop.Static
)

// Config parameterises a Trainer. Defaults are the paper's (METHOD.md §1)
// except where noted.
type Config struct {
	// Steps is the number of policy updates; default 96 (METHOD.md §1
	// Policy optimisation).
	Steps int
	// RolloutEvery is the number of updates one rollout feeds; default 8
	// (METHOD.md §1: a new rollout every 8 steps). Library choice: the
	// rollout's kept groups are split into RolloutEvery mini-batches in
	// order, one per step, each scored against the rollout's behaviour
	// log-probs (the clipped ratio keeps later mini-batches near the policy
	// that sampled them). Synthetic state expansion happens at every rollout.
	RolloutEvery int
	// States is the number of states drawn per rollout; default 277
	// (METHOD.md §1: sample 277 states, keep 256).
	States int
	// DAPO holds G (GroupSize, default 8), the quota of informative groups
	// kept per rollout (Quota, default 256), the advantage norm (default
	// mean-centred) and the flat tolerance (METHOD.md §1 Policy
	// optimisation); DefaultDAPOConfig(). The clipped surrogate (ε_low 0.2,
	// ε_high 0.28) is the policy's own (proposer.PolicyConfig.Loss for the
	// embedded policy).
	DAPO DAPOConfig
	// Reward parameterises reward shaping; default reward.DefaultConfig()
	// (METHOD.md §1 Reward: the clip c, the infeasible and no-change
	// penalties; Reward.Pessimism is beyond it, METHOD.md §1 Known
	// weaknesses).
	Reward reward.Config
	// Schedule is the calibration schedule; default steps 16, 40, 64 with
	// budgets 31, 38, 31 (METHOD.md §1 On-policy calibration). It must fall
	// on rollout boundaries (multiples of RolloutEvery).
	Schedule calibrate.Schedule
	// Calibration is TopRated (default: LM2LM's greedy top-B, METHOD.md §1
	// On-policy calibration), RandomCalibration or Static (its "random
	// calibration" and "static RWM" ablations).
	Calibration Calibration
	// DuplicateRuns allows calibration to execute a change (task and
	// canonical key) that is already in M, or twice in one calibration
	// point (METHOD.md §1 On-policy calibration: the top-B proposals of
	// the current policy). Default false (library choice: a second run of a known change
	// buys little and costs a run; with an idempotent executor such as a
	// builder.Pool over a store and a builder with fixed seeds it returns
	// the stored record, a duplicate in M).
	DuplicateRuns bool
	// MaxHistory is the longest history sampled for a state; default
	// records.MaxHistory (8; METHOD.md §1 Vocabulary: a state holds 0–8
	// earlier outcomes of its task).
	MaxHistory int
	// Parallel bounds concurrent world-model calls and concurrent real runs;
	// default 2 (library choice: a laptop's cores; it changes the wall
	// time, never the results).
	Parallel int
	// Seed seeds the trainer's random source (state sampling, proposals,
	// random calibration). Default 1 (library choice: any fixed seed makes
	// a run reproducible).
	Seed uint64
	// Now stamps synthetic records; default a zero time (library choice:
	// keeps runs reproducible byte for byte).
	Now func() time.Time
	// WMRL, when set, adds WMRL's anchor groups, online debiasing and
	// inverse-variance weighting (METHOD.md §2) to every rollout; nil = off
	// (default). It combines with any Calibration mode: LM2LM's context
	// calibration and WMRL's numeric correction can run alone or together.
	WMRL *WMRLConfig
	// HeldOutTask, when set, predicts the rewards of each training state
	// with M minus every record of the state's own task, plus the real
	// records of the state's history (synthetic ones never: METHOD.md §1
	// Synthetic state expansion): the world model judges a training state
	// as it judges an unseen task at test time, where the history is all
	// that is known of it, so the policy is rewarded for what transfers
	// across tasks and for what the history shows. Calibration picks and
	// its monitors use the same predictions. Beyond METHOD.md (its W reads
	// M whole); default false. Each state then has evidence of its own; a
	// world model that re-tunes per evidence and implements rwm.Pinner
	// (rwm.Tuned) is pinned once per task and M on M without the task, and
	// that task's states are predicted with the pinned configuration
	// instead of a tuning per state.
	HeldOutTask bool
	// Trigger, when set, replaces the fixed timing of Schedule by the
	// adaptive calibration trigger at the same budgets (beyond the paper,
	// METHOD.md §1 Known weaknesses); nil = the fixed schedule (default).
	// It needs a Calibration other than Static.
	Trigger *TriggerConfig
}

// TriggerConfig times calibrations adaptively at the schedule's budgets
// (loop.TriggerConfig, beyond the paper: METHOD.md §1 Known weaknesses).
// Its Horizon must be a multiple of Config.RolloutEvery.
type TriggerConfig = loop.TriggerConfig

// DefaultTriggerConfig returns loop.DefaultTriggerConfig().
func DefaultTriggerConfig() TriggerConfig { return loop.DefaultTriggerConfig() }

// WMRLConfig switches on WMRL's corrections (METHOD.md §2;
// loop.WMRLConfig).
type WMRLConfig = loop.WMRLConfig

// DefaultWMRLConfig returns loop.DefaultWMRLConfig().
func DefaultWMRLConfig() WMRLConfig { return loop.DefaultWMRLConfig() }

// The loop's reports (package loop), as the Trainer's StepReport carries
// them.
type (
	RolloutReport     = loop.RolloutReport
	CalibrationReport = loop.CalibrationReport
	AnchorReport      = loop.AnchorReport
)

// Unparseable is the mechanism under which RolloutReport.Share counts
// samples that could not be parsed (loop.Unparseable).
const Unparseable = loop.Unparseable

// DAPOConfig is the Trainer's part of DAPO (METHOD.md §1 Policy
// optimisation): what it samples, keeps and normalises. The loss is the
// policy's.
type DAPOConfig struct {
	// GroupSize is G, proposals per state; default 8.
	GroupSize int
	// Quota is the number of informative groups a rollout keeps; default
	// 256 (the paper samples 277 states and keeps 256).
	Quota int
	// Norm is the advantage normalisation; default dapo.MeanCentered.
	Norm dapo.Norm
	// Eps is ε added to the group std by the z-scored norms; default 1e-6.
	Eps float64
	// FlatTol is the tolerance under which a group's rewards count as all
	// equal (dropped by dynamic sampling); default 1e-9.
	FlatTol float64
}

// DefaultDAPOConfig returns dapo.DefaultConfig's values of these fields.
func DefaultDAPOConfig() DAPOConfig {
	d := dapo.DefaultConfig()
	return DAPOConfig{GroupSize: d.GroupSize, Quota: d.Quota, Norm: d.Norm, Eps: d.Eps, FlatTol: d.FlatTol}
}

// Validate reports the first invalid field, wrapping dapo.ErrConfig.
func (c DAPOConfig) Validate() error {
	d := dapo.DefaultConfig()
	d.GroupSize, d.Quota, d.MaxDraws, d.Norm, d.Eps, d.FlatTol = c.GroupSize, c.Quota, max(c.Quota, 1), c.Norm, c.Eps, c.FlatTol
	return d.Validate()
}

// DefaultConfig returns the paper's configuration (METHOD.md §1).
func DefaultConfig() Config {
	return Config{
		Steps:        96,
		RolloutEvery: 8,
		States:       277,
		DAPO:         DefaultDAPOConfig(),
		Reward:       reward.DefaultConfig(),
		Schedule:     calibrate.DefaultSchedule(),
		Calibration:  TopRated,
		MaxHistory:   records.MaxHistory,
		Parallel:     2,
		Seed:         1,
	}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Steps < 1:
		return fmt.Errorf("%w: Steps = %d, want ≥ 1", ErrConfig, c.Steps)
	case c.RolloutEvery < 1:
		return fmt.Errorf("%w: RolloutEvery = %d, want ≥ 1", ErrConfig, c.RolloutEvery)
	case c.States < 1:
		return fmt.Errorf("%w: States = %d, want ≥ 1", ErrConfig, c.States)
	case c.Parallel < 1:
		return fmt.Errorf("%w: Parallel = %d, want ≥ 1", ErrConfig, c.Parallel)
	case c.DAPO.Quota > c.States:
		return fmt.Errorf("%w: DAPO.Quota = %d exceeds States = %d", ErrConfig, c.DAPO.Quota, c.States)
	case c.Trigger != nil && c.Trigger.Horizon%c.RolloutEvery != 0:
		return fmt.Errorf("%w: trigger Horizon = %d is not a multiple of RolloutEvery = %d", ErrConfig, c.Trigger.Horizon, c.RolloutEvery)
	}
	if err := c.DAPO.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.loopConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Calibration != Static {
		for _, s := range c.Schedule.Steps {
			if s%c.RolloutEvery != 0 {
				return fmt.Errorf("%w: calibration step %d is not a multiple of RolloutEvery = %d", ErrConfig, s, c.RolloutEvery)
			}
		}
	}
	return nil
}

// loopConfig is the method's part of c: the loop's configuration. The
// calibration candidates are one rollout's groups, the current policy's
// (METHOD.md §1 On-policy calibration).
func (c Config) loopConfig() loop.Config {
	return loop.Config{Reward: c.Reward, Norm: c.DAPO.Norm, Eps: c.DAPO.Eps, FlatTol: c.DAPO.FlatTol, Quota: c.DAPO.Quota,
		Schedule: c.Schedule, Calibration: c.Calibration, Candidates: c.States, DuplicateRuns: c.DuplicateRuns,
		Trigger: c.Trigger, HeldOutTask: c.HeldOutTask, WMRL: c.WMRL, MaxHistory: c.MaxHistory, Seed: c.Seed}
}

// Components are the parts a Trainer wires together. Every one is an
// interface, so hosts plug in their own LLM backends and executors.
type Components struct {
	// Policy is the proposer being trained.
	Policy proposer.Trainable
	// World predicts gains; it reads only the evidence M the trainer gives it.
	World rwm.WorldModel
	// Builder and Executor run calibration proposals for real. Wrap the
	// executor in a builder.Pool with a records.Store to make runs durable
	// and idempotent. Not needed when Config.Calibration is Static.
	Builder  builder.Builder
	Executor builder.Executor
	// Tasks are the training tasks (METHOD.md §1 Objective: J_train).
	Tasks []records.Task
	// Unmeasured are training tasks no real run measures, their states
	// rewarded by the world model only (loop.Setup.Unmeasured); nil = none.
	Unmeasured []records.Task
	// Evidence is M_0, the initial real records.
	Evidence records.Evidence
	// Pool holds the records histories are drawn from; nil = a pool of
	// Evidence's records (METHOD.md §1 Synthetic state expansion).
	Pool *records.Pool
}

// Trainer runs LM2LM (METHOD.md §1): DAPO on world-model rewards with
// on-policy calibration. It is a driver of a loop.Loop: it draws states
// and sampling sources from the loop, samples the policy, asks the world
// model the loop's queries, scores each rollout, executes the runs the
// loop names, splits the kept groups into mini-batches and updates the
// policy. A Trainer is not safe for concurrent use; its goroutines
// (world-model calls and real runs, bounded by Config.Parallel) all finish
// before the method that started them returns.
type Trainer struct {
	cfg  Config
	c    Components
	loop *loop.Loop
	// step is the number of updates done; batches the current rollout's
	// mini-batches left.
	step    int
	batches [][]proposer.Item
	// pendingCal is the report of a calibration whose step has not
	// completed yet; it is attached to the step that completes.
	pendingCal *CalibrationReport
	// pinned caches, under HeldOutTask, the world model pinned on M
	// without each task (rwm.Pinner), for the M of fingerprint pinnedM.
	pinned  map[string]rwm.WorldModel
	pinnedM string
}

// New returns a trainer, or an error wrapping ErrConfig.
func New(cfg Config, c Components) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c.Policy == nil || c.World == nil {
		return nil, fmt.Errorf("%w: Policy and World are required", ErrConfig)
	}
	if (cfg.Calibration != Static || cfg.WMRL != nil) && (c.Builder == nil || c.Executor == nil) {
		return nil, fmt.Errorf("%w: Builder and Executor are required unless Calibration is Static and WMRL is off", ErrConfig)
	}
	l, err := loop.New(cfg.loopConfig(), loop.Setup{Tasks: c.Tasks, Unmeasured: c.Unmeasured, Evidence: c.Evidence, Pool: c.Pool})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Trainer{cfg: cfg, c: c, loop: l}, nil
}

// Evidence returns the current M (M_0 plus every calibration record).
func (t *Trainer) Evidence() records.Evidence { return t.loop.Status().Evidence }

// Pool returns the state pool.
func (t *Trainer) Pool() *records.Pool { return t.loop.Status().Pool }

// Step returns the number of updates done.
func (t *Trainer) Step() int { return t.step }

// Cost returns the summed cost and number of the real runs the trainer
// paid for: fresh executions only. A measurement the executor served from
// its records store or from a coalesced twin (builder.Outcome.Reused) is
// counted by Reused instead, so a second invocation over the same store
// reports what it really spent.
func (t *Trainer) Cost() (records.Cost, int) {
	st := t.loop.Status()
	return st.Cost, st.Runs
}

// Reused returns the number of measurements the executor served without a
// run (builder.Outcome.Reused).
func (t *Trainer) Reused() int { return t.loop.Status().Reused }

// StepReport describes one training step.
type StepReport struct {
	Step int
	// Stats of the policy update.
	Update proposer.Stats
	// Rollout is set on steps that drew a new rollout.
	Rollout *RolloutReport
	// Calibration is set on the step that ran a calibration. When a step
	// fails after its calibration and is retried, the calibration is not
	// repeated and its report comes with the retry that completes (a
	// checkpoint written in between drops the report, not the records).
	Calibration *CalibrationReport
}

// Run trains until Config.Steps updates are done, calling onStep (if not
// nil) after each step. It returns the reports of every step.
func (t *Trainer) Run(ctx context.Context, onStep func(StepReport)) ([]StepReport, error) {
	var out []StepReport
	for t.step < t.cfg.Steps {
		r, err := t.StepOnce(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if onStep != nil {
			onStep(r)
		}
	}
	return out, nil
}

// StepOnce performs one training step: at rollout boundaries a new
// rollout (with the calibration the schedule says and WMRL's anchor
// groups), then one policy update on the next mini-batch. On error the
// step is not counted and may be retried: a rollout is drawn again, a
// calibration whose records already joined M is not executed again (one
// whose runs failed is executed again), and a failed update keeps its
// mini-batch. After Config.Steps updates it returns an error wrapping
// ErrConfig.
func (t *Trainer) StepOnce(ctx context.Context) (StepReport, error) {
	rep := StepReport{Step: t.step + 1}
	if t.step >= t.cfg.Steps {
		return StepReport{Step: t.step}, fmt.Errorf("%w: all %d steps are done", ErrConfig, t.cfg.Steps)
	}
	if t.step%t.cfg.RolloutEvery == 0 || len(t.batches) == 0 {
		rr, err := t.rollout(ctx)
		if err != nil {
			return rep, err
		}
		rep.Rollout = rr
	}
	stats, err := t.c.Policy.Update(ctx, t.batches[0])
	if err != nil {
		// The mini-batch stays, so a retry updates on it.
		return StepReport{Step: t.step + 1}, fmt.Errorf("lm2lm: step %d: update: %w", t.step+1, err)
	}
	t.batches = t.batches[1:]
	rep.Update = stats
	rep.Calibration, t.pendingCal = t.pendingCal, nil
	t.step++
	return rep, nil
}

// rollout draws Config.States states, samples G proposals of each and has
// the loop score them; at a calibration point it executes the point's
// runs and scores the rollout again under the new M (METHOD.md §1
// On-policy calibration: each segment keeps a fixed reward function);
// under WMRL it executes the anchor groups. The kept groups become the
// rollout's RolloutEvery mini-batches, and its predicted samples join the
// pool (METHOD.md §1 Synthetic state expansion).
func (t *Trainer) rollout(ctx context.Context) (*RolloutReport, error) {
	step := t.step + 1
	states := t.loop.Draw(t.cfg.States)
	sources := t.loop.Sources(len(states))
	gs := make([]loop.Group, len(states))
	for i, s := range states {
		smp, err := t.c.Policy.Propose(ctx, s, t.cfg.DAPO.GroupSize, rand.New(rand.NewPCG(sources[i][0], sources[i][1])))
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: propose: %w", step, err)
		}
		gs[i] = loop.Group{State: s, Samples: smp}
	}
	sc, err := t.score(ctx, gs)
	if err != nil {
		return nil, err
	}
	if rd := t.loop.Ready(); rd.Kind == loop.CalibrationRuns {
		runs, err := t.execute(ctx, rd.Execute)
		if err != nil {
			return nil, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
		}
		ab, err := t.loop.Absorb(runs)
		if ab.Calibration != nil {
			// Its records are in M: report it with the step that
			// completes, even if this attempt fails after that.
			t.pendingCal = ab.Calibration
		}
		if err != nil {
			return nil, fmt.Errorf("lm2lm: %w", err)
		}
		if sc, err = t.score(ctx, gs); err != nil {
			return nil, err
		}
	}
	if sc.Report.Kept == 0 {
		return nil, fmt.Errorf("%w: step %d: all %d groups flat", ErrNoSignal, step, len(gs))
	}
	if rd := t.loop.Ready(); rd.Kind == loop.AnchorRuns {
		runs, err := t.execute(ctx, rd.Execute)
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: anchor groups: %w", step, err)
		}
		ab, err := t.loop.Absorb(runs)
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: %w", step, err)
		}
		sc = *ab.Scored
	}
	t.batches = split(minibatch(gs, sc), t.cfg.RolloutEvery)
	var now time.Time
	if t.cfg.Now != nil {
		now = t.cfg.Now()
	}
	if err := t.loop.Expand(now); err != nil {
		return nil, fmt.Errorf("lm2lm: step %d: %w", step, err)
	}
	rr := sc.Report
	return &rr, nil
}

// score asks the world model the loop's queries for gs, hands the answers
// to the loop and observes the step: the loop then names the runs due.
func (t *Trainer) score(ctx context.Context, gs []loop.Group) (loop.Scored, error) {
	preds, err := t.predict(ctx, t.step+1, t.loop.Ready(gs...).Predict)
	if err != nil {
		return loop.Scored{}, err
	}
	sc, err := t.loop.Score(gs, preds)
	if err != nil {
		return sc, fmt.Errorf("lm2lm: step %d: %w", t.step+1, err)
	}
	t.loop.Observe(t.step)
	return sc, nil
}

// minibatch returns the kept groups' items (state, sample, advantage), in
// order.
func minibatch(gs []loop.Group, sc loop.Scored) [][]proposer.Item {
	var items [][]proposer.Item
	for gi, g := range sc.Groups {
		if !g.Kept {
			continue
		}
		grp := make([]proposer.Item, len(gs[gi].Samples))
		for i, s := range gs[gi].Samples {
			grp[i] = proposer.Item{State: gs[gi].State, Sample: s, Advantage: g.Advantages[i]}
		}
		items = append(items, grp)
	}
	return items
}

// split cuts groups (in order) into n mini-batches of whole groups, as even
// as possible; with fewer groups than n, groups are reused round-robin so
// that every step has a batch (library choice: METHOD.md §1 Policy
// optimisation draws a new rollout every 8 steps). Groups may differ in
// size (a proposer may return fewer than G samples). groups must not be
// empty.
func split(groups [][]proposer.Item, n int) [][]proposer.Item {
	out := make([][]proposer.Item, n)
	if len(groups) >= n {
		for b := 0; b < n; b++ {
			lo, hi := b*len(groups)/n, (b+1)*len(groups)/n
			for _, g := range groups[lo:hi] {
				out[b] = append(out[b], g...)
			}
		}
		return out
	}
	for b := 0; b < n; b++ {
		out[b] = groups[b%len(groups)]
	}
	return out
}

// predict asks the world model every job, at most Parallel at once. An
// error that is not about one proposal stops the others.
func (t *Trainer) predict(ctx context.Context, step int, jobs []loop.PredictJob) ([]loop.Prediction, error) {
	out := make([]loop.Prediction, len(jobs))
	worlds := make([]rwm.WorldModel, len(jobs))
	for k, j := range jobs {
		w, err := t.judge(ctx, j)
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: evidence of a state of %q: %w", step, records.Excerpt(j.PinTask), err)
		}
		worlds[k] = w
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(t.cfg.Parallel)
	for k, j := range jobs {
		eg.Go(func() error {
			p, err := worlds[k].Predict(ectx, j.Query)
			out[k] = loop.Prediction{Prediction: p, Err: err}
			if err != nil && !errors.Is(err, rwm.ErrBadPrediction) && !errors.Is(err, records.ErrInvalid) {
				return fmt.Errorf("lm2lm: step %d: predict %s: %w", step, onTask(j.Query.Proposal, j.Query.Task), err)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// judge returns the world model that answers j: the trainer's, or under
// HeldOutTask for an rwm.Pinner, the model pinned on M without the task
// (one tuning per task and M).
func (t *Trainer) judge(ctx context.Context, j loop.PredictJob) (rwm.WorldModel, error) {
	p, ok := t.c.World.(rwm.Pinner)
	if j.PinTask == "" || !ok {
		return t.c.World, nil
	}
	if fp := t.loop.Status().Evidence.Fingerprint(); t.pinnedM != fp || t.pinned == nil {
		t.pinned, t.pinnedM = map[string]rwm.WorldModel{}, fp
	}
	if w, ok := t.pinned[j.PinTask]; ok {
		return w, nil
	}
	w, err := p.Pin(ctx, j.Pin)
	if err != nil {
		return nil, fmt.Errorf("pin the world model on M without the task: %w", err)
	}
	t.pinned[j.PinTask] = w
	return w, nil
}

// execute runs jobs for real (at most Parallel at once), in job order.
func (t *Trainer) execute(ctx context.Context, jobs []loop.RunJob) ([]loop.RealRun, error) {
	return RunRealJobs(ctx, t.c.Builder, t.c.Executor, t.cfg.Parallel, jobs)
}
