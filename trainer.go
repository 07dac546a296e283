package lm2lm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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
	// default 2.
	Parallel int
	// Seed seeds the trainer's random source (state sampling, proposals,
	// random calibration). Default 1.
	Seed uint64
	// Now stamps synthetic records; default a zero time (library choice:
	// keeps runs reproducible byte for byte).
	Now func() time.Time
	// WMRL, when set, adds WMRL's anchor groups, online debiasing and
	// inverse-variance weighting (METHOD.md §2) to every rollout; nil = off
	// (default). It combines with any Calibration mode: LM2LM's context
	// calibration and WMRL's numeric correction can run alone or together.
	WMRL *WMRLConfig
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
	wmrl    *wmrlState        // nil unless Config.WMRL is set
	// calDone is the number of schedule points already executed, so that a
	// step retried after a failure that followed its calibration does not
	// execute (and pay for) the calibration again.
	calDone int
	// pendingCal is the report of a calibration whose step has not
	// completed yet; it is attached to the step that completes.
	pendingCal *CalibrationReport

	mu   sync.Mutex // guards cost and runs, summed by concurrent real runs
	cost records.Cost
	runs int
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
	}
	if cfg.WMRL != nil {
		t.wmrl = newWMRL(*cfg.WMRL)
	}
	return t, nil
}

// Evidence returns the current M (M_0 plus every calibration record).
func (t *Trainer) Evidence() records.Evidence { return t.m }

// Pool returns the state pool.
func (t *Trainer) Pool() *records.Pool { return t.pool }

// Step returns the number of updates done.
func (t *Trainer) Step() int { return t.step }

// Cost returns the summed cost and number of the real runs the trainer made.
func (t *Trainer) Cost() (records.Cost, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cost, t.runs
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
	Step     int // the calibration point u: updates done before it
	Budget   int // B_u
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
		ro, err := t.rollout(ctx)
		if err != nil {
			return rep, err
		}
		if t.cfg.Calibration != Static {
			if u, b, ok := t.due(); ok {
				cr, err := t.calibrate(ctx, ro, u, b)
				if t.calDone > u {
					// Its records are in M: report it with the step
					// that completes, even if this attempt fails below.
					t.pendingCal = &cr
				}
				if err != nil {
					return rep, err
				}
				// The segment after a calibration uses the new reward
				// function r(·; M_{u+1}) (METHOD.md §1 On-policy calibration).
				if err := t.score(ctx, ro); err != nil {
					return rep, err
				}
			}
		}
		rr, err := t.prepare(ctx, ro)
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

// due returns the schedule point u and budget B_u of a calibration due at
// the current step and not yet executed.
func (t *Trainer) due() (u, budget int, ok bool) {
	for u, s := range t.cfg.Schedule.Steps {
		if s == t.step && u >= t.calDone {
			return u, t.cfg.Schedule.Budgets[u], true
		}
	}
	return 0, 0, false
}

// group is one state's proposals with their predictions and rewards.
type group struct {
	state   records.State
	samples []proposer.Sample
	preds   []rwm.Prediction
	ok      []bool // prediction obtained and valid
	rewards []float64
	// scaled is r(s, a; M): the normalised reward before the group-dependent
	// duplicate penalty and diversity bonus (clip(ĝ/τ_e, −c, c), −c when
	// invalid, the no-change reward for a no-change proposal). Calibration
	// rates by it and the monitors compare it with the real reward.
	scaled []float64
	tau    float64   // τ_e of the group's task in this rollout
	gains  []float64 // the gains shaped (debiased under WMRL)
}

type rolloutData struct {
	groups []*group
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
		ro.groups[i] = &group{state: s, samples: smp}
	}
	if err := t.score(ctx, ro); err != nil {
		return nil, err
	}
	return ro, nil
}

