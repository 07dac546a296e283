package lm2lm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
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

// Calibration selects what the trainer executes at calibration points
// (METHOD.md §1 On-policy calibration and its ablations).
type Calibration int

const (
	// TopRated executes the B_u top-rated proposals of the current policy
	// (greedy top-B): LM2LM.
	TopRated Calibration = iota
	// RandomCalibration executes B_u proposals of the current policy drawn
	// uniformly: the "random calibration" ablation.
	RandomCalibration
	// Static never executes: the "static RWM" ablation (M stays M_0).
	Static
)

func (c Calibration) String() string {
	switch c {
	case TopRated:
		return "top-rated"
	case RandomCalibration:
		return "random"
	case Static:
		return "static"
	}
	return fmt.Sprintf("Calibration(%d)", int(c))
}

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

// TriggerConfig times calibrations by calibrate.Trigger instead of the
// fixed schedule, at equal total real-run budget: the schedule's points
// are executed in order with their budgets B_u, the next one as soon as
// the trigger fires at a rollout boundary on the reliability monitors of
// the last calibration (predicted under M_u vs real normalised rewards of
// exactly its runs, CalibrationReport.Monitors), and at step
// Schedule.Steps[u] + Horizon at the latest. Point 0 runs at its deadline:
// before it no real residuals exist. The trigger thus never spends more
// than Schedule.Total() runs and never calibrates after the last scheduled
// step plus Horizon (library choice: it moves calibrations, it does not
// change the budget, so that it compares with the schedule at equal cost).
type TriggerConfig struct {
	// Rule holds the thresholds, MinPairs and MinInterval;
	// calibrate.DefaultTrigger() by default. Rule.Budget is not used: the
	// budgets are the schedule's.
	Rule calibrate.Trigger
	// Horizon is how many steps a point may run after its scheduled step
	// when the trigger has not fired; a multiple of RolloutEvery, default 0
	// (library choice: the trigger only brings calibrations forward, so by
	// every scheduled step at least the schedule's runs are spent).
	Horizon int
}

// DefaultTriggerConfig returns the defaults documented on TriggerConfig.
func DefaultTriggerConfig() TriggerConfig {
	return TriggerConfig{Rule: calibrate.DefaultTrigger()}
}

// Validate reports an invalid rule or a negative horizon, wrapping
// calibrate.ErrConfig.
func (c TriggerConfig) Validate() error {
	if err := c.Rule.Validate(); err != nil {
		return err
	}
	if c.Horizon < 0 {
		return fmt.Errorf("%w: trigger Horizon = %d, want ≥ 0", calibrate.ErrConfig, c.Horizon)
	}
	return nil
}

// DAPOConfig is the loop's part of DAPO (METHOD.md §1 Policy
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
	case c.MaxHistory < 0 || c.MaxHistory > records.MaxHistory:
		return fmt.Errorf("%w: MaxHistory = %d, want 0..%d", ErrConfig, c.MaxHistory, records.MaxHistory)
	case c.Parallel < 1:
		return fmt.Errorf("%w: Parallel = %d, want ≥ 1", ErrConfig, c.Parallel)
	case c.Calibration < TopRated || c.Calibration > Static:
		return fmt.Errorf("%w: unknown calibration %d", ErrConfig, int(c.Calibration))
	}
	if c.WMRL != nil {
		if err := c.WMRL.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if err := c.validateTrigger(); err != nil {
		return err
	}
	if c.DAPO.Quota > c.States {
		return fmt.Errorf("%w: DAPO.Quota = %d exceeds States = %d", ErrConfig, c.DAPO.Quota, c.States)
	}
	if err := c.DAPO.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.Reward.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Calibration != Static {
		if err := c.Schedule.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		for _, s := range c.Schedule.Steps {
			if s%c.RolloutEvery != 0 {
				return fmt.Errorf("%w: calibration step %d is not a multiple of RolloutEvery = %d", ErrConfig, s, c.RolloutEvery)
			}
		}
	}
	return nil
}

