package lm2lm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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
	// mean-centred) and the flat tolerance. DAPO.Loss is validated but not
	// applied here: the clipped surrogate (ε_low 0.2, ε_high 0.28) is the
	// policy's own (proposer.PolicyConfig.Loss for the embedded policy), and
	// MaxDraws is unused (the rollout's States groups are drawn up front).
	DAPO dapo.Config
	// Reward parameterises reward shaping; default reward.DefaultConfig().
	Reward reward.Config
	// Schedule is the calibration schedule; default steps 16, 40, 64 with
	// budgets 31, 38, 31 (METHOD.md §1 On-policy calibration). It must fall
	// on rollout boundaries (multiples of RolloutEvery).
	Schedule calibrate.Schedule
	// Calibration is TopRated (default), RandomCalibration or Static.
	Calibration Calibration
	// PerTask caps the calibration runs of one task per calibration point;
	// 0 = no cap (default, as the paper).
	PerTask int
	// DuplicateRuns allows calibration to execute a change (task and
	// canonical key) that is already in M, or twice in one calibration
	// point. Default false (library choice: a second run of a known change
	// buys little and costs a run; with an idempotent executor such as a
	// builder.Pool over a store and a builder with fixed seeds it returns
	// the stored record, a duplicate in M).
	DuplicateRuns bool
	// MaxHistory is the longest history sampled for a state; default
	// records.MaxHistory (8).
	MaxHistory int
	// Parallel bounds concurrent world-model calls and concurrent real runs;
	// default 2 (library choice).
	Parallel int
	// Seed seeds the trainer's random source (state sampling, proposals,
	// random calibration). Default 1 (library choice).
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