// score predicts every proposal of the rollout under the current M and
// shapes the rewards (METHOD.md §1 Reward).
func (t *Trainer) score(ctx context.Context, ro *rolloutData) error {
	type job struct{ g, i int }
	var jobs []job
	for gi, g := range ro.groups {
		g.preds = make([]rwm.Prediction, len(g.samples))
		g.ok = make([]bool, len(g.samples))
		for i, s := range g.samples {
			// The no-change proposal earns the no-change reward whatever a
			// world model says of it (METHOD.md §1 Reward 2), so it is not
			// asked: the embedded model answers Valid = false for it, which
			// would score it −c instead of −3.
			if !s.Invalid && !s.Proposal.IsNoChange() {
				jobs = append(jobs, job{gi, i})
			}
		}
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(t.cfg.Parallel)
	m := t.m
	for _, j := range jobs {
		g := ro.groups[j.g]
		eg.Go(func() error {
			q := rwm.Query{Task: g.state.Task, Proposal: g.samples[j.i].Proposal, Evidence: m}
			p, err := t.c.World.Predict(ectx, q)
			if err == nil {
				// A "valid" prediction with a non-finite gain cannot be
				// shaped, nor stored as a synthetic record.
				if verr := p.Validate(); verr != nil {
					err = fmt.Errorf("%w: %w", rwm.ErrBadPrediction, verr)
				}
			}
			switch {
			case err == nil:
				g.preds[j.i] = p
				g.ok[j.i] = p.Valid
			case errors.Is(err, rwm.ErrBadPrediction), errors.Is(err, records.ErrInvalid):
				// An unusable answer about one proposal scores it as invalid
				// rather than stopping training.
				g.preds[j.i] = rwm.Prediction{Reason: err.Error()}
			default:
				return fmt.Errorf("lm2lm: step %d: predict %s on %s: %w", t.step+1, q.Proposal.Key(), q.Task.ID, err)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	// τ_e per task over the rollout's predicted gains (METHOD.md §1 Reward 1).
	byTask := map[string][]float64{}
	sigma := map[string]float64{}
	for _, g := range ro.groups {
		sigma[g.state.Task.ID] = g.state.Task.SeedNoise
		for i, p := range g.preds {
			if g.ok[i] {
				byTask[g.state.Task.ID] = append(byTask[g.state.Task.ID], p.Gain)
			}
		}
	}
	for _, g := range ro.groups {
		tau := reward.TaskScale(sigma[g.state.Task.ID], byTask[g.state.Task.ID])
		g.tau = tau
		cands := make([]reward.Candidate, len(g.samples))
		g.scaled = make([]float64, len(g.samples))
		g.gains = make([]float64, len(g.samples))
		for i, s := range g.samples {
			gain, low := g.preds[i].Gain, g.preds[i].Low
			if t.wmrl != nil {
				// WMRL's online debiasing (METHOD.md §2) maps the score
				// before shaping.
				gain = t.wmrl.debiasGain(gain, tau, t.cfg.Reward)
				low = t.wmrl.debiasGain(low, tau, t.cfg.Reward)
			}
			c := reward.NewCandidate(g.state, s.Proposal, gain, g.valid(i))
			if g.ok[i] && g.preds[i].HasInterval {
				c.Low, c.HasLow = low, true
			}
			cands[i] = c
			g.gains[i] = gain
			g.scaled[i] = reward.Rate(t.cfg.Reward, tau, c)
		}
		g.rewards = reward.Shape(t.cfg.Reward, tau, cands)
	}
	return nil
}

// valid reports whether sample i counts as valid for reward shaping: its
// prediction is valid, or it is the no-change proposal (which earns the
// no-change reward, METHOD.md §1 Reward 2).
func (g *group) valid(i int) bool {
	return g.ok[i] || (!g.samples[i].Invalid && g.samples[i].Proposal.IsNoChange())
}

// realReward is the normalised reward without bonus: −c when invalid.
func realReward(cfg reward.Config, valid bool, gain, tau float64) float64 {
	if !valid {
		return -cfg.Clip
	}
	return reward.Normalise(gain, tau, cfg)
}

// prepare keeps the informative groups, computes advantages, splits the
// kept groups into mini-batches and adds the rollout to the pool as
// synthetic records (METHOD.md §1 Policy optimisation and Synthetic state
// expansion).
func (t *Trainer) prepare(ctx context.Context, ro *rolloutData) (RolloutReport, error) {
	rewards := make([][]float64, len(ro.groups))
	var rep RolloutReport
	var mechs []string
	var sumR, sumG float64
	var nR, nG int
	var synth []records.Record
	now := time.Time{}
	if t.cfg.Now != nil {
		now = t.cfg.Now()
	}
	for gi, g := range ro.groups {
		rewards[gi] = g.rewards
		for i, s := range g.samples {
			mech := s.Proposal.Mechanism
			if s.Invalid && strings.TrimSpace(mech) == "" {
				mech = Unparseable
			}
			mechs = append(mechs, mech)
			sumR += g.rewards[i]
			nR++
			if !g.ok[i] {
				if !g.valid(i) {
					rep.Invalid++
				}
				// No-change proposals are valid but unpredicted: no gain,
				// no synthetic record.
				continue
			}
			sumG += g.preds[i].Gain / g.state.Task.SeedNoise
			nG++
			gain := g.preds[i].Gain
			synth = append(synth, records.Record{
				Task: g.state.Task, Proposal: s.Proposal, Gain: gain,
				Loss: g.state.Task.RefLoss - gain, Source: records.Synthetic, Time: now,
			})
		}
	}
	rep.Groups = len(ro.groups)
	if nR > 0 {
		rep.MeanReward = sumR / float64(nR)
	}
	if nG > 0 {
		rep.MeanGain = sumG / float64(nG)
	}
	rep.Share = calibrate.MechanismShare(mechs)
	kept, dr, err := dapo.Select(rewards, t.cfg.DAPO.Quota, t.cfg.DAPO.FlatTol)
	rep.Kept, rep.Flat = dr.Kept, dr.Flat
	if err != nil && !errors.Is(err, dapo.ErrShortBatch) {
		return rep, fmt.Errorf("lm2lm: step %d: %w", t.step+1, err)
	}
	if len(kept) == 0 {
		return rep, fmt.Errorf("%w: step %d: all %d groups flat", ErrNoSignal, t.step+1, len(ro.groups))
	}
	var anchor map[int]bool
	weight := 1.0
	if t.wmrl != nil {
		var ar AnchorReport
		if anchor, ar, err = t.anchors(ctx, ro, kept); err != nil {
			return rep, err
		}
		rep.Anchors, weight = &ar, ar.Weight
	}
	items := make([][]proposer.Item, 0, len(kept))
	for _, gi := range kept {
		g := ro.groups[gi]
		adv := dapo.Advantages(g.rewards, t.cfg.DAPO.Norm, t.cfg.DAPO.Eps)
		if anchor[gi] {
			weightAnchors(adv, weight)
		}
		grp := make([]proposer.Item, len(g.samples))
		for i, s := range g.samples {
			grp[i] = proposer.Item{State: g.state, Sample: s, Advantage: adv[i]}
		}
		items = append(items, grp)
	}
	t.batches = split(items, t.cfg.RolloutEvery)
	if err := t.pool.Add(synth...); err != nil {
		return rep, fmt.Errorf("lm2lm: step %d: synthetic expansion: %w", t.step+1, err)
	}
	return rep, nil
}

// split cuts groups (in order) into n mini-batches of whole groups, as even
// as possible; with fewer groups than n, groups are reused round-robin so
// that every step has a batch. Groups may differ in size (a proposer may
// return fewer than G samples). groups must not be empty.
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

// calibrate executes B proposals of the rollout for real, adds their records
// to M and reports the reliability monitors on them (METHOD.md §1 On-policy
// calibration). u is the schedule point; once its records are in M it
// counts as done.
func (t *Trainer) calibrate(ctx context.Context, ro *rolloutData, u, budget int) (CalibrationReport, error) {
	rep := CalibrationReport{Step: t.step, Budget: budget}
	type cand struct{ g, i int }
	var cands []cand
	var scores []float64
	var taskIDs, keys []string
	// Changes already measured on their task (in M) are not candidates
	// unless DuplicateRuns is set: with an idempotent executor the second
	// run returns the stored record, a duplicate in M that measured nothing.
	known := map[string]bool{}
	if !t.cfg.DuplicateRuns {
		for i := 0; i < t.m.Len(); i++ {
			r := t.m.At(i)
			known[r.Task.ID+"\x00"+r.Proposal.Key()] = true
		}
	}
	for gi, g := range ro.groups {
		for i, s := range g.samples {
			if s.Invalid || s.Proposal.IsNoChange() {
				continue
			}
			key := g.state.Task.ID + "\x00" + s.Proposal.Key()
			if known[key] {
				continue
			}
			cands = append(cands, cand{gi, i})
			// r(s, a; M_u): the group's duplicate penalty and diversity
			// bonus are not properties of (s, a).
			scores = append(scores, g.scaled[i])
			taskIDs = append(taskIDs, g.state.Task.ID)
			keys = append(keys, key)
		}
	}
	opt := calibrate.Options{Task: taskIDs, PerTask: t.cfg.PerTask}
	if !t.cfg.DuplicateRuns {
		opt.Key, opt.UniqueKeys = keys, true
	}
	var pick []int
	switch t.cfg.Calibration {
	case TopRated:
		pick = calibrate.TopBWith(scores, budget, opt)
	case RandomCalibration:
		// Uniform over the candidates, with the same task and key limits.
		perm := t.rng.Perm(len(scores))
		rnd := make([]float64, len(scores))
		for r, i := range perm {
			rnd[i] = float64(len(scores) - r)
		}
		pick = calibrate.TopBWith(rnd, budget, opt)
	}
	res := make([]realRun, len(pick))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(t.cfg.Parallel)
	for k, ci := range pick {
		c := cands[ci]
		g := ro.groups[c.g]
		p := g.samples[c.i].Proposal
		eg.Go(func() error {
			r, err := runReal(ectx, t.c.Builder, t.c.Executor, g.state.Task, p)
			res[k] = r
			return err
		})
	}
	err := eg.Wait()
	t.account(res)
	if err != nil {
		return rep, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
	}
	// Monitors: predicted (under M_u) vs real normalised rewards, grouped
	// by task (library choice: greedy top-B rarely takes two proposals of
	// one state, so within-state groups would leave the cosine and the
	// pairwise accuracy undefined; proposals of one task share b_e and σ_e).
	byTask := map[string]int{}
	var newRecs []records.Record
	var sumGain float64
	var nGain int
	for k, ci := range pick {
		c := cands[ci]
		g := ro.groups[c.g]
		if !res[k].measured {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s %s: %s", g.state.Task.ID, g.samples[c.i].Proposal.Key(), res[k].failure))
			continue
		}
		rec := res[k].rec
		newRecs = append(newRecs, rec)
		realR := realReward(t.cfg.Reward, rec.Infeasible == "", rec.Gain, g.tau)
		if rec.Infeasible != "" {
			rep.Infeasible++
		} else {
			sumGain += rec.Gain / g.state.Task.SeedNoise
			nGain++
		}
		slot, seen := byTask[g.state.Task.ID]
		if !seen {
			slot = len(rep.Predicted)
			byTask[g.state.Task.ID] = slot
			rep.Predicted = append(rep.Predicted, nil)
			rep.Real = append(rep.Real, nil)
		}
		rep.Predicted[slot] = append(rep.Predicted[slot], g.scaled[c.i])
		rep.Real[slot] = append(rep.Real[slot], realR)
	}
	if nGain > 0 {
		rep.MeanRealGain = sumGain / float64(nGain)
	}
	rep.Executed = len(newRecs)
	rep.Records = newRecs
	rep.Monitors = calibrate.Monitor(rep.Predicted, rep.Real)
	m, err := t.m.Add(newRecs...)
	if err != nil {
		return rep, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
	}
	t.m = m
	t.calDone = u + 1
	if err := t.pool.Add(newRecs...); err != nil {
		return rep, fmt.Errorf("lm2lm: calibration at step %d: %w", t.step, err)
	}
	return rep, nil
}

// account adds the cost of the runs that reached the executor to the
// trainer's, in slice order (not completion order), so that the sums are
// the same bit for bit whichever run finished first.
func (t *Trainer) account(runs []realRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range runs {
		if r.ran {
			t.cost = t.cost.Add(r.cost)
			t.runs++
		}
	}
}

// RunReal builds and executes proposal p on task for real and returns its
// real record. A proposal that cannot be built or whose run is infeasible
// gives a record with Infeasible set (METHOD.md §1 Reward 2: it earns −c).
// ran reports whether the executor was called. A run that failed for reasons
// other than the proposal (a build or run failure of no known class, a
// transient failure the executor gave up on, or an outcome that is not a
// valid record) returns a zero record and a nil error: the proposal is
// simply not measured (the trainer's and Evaluate's reports list such
// failures). Cancellation returns an error wrapping the cause.
func RunReal(ctx context.Context, b builder.Builder, e builder.Executor, task records.Task, p records.Proposal) (rec records.Record, ran bool, err error) {
	r, err := runReal(ctx, b, e, task, p)
	return r.rec, r.ran, err
}

// realRun is the result of one attempt to measure a proposal for real.
type realRun struct {
	rec      records.Record // the real record when measured, else zero
	measured bool           // rec holds a record (feasible or infeasible)
	ran      bool           // the executor was called
	cost     records.Cost   // what the run cost as reported (its record's cost when measured)
	failure  string         // why it was not measured
}

func runReal(ctx context.Context, b builder.Builder, e builder.Executor, task records.Task, p records.Proposal) (realRun, error) {
	job, err := b.Build(ctx, task, p)
	if err != nil {
		switch {
		case errors.Is(err, builder.ErrInfeasible):
			rec := records.Record{Task: task, Proposal: p, Source: records.Real, Infeasible: err.Error()}
			return realRun{rec: rec, measured: true}, nil
		case ctx.Err() != nil || errors.Is(err, builder.ErrCancelled):
			return realRun{}, fmt.Errorf("lm2lm: build %s on %s: %w", p.Key(), task.ID, err)
		}
		return realRun{failure: "build: " + err.Error()}, nil
	}
	out, err := e.Execute(ctx, job)
	r := realRun{ran: true, cost: out.Cost}
	switch {
	case err == nil:
		r.rec = out.Record(job)
	case errors.Is(err, builder.ErrInfeasible) && ctx.Err() == nil:
		r.rec = out.Record(job)
		if r.rec.Infeasible == "" {
			r.rec.Infeasible = err.Error()
		}
		r.rec.Gain, r.rec.Loss = 0, 0
	case ctx.Err() != nil || errors.Is(err, builder.ErrCancelled):
		return r, fmt.Errorf("lm2lm: run %s on %s: %w", p.Key(), task.ID, err)
	default:
		r.failure = "run: " + err.Error()
		return r, nil
	}
	if verr := r.rec.Validate(); verr != nil {
		r.rec = records.Record{}
		r.failure = "run: outcome is not a valid record: " + verr.Error()
		if !finiteCost(r.cost) {
			r.cost = records.Cost{}
		}
		return r, nil
	}
	r.measured = true
	return r, nil
}

// finiteCost reports whether every field of c is finite and non-negative.
func finiteCost(c records.Cost) bool {
	for _, x := range []float64{c.DeviceSeconds, c.WallSeconds, c.FLOPs, c.Money} {
		if !(x >= 0 && !math.IsInf(x, 1)) {
			return false
		}
	}
	return true
}