// validateTrigger checks the trigger against the calibration mode and the
// rollout length.
func (c Config) validateTrigger() error {
	switch {
	case c.Trigger == nil:
		return nil
	case c.Calibration == Static:
		return fmt.Errorf("%w: a calibration trigger needs a calibration other than static", ErrConfig)
	case c.Trigger.Horizon%c.RolloutEvery != 0:
		return fmt.Errorf("%w: trigger Horizon = %d is not a multiple of RolloutEvery = %d", ErrConfig, c.Trigger.Horizon, c.RolloutEvery)
	}
	if err := c.Trigger.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
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
	// rewarded by the world model only (WithUnmeasured); nil = none.
	Unmeasured []records.Task
	// Evidence is M_0, the initial real records.
	Evidence records.Evidence
	// Pool holds the records histories are drawn from; nil = a pool of
	// Evidence's records (METHOD.md §1 Synthetic state expansion).
	Pool *records.Pool
}

// Trainer runs LM2LM (METHOD.md §1): DAPO on world-model rewards with
// on-policy calibration. It is a driver over a Loop: it samples from the
// policy, asks the world model and runs the executor for what the loop
// names, and feeds the answers back. A Trainer is not safe for concurrent
// use; its goroutines (world-model calls and real runs, bounded by
// Config.Parallel) all finish before the method that started them returns.
type Trainer struct {
	cfg  Config
	c    Components
	loop *Loop
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
	loop, err := NewLoop(cfg, c.Tasks, c.Evidence, c.Pool, WithUnmeasured(c.Unmeasured...))
	if err != nil {
		return nil, err
	}
	return &Trainer{cfg: cfg, c: c, loop: loop}, nil
}

// Loop returns the loop the trainer drives.
func (t *Trainer) Loop() *Loop { return t.loop }

// Evidence returns the current M (M_0 plus every calibration record).
func (t *Trainer) Evidence() records.Evidence { return t.loop.m }

// Pool returns the state pool.
func (t *Trainer) Pool() *records.Pool { return t.loop.pool }

// Step returns the number of updates done.
func (t *Trainer) Step() int { return t.loop.step }

// Cost returns the summed cost and number of the real runs the trainer
// paid for: fresh executions only. A measurement the executor served from
// its records store or from a coalesced twin (builder.Outcome.Reused) is
// counted by Reused instead, so a second invocation over the same store
// reports what it really spent.
func (t *Trainer) Cost() (records.Cost, int) { return t.loop.cost, t.loop.runs }

// Reused returns the number of measurements the executor served without a
// run (builder.Outcome.Reused).
func (t *Trainer) Reused() int { return t.loop.reused }

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

// Unparseable is the mechanism under which RolloutReport.Share counts
// samples that could not be parsed into a proposal.
const Unparseable = "(unparseable)"

// RolloutReport describes one rollout.
type RolloutReport struct {
	Groups     int     // groups scored
	Kept       int     // informative groups kept
	Flat       int     // groups dropped as flat
	Invalid    int     // proposals that were invalid (unparseable, rejected by W, bad prediction)
	MeanReward float64 // mean shaped reward over all proposals
	MeanGain   float64 // mean predicted gain of valid proposals in σ_e units
	// Share is each mechanism direction's share of the sampled proposals,
	// most frequent first (METHOD.md §1 On-policy calibration, case study).
	Share []calibrate.Share
	// Anchors is set when WMRL is on.
	Anchors *AnchorReport
}

// CalibrationReport describes one calibration point.
type CalibrationReport struct {
	Step   int // the calibration point u: updates done before it
	Budget int // B_u
	// Trigger says why the point ran when Config.Trigger is set: the
	// monitor that crossed its threshold (e.g. "gap 1.8 > 1") or
	// "deadline step N"; "" under the fixed schedule.
	Trigger  string
	Executed int // runs that produced a record (feasible or not)
	// Records are the new real records added to M.
	Records []records.Record
	// Predicted and Real are the predicted (under M_u, before the new
	// records) and real normalised rewards (clip(g/τ_e, −c, c), −c when
	// infeasible; the predicted one normalises the value Reward.Pessimism
	// blends with q10, the gain itself by default) of the executed
	// proposals, grouped by task in order of first appearance, as the
	// reliability monitors see them. Calibration picks by Predicted.
	Predicted, Real [][]float64
	// Monitors are the reliability monitors on exactly those proposals.
	Monitors calibrate.Monitors
	// MeanRealGain is the mean real gain of the feasible runs in σ_e units.
	MeanRealGain float64
	Infeasible   int
	// Failures lists the picked proposals that produced no record (a build
	// or run failure that was not the proposal's fault), one "task key:
	// reason" line each; they are not in Records and not retried.
	Failures []string
}