// DefaultConfig returns the paper's configuration (METHOD.md §1).
func DefaultConfig() Config {
	return Config{
		Steps:        96,
		RolloutEvery: 8,
		States:       277,
		DAPO:         dapo.DefaultConfig(),
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
	case c.PerTask < 0:
		return fmt.Errorf("%w: PerTask = %d, want ≥ 0", ErrConfig, c.PerTask)
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
	// Evidence is M_0, the initial real records.
	Evidence records.Evidence
	// Pool holds the records histories are drawn from; nil = a pool of
	// Evidence's records (METHOD.md §1 Synthetic state expansion).
	Pool *records.Pool
}

// Trainer runs LM2LM (METHOD.md §1): DAPO on world-model rewards with
// on-policy calibration. A Trainer is not safe for concurrent use; its
// goroutines (world-model calls and real runs, bounded by Config.Parallel)
// all finish before the method that started them returns.
type Trainer struct {
	cfg  Config
	c    Components
	src  *rand.PCG
	rng  *rand.Rand
	m    records.Evidence
	pool *records.Pool
	step int

	batches [][]proposer.Item // the current rollout's mini-batches
	core    core              // the pure planning core (core.go)
	// calDone is the number of schedule points already executed, so that a
	// step retried after a failure that followed its calibration does not
	// execute (and pay for) the calibration again.
	calDone int
	// pendingCal is the report of a calibration whose step has not
	// completed yet; it is attached to the step that completes.
	pendingCal *CalibrationReport
	// last is the last calibration's step and predicted and real rewards,
	// what the trigger reads (Config.Trigger); step −1 before any.
	last lastCalibration
	// held is what HeldOutTask derives from the current M.
	held heldOut

	mu     sync.Mutex // guards cost and runs, summed by concurrent real runs
	cost   records.Cost
	runs   int
	reused int
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
	if len(c.Tasks) == 0 {
		return nil, fmt.Errorf("%w: no training tasks", ErrConfig)
	}
	for _, t := range c.Tasks {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	pool := c.Pool
	if pool == nil {
		var err error
		if pool, err = records.NewPool(c.Evidence.Records()...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	src := rand.NewPCG(cfg.Seed, 0x6c6d326c6d)
	t := &Trainer{
		cfg:  cfg,
		c:    c,
		src:  src,
		rng:  rand.New(src),
		m:    c.Evidence,
		pool: pool,
		last: lastCalibration{Step: -1},
	}
	t.core = core{cfg: cfg, corr: noCorrection{}}
	if cfg.WMRL != nil {
		w, err := newWMRL(*cfg.WMRL, cfg.Reward)
		if err != nil {
			return nil, err
		}
		t.core.corr = w
	}
	return t, nil
}

// Evidence returns the current M (M_0 plus every calibration record).
func (t *Trainer) Evidence() records.Evidence { return t.m }

// Pool returns the state pool.
func (t *Trainer) Pool() *records.Pool { return t.pool }

// Step returns the number of updates done.
func (t *Trainer) Step() int { return t.step }

// Cost returns the summed cost and number of the real runs the trainer
// paid for: fresh executions only. A measurement the executor served from
// its records store or from a coalesced twin (builder.Outcome.Reused) is
// counted by Reused instead, so a second invocation over the same store
// reports what it really spent.
func (t *Trainer) Cost() (records.Cost, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cost, t.runs
}

// Reused returns the number of measurements the executor served without a
// run (builder.Outcome.Reused).
func (t *Trainer) Reused() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reused
}

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

// StepOnce performs one training step: at rollout boundaries a calibration
// (when the schedule says so) and a new rollout, then one policy update on
// the next mini-batch. On error the step is not counted and may be retried;
// a calibration whose records already joined M is not executed again.
func (t *Trainer) StepOnce(ctx context.Context) (StepReport, error) {
	rep := StepReport{Step: t.step + 1}
	if t.step%t.cfg.RolloutEvery == 0 || len(t.batches) == 0 {
		rr, err := t.newRollout(ctx)
		if err != nil {
			return rep, err
		}
		rep.Rollout = &rr
	}
	st, err := t.c.Policy.Update(ctx, t.batches[0])
	if err != nil {
		// The mini-batch stays, so a retry updates on it.
		return rep, fmt.Errorf("lm2lm: step %d: update: %w", t.step+1, err)
	}
	t.batches = t.batches[1:]
	rep.Update = st
	rep.Calibration, t.pendingCal = t.pendingCal, nil
	t.step++
	return rep, nil
}

// newRollout draws and scores a rollout, runs the calibration due at this
// step on it (then rescoring it under the new M), and prepares its
// mini-batches.
func (t *Trainer) newRollout(ctx context.Context) (RolloutReport, error) {
	ro, err := t.rollout(ctx)
	if err != nil {
		return RolloutReport{}, err
	}
	if u, b, why, ok := t.due(); ok {
		cr, err := t.calibrate(ctx, ro, u, b)
		cr.Trigger = why
		if t.calDone > u {
			// Its records are in M: report it with the step that
			// completes, even if this attempt fails below.
			t.pendingCal = &cr
		}
		if err != nil {
			return RolloutReport{}, err
		}
		// The segment after a calibration uses the new reward function
		// r(·; M_{u+1}) (METHOD.md §1 On-policy calibration).
		if err := t.score(ctx, ro); err != nil {
			return RolloutReport{}, err
		}
	}
	return t.prepare(ctx, ro)
}

// due returns the schedule point u, budget B_u and reason of a calibration
// due at the current step and not yet executed (never under Static), as
// the core decides it (calibrationDue).
func (t *Trainer) due() (u, budget int, reason string, ok bool) {
	if t.cfg.Calibration == Static {
		return 0, 0, "", false
	}
	var m *calibrate.Monitors
	if t.last.Step >= 0 {
		mon := calibrate.Monitor(t.last.Predicted, t.last.Real)
		m = &mon
	}
	return calibrationDue(t.cfg.Schedule, t.cfg.Trigger, t.step, t.calDone, t.last.Step, m)
}

// lastCalibration is the last calibration's step and the predicted and
// real normalised rewards its monitors are computed from.
type lastCalibration struct {
	Step      int         `json:"step"`
	Predicted [][]float64 `json:"predicted,omitempty"`
	Real      [][]float64 `json:"real,omitempty"`
}

// rollout draws States states, samples G proposals each from the current
// policy and scores them under the current M.
func (t *Trainer) rollout(ctx context.Context) (*rolloutData, error) {
	states := t.pool.States(t.rng, t.c.Tasks, t.cfg.States, t.cfg.MaxHistory)
	ro := &rolloutData{groups: make([]*group, len(states))}
	for i, s := range states {
		// One derived source per state keeps the samples independent of
		// how many states came before.
		rng := rand.New(rand.NewPCG(t.rng.Uint64(), t.rng.Uint64()))
		smp, err := t.c.Policy.Propose(ctx, s, t.cfg.DAPO.GroupSize, rng)
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: propose: %w", t.step+1, err)
		}
		ro.groups[i] = newGroup(s, smp)
	}
	if err := t.score(ctx, ro); err != nil {
		return nil, err
	}
	return ro, nil
}

// score asks the world model about every sample the core names, under the
// current M, and lets the core shape the rewards (METHOD.md §1 Reward).
func (t *Trainer) score(ctx context.Context, ro *rolloutData) error {
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(t.cfg.Parallel)
	judge, err := t.stateJudges(ctx, ro)
	if err != nil {
		return err
	}
	for _, j := range ro.predictionJobs() {
		g := ro.groups[j.g]
		s := &g.samples[j.i]
		world, m := judge(j.g)
		eg.Go(func() error {
			q := rwm.Query{Task: g.state.Task, Proposal: s.Proposal, Evidence: m}
			p, err := world.Predict(ectx, q)
			if err := acceptPrediction(s, p, err); err != nil {
				return fmt.Errorf("lm2lm: step %d: predict %s: %w", t.step+1, onTask(q.Proposal, q.Task), err)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	t.core.shape(ro)
	return nil
}

// heldOut is what HeldOutTask derives from one M: M without each task's
// records and, for a world model that is an rwm.Pinner, the model pinned
// on it, by task ID. It is rebuilt when M changes (at calibration points).
type heldOut struct {
	m     string // M's fingerprint
	rest  map[string]records.Evidence
	world map[string]rwm.WorldModel
}

// stateJudges returns the world model and the evidence of each group's
// predictions: the trainer's world model and M, or under HeldOutTask, M
// without the records of the group's task plus the real records of its
// state's history, judged by the world model pinned on M without the task
// when the world model is an rwm.Pinner (one tuning per task and M, not one
// per state).
func (t *Trainer) stateJudges(ctx context.Context, ro *rolloutData) (func(g int) (rwm.WorldModel, records.Evidence), error) {
	if !t.cfg.HeldOutTask {
		return func(int) (rwm.WorldModel, records.Evidence) { return t.c.World, t.m }, nil
	}
	if fp := t.m.Fingerprint(); t.held.m != fp {
		t.held = heldOut{m: fp, rest: map[string]records.Evidence{}, world: map[string]rwm.WorldModel{}}
	}
	byGroup := make([]records.Evidence, len(ro.groups))
	worlds := make([]rwm.WorldModel, len(ro.groups))
	for gi, g := range ro.groups {
		id := g.state.Task.ID
		rest, world, err := t.withoutTask(ctx, id)
		if err == nil {
			byGroup[gi], err = rest.AddReal(g.state.History...)
		}
		if err != nil {
			return nil, fmt.Errorf("lm2lm: step %d: evidence of a state of %q: %w", t.step+1, records.Excerpt(id), err)
		}
		worlds[gi] = world
	}
	return func(g int) (rwm.WorldModel, records.Evidence) { return worlds[g], byGroup[g] }, nil
}

// withoutTask returns M without the records of task id, and the world
// model that judges that task's states under HeldOutTask (pinned on it for
// an rwm.Pinner), building both once per M.
func (t *Trainer) withoutTask(ctx context.Context, id string) (records.Evidence, rwm.WorldModel, error) {
	if rest, ok := t.held.rest[id]; ok {
		return rest, t.held.world[id], nil
	}
	var rs []records.Record
	for i := 0; i < t.m.Len(); i++ {
		if r := t.m.At(i); r.Task.ID != id {
			rs = append(rs, r)
		}
	}
	rest, err := records.NewEvidence(rs...)
	if err != nil {
		return rest, nil, err
	}
	world := t.c.World
	if p, ok := world.(rwm.Pinner); ok {
		if world, err = p.Pin(ctx, rest); err != nil {
			return rest, nil, fmt.Errorf("pin the world model on M without the task: %w", err)
		}
	}
	t.held.rest[id], t.held.world[id] = rest, world
	return rest, world, nil
}

// prepare keeps the informative groups, lets the correction run its anchor
// groups, computes the mini-batches and adds the rollout to the pool as
// synthetic records (METHOD.md §1 Policy optimisation and Synthetic state
// expansion).
func (t *Trainer) prepare(ctx context.Context, ro *rolloutData) (RolloutReport, error) {
	rep := ro.report()
	kept, err := t.core.keep(ro, t.step+1, &rep)
	if err != nil {
		return rep, err
	}
	var anchor map[int]bool
	weight := 1.0
	if plan := t.core.corr.anchors(ro, kept, t.rng); plan != nil {
		ar, err := t.anchors(ctx, ro, plan)
		if err != nil {
			return rep, err
		}
		rep.Anchors, anchor, weight = &ar, plan.set, ar.Weight
	}
	t.batches = t.core.batches(ro, kept, anchor, weight)
	now := time.Time{}
	if t.cfg.Now != nil {
		now = t.cfg.Now()
	}
	if err := t.pool.Add(ro.synthetic(now)...); err != nil {
		return rep, fmt.Errorf("lm2lm: step %d: synthetic expansion: %w", t.step+1, err)
	}
	return rep, nil
}

// anchors executes the anchor plan's runs, lets the correction absorb them
// and adds the real records to the state pool (never to M: WMRL's anchors
// do not enter the world model's context).
func (t *Trainer) anchors(ctx context.Context, ro *rolloutData, plan *anchorPlan) (AnchorReport, error) {
	runs, err := t.execute(ctx, plan.jobs)
	if err != nil {
		return AnchorReport{Groups: len(plan.groups)}, fmt.Errorf("lm2lm: step %d: anchor groups: %w", t.step+1, err)
	}
	rep, real := t.core.corr.absorb(ro, plan, runs)
	if err := t.pool.Add(real...); err != nil {
		return rep, fmt.Errorf("lm2lm: step %d: anchor records: %w", t.step+1, err)
	}
	return rep, nil
}

// calibrate executes the core's B_u picks of the rollout for real, adds
// their records to M and the pool, and reports the reliability monitors on
// them (METHOD.md §1 On-policy calibration). u is the schedule point; once
// its records are in M it counts as done.
func (t *Trainer) calibrate(ctx context.Context, ro *rolloutData, u, budget int) (CalibrationReport, error) {
	picks := t.core.calibrationPicks(ro, t.m, budget, t.rng)
	runs, err := t.execute(ctx, ro.changes(picks))
	if err != nil {
		return CalibrationReport{Step: t.step, Budget: budget}, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
	}
	rep := t.core.calibrationReport(ro, t.step, budget, picks, runs)
	m, err := t.m.Add(rep.Records...)
	if err != nil {
		return rep, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
	}
	t.m = m
	t.calDone = u + 1
	t.last = lastCalibration{Step: t.step, Predicted: rep.Predicted, Real: rep.Real}
	if err := t.pool.Add(rep.Records...); err != nil {
		return rep, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
	}
	return rep, nil
}

// execute runs jobs for real (at most Parallel at once) and adds the cost of
// those that reached the executor to the trainer's, in job order (not
// completion order), so that the sums are the same bit for bit whichever
// run finished first.
func (t *Trainer) execute(ctx context.Context, jobs []records.TaskChange) ([]realRun, error) {
	runs, err := runAll(ctx, t.c.Builder, t.c.Executor, t.cfg.Parallel, jobs)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range runs {
		switch {
		case r.Fresh():
			t.cost = t.cost.Add(r.Cost)
			t.runs++
		case r.Ran:
			t.reused++
		}
	}
	return runs, err
}
