package loop

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Setup is what a loop starts from.
type Setup struct {
	// Tasks are the training tasks (METHOD.md §1 Objective: J_train).
	Tasks []records.Task
	// Unmeasured are training tasks no real run measures: tasks without
	// reference runs, whose b_e and σ_e the host estimates. Their states
	// are drawn with those of the training tasks (uniformly over both) and
	// rewarded by the world model alike, each judged on M as it stands (M
	// holds none of their records); calibration never picks them. Beyond
	// METHOD.md §1 Synthetic state expansion, which grows the histories of
	// the training tasks' states: these grow the tasks. A task's ID must
	// not be a training task's or another's, M_0 must hold none of its
	// records, and WMRL (whose anchor groups run real) refuses them.
	Unmeasured []records.Task
	// Evidence is M_0, the initial real records.
	Evidence records.Evidence
	// Pool holds the records histories are drawn from; nil = a pool of
	// Evidence's records. The loop keeps it and adds to it.
	Pool *records.Pool
}

// Loop is LM2LM's method state (METHOD.md §1, with WMRL's corrections of
// §2): the evidence M, the state pool, the calibration and WMRL state and
// a random source. See the package documentation for the driver it
// expects. A Loop is not safe for concurrent use.
type Loop struct {
	cfg        Config
	tasks      []records.Task
	unmeasured []records.Task
	src        *rand.PCG
	rng        *rand.Rand
	m          records.Evidence
	pool       *records.Pool
	step       int
	core       core

	// calDone is the number of schedule points whose records joined M.
	calDone int
	// last is the last calibration (what the trigger reads); step −1
	// before any.
	last lastCalibration
	// held is what HeldOutTask derives from the current M.
	held heldOut

	cost   records.Cost
	runs   int
	reused int

	// since holds the calibration candidates: the groups scored since the
	// last calibration started, at most Config.Candidates, newest last.
	since rolloutData
	// batch is the last scored batch: its report, kept groups, the number
	// of calibrations when it was scored, whether its synthetic records
	// joined the pool and whether its anchor groups were run.
	batch *scoredBatch
	// The runs pending: a calibration's or the batch's anchor groups'.
	cal  *calInFlight
	plan *anchorPlan
}

// scoredBatch is the last batch Score scored.
type scoredBatch struct {
	ro       *rolloutData
	kept     []int
	rep      RolloutReport
	epoch    int
	expanded bool
	anchored bool
}

// calInFlight is the calibration being executed: its point, budget, the
// step it was picked at, why, its candidates and its picks among them.
type calInFlight struct {
	u, budget int
	at        int
	why       string
	ro        *rolloutData
	picks     []ref
}

// lastCalibration is the last calibration's step and the predicted and
// real normalised rewards its monitors are computed from.
type lastCalibration struct {
	Step      int         `json:"step"`
	Predicted [][]float64 `json:"predicted,omitempty"`
	Real      [][]float64 `json:"real,omitempty"`
}

// heldOut is what HeldOutTask derives from one M: M without each task's
// records, by task ID. It is rebuilt when M changes.
type heldOut struct {
	m    string // M's fingerprint
	rest map[string]records.Evidence
}