// Run trains until Config.Steps updates are done, calling onStep (if not
// nil) after each step. It returns the reports of every step.
func (t *Trainer) Run(ctx context.Context, onStep func(StepReport)) ([]StepReport, error) {
	var out []StepReport
	for t.loop.step < t.cfg.Steps {
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

// StepOnce performs one training step: at rollout boundaries a calibration
// (when the schedule says so) and a new rollout, then one policy update on
// the next mini-batch. On error the step is not counted and may be retried;
// a calibration whose records already joined M is not executed again.
// After Config.Steps updates it returns an error wrapping ErrConfig.
func (t *Trainer) StepOnce(ctx context.Context) (StepReport, error) {
	for {
		rd := t.loop.Ready()
		if rd.Need == NeedNothing {
			return StepReport{Step: rd.Step}, fmt.Errorf("%w: all %d steps are done", ErrConfig, t.cfg.Steps)
		}
		a := t.answer(ctx, rd)
		rep, done, err := t.loop.Advance(a)
		if err != nil || done {
			return rep, err
		}
	}
}

// answer does the I/O that rd asks for.
func (t *Trainer) answer(ctx context.Context, rd Ready) Answer {
	var a Answer
	switch rd.Need {
	case NeedSamples:
		a.Samples = make([][]proposer.Sample, len(rd.Propose))
		for i, j := range rd.Propose {
			smp, err := t.c.Policy.Propose(ctx, j.State, j.N, j.Rand())
			if err != nil {
				a.Err = fmt.Errorf("lm2lm: step %d: propose: %w", rd.Step, err)
				return a
			}
			a.Samples[i] = smp
		}
	case NeedPredictions:
		a.Predictions, a.Err = t.predict(ctx, rd)
	case NeedRuns:
		a.Runs, a.Err = t.execute(ctx, rd.Execute)
	case NeedUpdate:
		if rd.Stamp && t.cfg.Now != nil {
			a.Now = t.cfg.Now()
		}
		a.Stats, a.Err = t.c.Policy.Update(ctx, rd.Batch)
	}
	return a
}

// predict asks the world model every query of rd, at most Parallel at
// once. An error that is not about one proposal stops the others.
func (t *Trainer) predict(ctx context.Context, rd Ready) ([]Prediction, error) {
	out := make([]Prediction, len(rd.Predict))
	worlds := make([]rwm.WorldModel, len(rd.Predict))
	for k, j := range rd.Predict {
		w, err := t.judge(ctx, j)
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: evidence of a state of %q: %w", rd.Step, records.Excerpt(j.PinTask), err)
		}
		worlds[k] = w
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(t.cfg.Parallel)
	for k, j := range rd.Predict {
		eg.Go(func() error {
			p, err := worlds[k].Predict(ectx, j.Query)
			out[k] = Prediction{Prediction: p, Err: err}
			if err != nil && !errors.Is(err, rwm.ErrBadPrediction) && !errors.Is(err, records.ErrInvalid) {
				return fmt.Errorf("lm2lm: step %d: predict %s: %w", rd.Step, onTask(j.Query.Proposal, j.Query.Task), err)
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
func (t *Trainer) judge(ctx context.Context, j PredictJob) (rwm.WorldModel, error) {
	p, ok := t.c.World.(rwm.Pinner)
	if j.PinTask == "" || !ok {
		return t.c.World, nil
	}
	if fp := t.loop.m.Fingerprint(); t.pinnedM != fp || t.pinned == nil {
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
func (t *Trainer) execute(ctx context.Context, jobs []RunJob) ([]RealRun, error) {
	sc := make([]seededChange, len(jobs))
	for i, j := range jobs {
		sc[i] = seededChange{TaskChange: j.Change, Seed: j.Seed, SetSeed: j.SetSeed}
	}
	runs, err := runAllSeeded(ctx, t.c.Builder, t.c.Executor, t.cfg.Parallel, sc)
	out := make([]RealRun, len(runs))
	for i, r := range runs {
		out[i] = exportedRun(r)
	}
	return out, err
}

// lastCalibration is the last calibration's step and the predicted and
// real normalised rewards its monitors are computed from.
type lastCalibration struct {
	Step      int         `json:"step"`
	Predicted [][]float64 `json:"predicted,omitempty"`
	Real      [][]float64 `json:"real,omitempty"`
}

// heldOut is what HeldOutTask derives from one M: M without each task's
// records, by task ID. It is rebuilt when M changes (at calibration
// points).
type heldOut struct {
	m    string // M's fingerprint
	rest map[string]records.Evidence
}