// New returns a loop, or an error wrapping ErrConfig.
func New(cfg Config, s Setup) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(s.Tasks) == 0 {
		return nil, fmt.Errorf("%w: no training tasks", ErrConfig)
	}
	for _, t := range s.Tasks {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	unmeasured, err := checkUnmeasured(cfg, s.Tasks, s.Evidence, s.Unmeasured)
	if err != nil {
		return nil, err
	}
	pool := s.Pool
	if pool == nil {
		if pool, err = records.NewPool(s.Evidence.Records()...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	src := rand.NewPCG(cfg.Seed, 0x6c6d326c6d)
	l := &Loop{
		cfg:        cfg,
		tasks:      append([]records.Task(nil), s.Tasks...),
		unmeasured: append([]records.Task(nil), s.Unmeasured...),
		src:        src,
		rng:        rand.New(src),
		m:          s.Evidence,
		pool:       pool,
		last:       lastCalibration{Step: -1},
	}
	l.core = core{cfg: cfg, corr: noCorrection{}, unmeasured: unmeasured}
	if cfg.WMRL != nil {
		w, err := newWMRL(*cfg.WMRL, cfg.Reward)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		l.core.corr = w
	}
	return l, nil
}

// checkUnmeasured checks Setup.Unmeasured and returns their IDs as a set
// (nil when there are none).
func checkUnmeasured(cfg Config, tasks []records.Task, evidence records.Evidence, unmeasured []records.Task) (map[string]bool, error) {
	if len(unmeasured) == 0 {
		return nil, nil
	}
	if cfg.WMRL != nil {
		return nil, fmt.Errorf("%w: unmeasured tasks with WMRL, whose anchor groups run real", ErrConfig)
	}
	seen := map[string]bool{}
	for _, t := range tasks {
		seen[t.ID] = true
	}
	set := map[string]bool{}
	for _, t := range unmeasured {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: unmeasured task: %w", ErrConfig, err)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("%w: unmeasured task %q is a training task or given twice", ErrConfig, records.Excerpt(t.ID))
		}
		seen[t.ID], set[t.ID] = true, true
	}
	for i := 0; i < evidence.Len(); i++ {
		if id := evidence.At(i).Task.ID; set[id] {
			return nil, fmt.Errorf("%w: M_0 holds a record of unmeasured task %q", ErrConfig, records.Excerpt(id))
		}
	}
	return set, nil
}

// stateTasks returns the tasks states are drawn from: the training tasks,
// then the unmeasured ones.
func (l *Loop) stateTasks() []records.Task {
	if len(l.unmeasured) == 0 {
		return l.tasks
	}
	return append(append([]records.Task(nil), l.tasks...), l.unmeasured...)
}

// Draw draws n states from the pool with the loop's random source: each
// of a task drawn uniformly from the training and unmeasured tasks, with a
// history of up to Config.MaxHistory records of it (records.Pool.States;
// METHOD.md §1 Vocabulary).
func (l *Loop) Draw(n int) []records.State {
	return l.pool.States(l.rng, l.stateTasks(), n, l.cfg.MaxHistory)
}

// Sources draws n sampling sources from the loop's random source, one per
// drawn state: a driver that samples state i with
// rand.New(rand.NewPCG(s[i][0], s[i][1])) makes its samples independent
// of how many states came before and reproducible from Config.Seed.
func (l *Loop) Sources(n int) [][2]uint64 {
	out := make([][2]uint64, n)
	for i := range out {
		out[i] = [2]uint64{l.rng.Uint64(), l.rng.Uint64()}
	}
	return out
}

// Ready returns what is pending: the world-model queries that scoring gs
// needs under the current M (none without gs), and the real runs to
// execute. It changes nothing: calling it again returns the same runs.
func (l *Loop) Ready(gs ...Group) Ready {
	rd := Ready{Step: l.step}
	if len(gs) > 0 {
		ro := groupsOf(gs)
		rd.Predict = l.predictJobs(ro, ro.predictionJobs())
	}
	switch {
	case l.cal != nil:
		rd.Kind = CalibrationRuns
		rd.Execute = []RunJob{}
		for _, tc := range l.cal.ro.changes(l.cal.picks) {
			rd.Execute = append(rd.Execute, RunJob{Change: tc})
		}
	case l.plan != nil:
		rd.Kind = AnchorRuns
		rd.Execute = []RunJob{}
		for _, tc := range l.plan.jobs {
			rd.Execute = append(rd.Execute, RunJob{Change: tc})
		}
	}
	return rd
}

func groupsOf(gs []Group) *rolloutData {
	ro := &rolloutData{groups: make([]*group, len(gs))}
	for i, g := range gs {
		ro.groups[i] = newGroup(g.State, g.Samples)
	}
	return ro
}

// predictJobs turns the core's prediction jobs into queries under the
// current M (or, under HeldOutTask, M without the state's task plus the
// real records of its history).
func (l *Loop) predictJobs(ro *rolloutData, jobs []ref) []PredictJob {
	out := make([]PredictJob, len(jobs))
	if l.cfg.HeldOutTask {
		if fp := l.m.Fingerprint(); l.held.m != fp {
			l.held = heldOut{m: fp, rest: map[string]records.Evidence{}}
		}
	}
	byGroup := map[int]PredictJob{}
	for k, j := range jobs {
		g := ro.groups[j.g]
		base, ok := byGroup[j.g]
		if !ok {
			base = PredictJob{Query: rwm.Query{Task: g.state.Task, Evidence: l.m}}
			// An unmeasured task has no record in M: M is M without it,
			// and its history holds predictions only.
			if l.cfg.HeldOutTask && !l.core.unmeasured[g.state.Task.ID] {
				rest := l.withoutTask(g.state.Task.ID)
				ev, err := rest.AddReal(g.state.History...)
				if err != nil {
					// A history record is real and of the state's task; an
					// invalid one is a broken pool, and M without the
					// task alone is the best evidence left.
					ev = rest
				}
				base = PredictJob{Query: rwm.Query{Task: g.state.Task, Evidence: ev}, PinTask: g.state.Task.ID, Pin: rest}
			}
			byGroup[j.g] = base
		}
		base.Query.Proposal = g.samples[j.i].Proposal
		out[k] = base
	}
	return out
}

// withoutTask returns M without the records of task id, built once per M.
func (l *Loop) withoutTask(id string) records.Evidence {
	if rest, ok := l.held.rest[id]; ok {
		return rest
	}
	rest := l.m.WithoutTask(id)
	l.held.rest[id] = rest
	return rest
}

// Score shapes the rewards of the batch gs from preds, the answers to
// Ready(gs...).Predict in order, made under the current M: τ_e per task
// over the batch's valid predicted gains, the shaped rewards, dynamic
// sampling (Config.Quota) and the kept groups' advantages (METHOD.md §1
// Reward and Policy optimisation). A batch whose groups are all flat is no
// error: every group has Kept false. The groups join the calibration
// candidates (their samples' tokens dropped), the newest Config.Candidates
// kept, and the batch becomes the one Expand adds to the pool and WMRL
// anchors; anchor runs still pending for an earlier batch are dropped. An
// error (a wrong number of predictions, a world-model error that is not
// about one proposal) leaves the loop unchanged.
func (l *Loop) Score(gs []Group, preds []Prediction) (Scored, error) {
	ro := groupsOf(gs)
	jobs := ro.predictionJobs()
	if len(preds) != len(jobs) {
		return Scored{}, fmt.Errorf("loop: score: %d predictions for %d queries", len(preds), len(jobs))
	}
	for k, j := range jobs {
		g := ro.groups[j.g]
		s := &g.samples[j.i]
		if err := acceptPrediction(s, preds[k].Prediction, preds[k].Err); err != nil {
			return Scored{}, fmt.Errorf("loop: score: predict %s: %w", realrun.OnTask(s.Proposal, g.state.Task), err)
		}
	}
	l.core.shape(ro)
	b := &scoredBatch{ro: ro, rep: ro.report(), epoch: l.calDone}
	kept, dr := l.core.keep(ro)
	b.kept, b.rep.Kept, b.rep.Flat = kept, dr.Kept, dr.Flat
	l.batch, l.plan = b, nil
	out := l.scored(b, nil, 1)
	for _, g := range ro.groups {
		c := &group{state: g.state, tau: g.tau, samples: append([]sample(nil), g.samples...)}
		for i := range c.samples {
			c.samples[i].Tokens, c.samples[i].LogProbs = nil, nil
			if c.samples[i].measurable() {
				c.samples[i].change = c.changeKey(&c.samples[i])
			}
		}
		l.since.groups = append(l.since.groups, c)
	}
	if drop := len(l.since.groups) - l.cfg.Candidates; drop > 0 {
		l.since.groups = append([]*group(nil), l.since.groups[drop:]...)
	}
	return out, nil
}

// scored returns what the batch's groups score now, the anchor groups'
// advantages scaled by weight.
func (l *Loop) scored(b *scoredBatch, anchor map[int]bool, weight float64) Scored {
	out := Scored{Groups: make([]ScoredGroup, len(b.ro.groups)), Report: b.rep}
	isKept := map[int]bool{}
	for _, k := range b.kept {
		isKept[k] = true
	}
	for gi, g := range b.ro.groups {
		n := len(g.samples)
		sg := ScoredGroup{Rewards: g.rewards(), Tau: g.tau, Kept: isKept[gi], Advantages: make([]float64, n),
			Gains: make([]float64, n), Valid: make([]bool, n), Reasons: make([]string, n)}
		if sg.Kept {
			w := 1.0
			if anchor[gi] {
				w = weight
			}
			sg.Advantages = l.core.advantages(g, w)
		}
		for i, s := range g.samples {
			sg.Gains[i], sg.Valid[i] = fin(s.gain), s.valid()
			sg.Reasons[i] = s.pred.Reason
			if s.Invalid {
				sg.Reasons[i] = s.Reason
			}
		}
		out.Groups[gi] = sg
	}
	return out
}

// Expand adds the last scored batch's predicted samples to the state pool
// as synthetic records stamped now (METHOD.md §1 Synthetic state
// expansion), once per batch: a driver calls it when the batch is final
// (after its anchor runs, before training on it). No-change proposals are
// valid but unpredicted: no record.
func (l *Loop) Expand(now time.Time) error {
	b := l.batch
	if b == nil || b.expanded {
		return nil
	}
	b.expanded = true
	if err := l.pool.Add(b.ro.synthetic(now)...); err != nil {
		return fmt.Errorf("loop: synthetic expansion: %w", err)
	}
	return nil
}

// Observe takes the driver's step (updates done; a smaller one than the
// loop's is ignored) and, when no runs are pending, decides what must run
// for real at the loop's step (the step of a calibration picked or anchors
// drawn is the loop's step):
//
//   - the calibration point due (at most one per step; never under
//     Static): without a trigger the first point not yet executed whose
//     scheduled step is at most the step (a driver's step may jump over a
//     point), with Config.Trigger the next point when the trigger fires or
//     its deadline passes. Its runs are the greedy top-B_u of the
//     candidates by r(s, a; M_u) (or B_u drawn uniformly with the loop's
//     source under RandomCalibration), changes already in M left out
//     unless DuplicateRuns; the candidates are handed to it (METHOD.md §1
//     On-policy calibration);
//   - else, under WMRL, the anchor groups of the last scored batch if it
//     was scored under the current M, keeps a group and has none yet:
//     AnchorCount(kept) groups drawn among the kept ones with the loop's
//     source, each distinct change run once (METHOD.md §2).
//
// Ready then names the runs; Absorb takes them back.
func (l *Loop) Observe(step int) {
	if step > l.step {
		l.step = step
	}
	if l.cal != nil || l.plan != nil {
		return
	}
	if u, budget, why, ok := l.due(); ok {
		ro := &rolloutData{groups: l.since.groups}
		l.since = rolloutData{}
		l.cal = &calInFlight{u: u, budget: budget, at: l.step, why: why, ro: ro,
			picks: l.core.calibrationPicks(ro, l.m, budget, l.rng)}
		return
	}
	if b := l.batch; b != nil && !b.anchored && b.epoch == l.calDone && len(b.kept) > 0 {
		l.plan = l.core.corr.anchors(b.ro, b.kept, l.rng)
	}
}

// due returns the schedule point u, budget B_u and reason of a calibration
// due at the loop's step and not yet executed (never under Static, never
// twice at one step).
func (l *Loop) due() (u, budget int, reason string, ok bool) {
	if l.cfg.Calibration == Static || l.last.Step >= l.step {
		return 0, 0, "", false
	}
	var m *calibrate.Monitors
	if l.last.Step >= 0 {
		mon := calibrate.Monitor(l.last.Predicted, l.last.Real)
		m = &mon
	}
	return calibrationDue(l.cfg.Schedule, l.cfg.Trigger, l.step, l.calDone, l.last.Step, m)
}

// Absorb takes the runs Ready named, in job order.
//
// A calibration's runs are accounted, its report made on the picks'
// predictions under M_u, and their records added to M (M_{u+1}, METHOD.md
// §1 On-policy calibration) and to the pool; a batch scored before is
// then stale (predictions under M_u): score it again for the segment's new
// reward function r(·; M_{u+1}). Groups scored while the runs went stay
// candidates of the next point.
//
// Anchor runs reshape the anchor groups' rewards from the real gains,
// refit WMRL's debiaser and weighter, add the real records to the pool,
// and return the batch scored again with the anchor groups' advantages
// weighted (METHOD.md §2).
//
// A wrong number of runs is an error that changes nothing, the runs still
// pending. An error after M was extended leaves M extended (the records
// were paid for) and the calibration done.
func (l *Loop) Absorb(runs []RealRun) (Absorbed, error) {
	switch {
	case l.cal != nil:
		cr, err := l.absorbCalibration(runs)
		if err != nil && l.calDone != l.cal.u+1 {
			return Absorbed{}, err
		}
		l.cal = nil
		return Absorbed{Calibration: &cr}, err
	case l.plan != nil:
		return l.absorbAnchors(runs)
	}
	return Absorbed{}, fmt.Errorf("loop: absorb: no runs pending")
}

func (l *Loop) absorbCalibration(runs []RealRun) (CalibrationReport, error) {
	c := l.cal
	if len(runs) != len(c.picks) {
		return CalibrationReport{}, fmt.Errorf("loop: calibration at step %d: %d runs for %d jobs", c.at, len(runs), len(c.picks))
	}
	l.account(runs)
	cr := l.core.calibrationReport(c.ro, c.at, c.budget, c.picks, runs)
	cr.Trigger = c.why
	m, err := l.m.Add(cr.Records...)
	if err != nil {
		return cr, fmt.Errorf("loop: calibration at step %d: %w", c.at, err)
	}
	l.m = m
	l.calDone = c.u + 1
	l.last = lastCalibration{Step: c.at, Predicted: cr.Predicted, Real: cr.Real}
	if err := l.pool.Add(cr.Records...); err != nil {
		return cr, fmt.Errorf("loop: calibration at step %d: %w", c.at, err)
	}
	return cr, nil
}

func (l *Loop) absorbAnchors(runs []RealRun) (Absorbed, error) {
	b, plan := l.batch, l.plan
	if len(runs) != len(plan.jobs) {
		return Absorbed{}, fmt.Errorf("loop: anchor groups: %d runs for %d jobs", len(runs), len(plan.jobs))
	}
	l.account(runs)
	l.plan, b.anchored = nil, true
	ar, real := l.core.corr.absorb(b.ro, plan, runs)
	b.rep.Anchors = &ar
	sc := l.scored(b, plan.set, ar.Weight)
	out := Absorbed{Anchors: &ar, Scored: &sc}
	if err := l.pool.Add(real...); err != nil {
		return out, fmt.Errorf("loop: anchor records: %w", err)
	}
	return out, nil
}

// account adds the cost of the runs that reached the executor, in job
// order, so that the sums are the same bit for bit whatever the order of
// completion.
func (l *Loop) account(runs []RealRun) {
	for _, r := range runs {
		switch {
		case r.Ran && !r.Reused:
			l.cost = l.cost.Add(r.Cost)
			l.runs++
		case r.Ran:
			l.reused++
		}
	}
}

// Status returns the loop's state.
func (l *Loop) Status() Status {
	return Status{Step: l.step, Calibrations: l.calDone, Calibrating: l.cal != nil, Evidence: l.m, Pool: l.pool,
		Candidates: len(l.since.groups), Cost: l.cost, Runs: l.runs, Reused: l.reused}
}

// Share returns the mechanism shares of the candidates' samples (METHOD.md
// §1 On-policy calibration, case study).
func (l *Loop) Share() []calibrate.Share { return l.since.report().Share }
