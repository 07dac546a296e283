package lm2lm

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Need says what a Loop needs next (Ready.Need).
type Need int

const (
	// NeedNothing: Config.Steps updates are done.
	NeedNothing Need = iota
	// NeedSamples: sample Ready.Propose; answer Answer.Samples.
	NeedSamples
	// NeedPredictions: ask the world model Ready.Predict; answer
	// Answer.Predictions.
	NeedPredictions
	// NeedRuns: execute Ready.Execute for real; answer Answer.Runs.
	NeedRuns
	// NeedUpdate: apply the DAPO mini-batch Ready.Batch to the policy;
	// answer Answer.Stats (and Answer.Now when Ready.Stamp is set).
	NeedUpdate
)

func (n Need) String() string {
	switch n {
	case NeedNothing:
		return "nothing"
	case NeedSamples:
		return "samples"
	case NeedPredictions:
		return "predictions"
	case NeedRuns:
		return "runs"
	case NeedUpdate:
		return "update"
	}
	return fmt.Sprintf("Need(%d)", int(n))
}

// ProposeJob asks for N samples of State from the policy, drawn with
// rand.New(rand.NewPCG(Seed[0], Seed[1])): one derived source per state
// keeps the samples independent of how many states came before.
type ProposeJob struct {
	State records.State
	N     int
	Seed  [2]uint64
}

// Rand returns the job's random source.
func (j ProposeJob) Rand() *rand.Rand { return rand.New(rand.NewPCG(j.Seed[0], j.Seed[1])) }

// PredictJob is one world-model query. Under Config.HeldOutTask, PinTask
// names the state's task and Pin is M without that task's records: a
// world model that implements rwm.Pinner is pinned on Pin (once per task
// and M; Ready.Evidence changes when M does) and asked Query with the
// pinned configuration. Otherwise PinTask is "".
type PredictJob struct {
	Query   rwm.Query
	PinTask string
	Pin     records.Evidence
}

// Prediction is the world model's answer to one PredictJob: a prediction
// or the error Predict returned (rwm.ErrBadPrediction and
// records.ErrInvalid score the proposal as invalid; any other error fails
// the step, Answer.Err being the idiomatic place for it).
type Prediction struct {
	Prediction rwm.Prediction
	Err        error
}

// RunJob is one change to build and run for real. When SetSeed is set the
// job's seed is replaced by Seed (WMRL's anchor runs use the builder's).
type RunJob struct {
	Change  records.TaskChange
	Seed    uint64
	SetSeed bool
}

// RealRun is the result of one attempt to measure a RunJob: Record when
// Measured (feasible or infeasible), else Failure says why. Ran reports
// the executor was called, Reused that it served a stored or coalesced
// outcome (nothing paid); Cost is what the run reported. RunRealJob
// computes it with a Builder and an Executor.
type RealRun struct {
	Record   records.Record
	Measured bool
	Ran      bool
	Reused   bool
	Seed     uint64
	Cost     records.Cost
	Failure  string
}

// internalRun is r as the core's realRun.
func internalRun(r RealRun) realRun {
	return realRun{Rec: r.Record, Measured: r.Measured, Ran: r.Ran, Reused: r.Reused, Seed: r.Seed, Cost: r.Cost, Failure: r.Failure}
}

// exportedRun is the core's r as a RealRun.
func exportedRun(r realRun) RealRun {
	return RealRun{Record: r.Rec, Measured: r.Measured, Ran: r.Ran, Reused: r.Reused, Seed: r.Seed, Cost: r.Cost, Failure: r.Failure}
}

// Ready is what the loop needs next. Exactly the slice that Need names is
// set. The slices belong to the caller.
type Ready struct {
	Need Need
	// Step is the update being made: updates done + 1.
	Step    int
	Propose []ProposeJob
	Predict []PredictJob
	Execute []RunJob
	// Calibration is set with NeedRuns when the runs are a calibration
	// point's (else they are WMRL's anchor runs).
	Calibration bool
	Batch       []proposer.Item
	// Stamp is set with NeedUpdate when the update also adds the
	// rollout's synthetic records to the pool, stamped Answer.Now.
	Stamp bool
}

// Answer is the caller's reply to the last Ready. Err reports a failure
// of the machinery (cancellation, a world model or executor error): the
// step is abandoned and retried from its start by the next Ready (a
// calibration whose records joined M is not executed again; an update
// failure keeps its mini-batch). Runs that completed before the failure
// may still be given with Err, so that their cost is counted.
type Answer struct {
	Samples     [][]proposer.Sample
	Predictions []Prediction
	Runs        []RealRun
	Stats       proposer.Stats
	Now         time.Time
	Err         error
}

// phase is where the loop is inside a step.
type phase int

const (
	phaseIdle phase = iota
	phaseSamples
	phasePredict
	phaseCalibrate
	phaseAnchors
	phaseUpdate
)

// Loop is LM2LM's training loop (METHOD.md §1, with WMRL's corrections of
// §2) as a pure state machine, in the shape of etcd raft's RawNode: it
// owns the evidence M, the state pool, the step, the random source, the
// calibration state and WMRL's state, and tells its driver what it needs
// next (Ready): states to sample, predictions to make, real runs to
// execute, a DAPO mini-batch to apply. The driver does the I/O and hands
// the answers back (Advance). A Loop does no I/O, starts no goroutines and
// reads no clock; given the same answers it takes the same decisions, bit
// for bit. Trainer is one driver over it; the environment service (package
// serve) is another, through ScoreGroups and Calibrate.
//
// A Loop is not safe for concurrent use.
type Loop struct {
	cfg   Config
	tasks []records.Task
	// unmeasured are the tasks no real run measures (WithUnmeasured).
	unmeasured []records.Task
	// deferred: calibrations may complete after their step
	// (WithDeferredCalibration).
	deferred bool
	src      *rand.PCG
	rng      *rand.Rand
	m        records.Evidence
	pool     *records.Pool
	step     int

	batches [][]proposer.Item // the current rollout's mini-batches
	core    core              // the pure planning functions (core.go)
	// calDone is the number of schedule points already executed.
	calDone int
	// pendingCal is the report of a calibration whose step has not
	// completed yet; it is attached to the step that completes.
	pendingCal *CalibrationReport
	// last is the last calibration (what the trigger reads); step −1
	// before any.
	last lastCalibration
	// held is what HeldOutTask derives from the current M.
	held heldOut

	cost   records.Cost
	runs   int
	reused int

	// The step in flight.
	ph      phase
	states  []records.State
	seeds   [][2]uint64
	ro      *rolloutData
	rescore bool // the predictions asked are the rescoring after a calibration
	cal     calInFlight
	rep     RolloutReport
	kept    []int
	plan    *anchorPlan
	stamp   bool // the rollout's synthetic records are yet to join the pool

	// since holds the groups scored by ScoreGroups since the last
	// calibration (the service's candidates).
	since rolloutData
}

// calInFlight is the calibration being executed.
type calInFlight struct {
	u, budget int
	at        int // the step the point was picked at
	why       string
	picks     []ref
}

// A LoopOption adds to what NewLoop is given.
type LoopOption func(*loopOptions)

type loopOptions struct {
	unmeasured []records.Task
	deferred   bool
}

// WithDeferredCalibration lets calibrations complete after their
// scheduled step: an outside trainer (the environment service) goes on
// stepping while a calibration's runs go, so a checkpoint may hold a step
// past a point whose records are not yet in M. The Trainer, whose
// calibration runs inside its step, does not need it.
func WithDeferredCalibration() LoopOption {
	return func(o *loopOptions) { o.deferred = true }
}

// WithUnmeasured adds training tasks that no real run measures: tasks
// without reference runs, whose b_e and σ_e the host estimates (the lab's
// lab.(*Lab).Unmeasured takes them from the measured tasks of the same
// family). Their states are drawn with those of the training tasks
// (uniformly over both) and rewarded by the world model alike, each
// judged on M as it stands (M holds none of their records); calibration
// never picks them, so no real run is asked of them. Beyond METHOD.md §1
// Synthetic state expansion, which grows the histories of the training
// tasks' states from the pool: these grow the tasks. A task's ID must not
// be a training task's or another's, M_0 must hold none of its records,
// and WMRL (whose anchor groups run real) refuses them: each is an error
// wrapping ErrConfig.
func WithUnmeasured(tasks ...records.Task) LoopOption {
	return func(o *loopOptions) { o.unmeasured = append(o.unmeasured, tasks...) }
}

// NewLoop returns a loop over the training tasks with M_0 = evidence and
// a state pool (nil: a pool of evidence's records), or an error wrapping
// ErrConfig. The loop keeps pool and adds to it.
func NewLoop(cfg Config, tasks []records.Task, evidence records.Evidence, pool *records.Pool, opts ...LoopOption) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%w: no training tasks", ErrConfig)
	}
	for _, t := range tasks {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	var o loopOptions
	for _, opt := range opts {
		opt(&o)
	}
	unmeasured, err := checkUnmeasured(cfg, tasks, evidence, o.unmeasured)
	if err != nil {
		return nil, err
	}
	if pool == nil {
		var err error
		if pool, err = records.NewPool(evidence.Records()...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	src := rand.NewPCG(cfg.Seed, 0x6c6d326c6d)
	l := &Loop{
		cfg:        cfg,
		tasks:      append([]records.Task(nil), tasks...),
		unmeasured: append([]records.Task(nil), o.unmeasured...), deferred: o.deferred,
		src:  src,
		rng:  rand.New(src),
		m:    evidence,
		pool: pool,
		last: lastCalibration{Step: -1},
	}
	l.core = core{cfg: cfg, corr: noCorrection{}, unmeasured: unmeasured}
	if cfg.WMRL != nil {
		w, err := newWMRL(*cfg.WMRL, cfg.Reward)
		if err != nil {
			return nil, err
		}
		l.core.corr = w
	}
	return l, nil
}

// checkUnmeasured checks the tasks of WithUnmeasured and returns their
// IDs as a set (nil when there are none).
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

// Config returns the loop's configuration.
func (l *Loop) Config() Config { return l.cfg }

// Tasks returns the training tasks.
func (l *Loop) Tasks() []records.Task { return append([]records.Task(nil), l.tasks...) }

// Unmeasured returns the unmeasured training tasks (WithUnmeasured).
func (l *Loop) Unmeasured() []records.Task { return append([]records.Task(nil), l.unmeasured...) }

// Evidence returns the current M (M_0 plus every calibration record).
func (l *Loop) Evidence() records.Evidence { return l.m }

// Pool returns the state pool.
func (l *Loop) Pool() *records.Pool { return l.pool }

// Step returns the number of updates done.
func (l *Loop) Step() int { return l.step }

// Calibrations returns the number of calibration points executed.
func (l *Loop) Calibrations() int { return l.calDone }

// Cost returns the summed cost and number of the real runs paid for
// (fresh executions), and the number of measurements served without a run.
func (l *Loop) Cost() (cost records.Cost, runs, reused int) { return l.cost, l.runs, l.reused }

// InStep reports whether a step is in flight (between the first Ready of
// a step and the Advance that completes or abandons it).
func (l *Loop) InStep() bool { return l.ph != phaseIdle }

// Ready returns what the loop needs next. Between steps it starts the next
// one: at a rollout boundary it draws the rollout's states and their
// sources from the loop's random source. Calling Ready again without an
// Advance returns the same need.
func (l *Loop) Ready() Ready {
	if l.ph == phaseIdle {
		if l.step >= l.cfg.Steps {
			return Ready{Need: NeedNothing, Step: l.step}
		}
		l.begin()
	}
	r := Ready{Step: l.step + 1}
	switch l.ph {
	case phaseSamples:
		r.Need = NeedSamples
		r.Propose = make([]ProposeJob, len(l.states))
		for i, s := range l.states {
			r.Propose[i] = ProposeJob{State: s, N: l.cfg.DAPO.GroupSize, Seed: l.seeds[i]}
		}
	case phasePredict:
		r.Need = NeedPredictions
		r.Predict = l.predictJobs(l.ro, l.ro.predictionJobs())
	case phaseCalibrate:
		r.Need, r.Calibration = NeedRuns, true
		for _, tc := range l.ro.changes(l.cal.picks) {
			r.Execute = append(r.Execute, RunJob{Change: tc})
		}
	case phaseAnchors:
		r.Need = NeedRuns
		for _, tc := range l.plan.jobs {
			r.Execute = append(r.Execute, RunJob{Change: tc})
		}
	case phaseUpdate:
		r.Need, r.Stamp = NeedUpdate, l.stamp
		r.Batch = append([]proposer.Item(nil), l.batches[0]...)
	}
	return r
}

// begin starts a step: a new rollout at a rollout boundary, else the next
// mini-batch of the current one.
func (l *Loop) begin() {
	if l.step%l.cfg.RolloutEvery != 0 && len(l.batches) > 0 {
		l.ph = phaseUpdate
		return
	}
	l.states = l.pool.States(l.rng, l.stateTasks(), l.cfg.States, l.cfg.MaxHistory)
	l.seeds = make([][2]uint64, len(l.states))
	for i := range l.seeds {
		l.seeds[i] = [2]uint64{l.rng.Uint64(), l.rng.Uint64()}
	}
	l.ph = phaseSamples
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
	var rs []records.Record
	for i := 0; i < l.m.Len(); i++ {
		if r := l.m.At(i); r.Task.ID != id {
			rs = append(rs, r)
		}
	}
	rest, _ := records.NewEvidence(rs...) // a subset of a valid M is valid
	l.held.rest[id] = rest
	return rest
}

// abandon ends the step in flight without completing it.
func (l *Loop) abandon() {
	l.ph, l.states, l.seeds, l.ro, l.rescore = phaseIdle, nil, nil, nil, false
	l.cal, l.rep, l.kept, l.plan, l.stamp = calInFlight{}, RolloutReport{}, nil, nil, false
}

// Advance takes the answer to the last Ready and moves the loop on. It
// returns the step's report and done = true when the answer completed a
// step (an update). On error, which is a.Err wrapped or the loop's own
// (ErrNoSignal for a rollout without signal), the step is abandoned and
// the next Ready retries it.
func (l *Loop) Advance(a Answer) (rep StepReport, done bool, err error) {
	switch l.ph {
	case phaseIdle:
		return rep, false, fmt.Errorf("lm2lm: Advance without a Ready")
	case phaseSamples:
		err = l.advanceSamples(a)
	case phasePredict:
		err = l.advancePredictions(a)
	case phaseCalibrate:
		err = l.advanceCalibration(a)
	case phaseAnchors:
		err = l.advanceAnchors(a)
	case phaseUpdate:
		return l.advanceUpdate(a)
	}
	if err != nil {
		l.abandon()
	}
	return rep, false, err
}

func (l *Loop) advanceSamples(a Answer) error {
	if a.Err != nil {
		return a.Err
	}
	if len(a.Samples) != len(l.states) {
		return fmt.Errorf("lm2lm: step %d: %d sample groups for %d states", l.step+1, len(a.Samples), len(l.states))
	}
	ro := &rolloutData{groups: make([]*group, len(l.states))}
	for i, s := range l.states {
		ro.groups[i] = newGroup(s, a.Samples[i])
	}
	l.ro, l.states, l.seeds, l.rescore, l.ph = ro, nil, nil, false, phasePredict
	return nil
}

func (l *Loop) advancePredictions(a Answer) error {
	if a.Err != nil {
		return a.Err
	}
	jobs := l.ro.predictionJobs()
	if len(a.Predictions) != len(jobs) {
		return fmt.Errorf("lm2lm: step %d: %d predictions for %d queries", l.step+1, len(a.Predictions), len(jobs))
	}
	for k, j := range jobs {
		g := l.ro.groups[j.g]
		s := &g.samples[j.i]
		if err := acceptPrediction(s, a.Predictions[k].Prediction, a.Predictions[k].Err); err != nil {
			return fmt.Errorf("lm2lm: step %d: predict %s: %w", l.step+1, onTask(s.Proposal, g.state.Task), err)
		}
	}
	l.core.shape(l.ro)
	if !l.rescore {
		if u, b, why, ok := l.due(); ok {
			l.cal = calInFlight{u: u, budget: b, at: l.step, why: why, picks: l.core.calibrationPicks(l.ro, l.m, b, l.rng)}
			l.ph = phaseCalibrate
			return nil
		}
	}
	return l.prepare()
}

// due returns the schedule point u, budget B_u and reason of a calibration
// due at the current step and not yet executed (never under Static).
func (l *Loop) due() (u, budget int, reason string, ok bool) {
	if l.cfg.Calibration == Static {
		return 0, 0, "", false
	}
	var m *calibrate.Monitors
	if l.last.Step >= 0 {
		mon := calibrate.Monitor(l.last.Predicted, l.last.Real)
		m = &mon
	}
	return calibrationDue(l.cfg.Schedule, l.cfg.Trigger, l.step, l.calDone, l.last.Step, m)
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

func internalRuns(rs []RealRun) []realRun {
	out := make([]realRun, len(rs))
	for i, r := range rs {
		out[i] = internalRun(r)
	}
	return out
}

func (l *Loop) advanceCalibration(a Answer) error {
	if a.Err != nil {
		l.account(a.Runs) // what reached the executor was paid for
		return fmt.Errorf("lm2lm: calibration at step %d: %w", l.step, a.Err)
	}
	u := l.cal.u
	cr, err := l.applyCalibration(a.Runs)
	if l.calDone == u+1 {
		// Its records are in M: report it with the step that completes,
		// even if this attempt failed after that.
		l.pendingCal = &cr
	}
	if err != nil {
		return err
	}
	// The segment after a calibration uses the new reward function
	// r(·; M_{u+1}) (METHOD.md §1 On-policy calibration).
	l.cal, l.rescore, l.ph = calInFlight{}, true, phasePredict
	return nil
}

// applyCalibration is the one calibration path of both drivers (the
// Trainer's Advance and an outside trainer's FinishCalibration): the runs of
// the calibration in flight, in job order, are accounted, their report made
// on the picks' predictions under M_u, and their records added to M (M_{u+1},
// METHOD.md §1 On-policy calibration) and to the pool. A wrong number of runs
// changes nothing; an error after M was extended leaves M extended (the
// records were paid for).
func (l *Loop) applyCalibration(runs []RealRun) (CalibrationReport, error) {
	if len(runs) != len(l.cal.picks) {
		return CalibrationReport{}, fmt.Errorf("lm2lm: calibration at step %d: %d runs for %d jobs", l.cal.at, len(runs), len(l.cal.picks))
	}
	l.account(runs)
	cr := l.core.calibrationReport(l.ro, l.cal.at, l.cal.budget, l.cal.picks, internalRuns(runs))
	cr.Trigger = l.cal.why
	m, err := l.m.Add(cr.Records...)
	if err != nil {
		return cr, fmt.Errorf("lm2lm: calibration at step %d: %w", l.cal.at, err)
	}
	l.m = m
	l.calDone = l.cal.u + 1
	l.last = lastCalibration{Step: l.cal.at, Predicted: cr.Predicted, Real: cr.Real}
	if err := l.pool.Add(cr.Records...); err != nil {
		return cr, fmt.Errorf("lm2lm: calibration at step %d: %w", l.cal.at, err)
	}
	return cr, nil
}

// prepare keeps the informative groups and lets the correction pick its
// anchor groups (METHOD.md §1 Policy optimisation).
func (l *Loop) prepare() error {
	l.rep = l.ro.report()
	kept, err := l.core.keep(l.ro, l.step+1, &l.rep)
	if err != nil {
		return err
	}
	l.kept = kept
	if plan := l.core.corr.anchors(l.ro, kept, l.rng); plan != nil {
		l.plan, l.ph = plan, phaseAnchors
		return nil
	}
	l.finishRollout(nil, 1)
	return nil
}

func (l *Loop) advanceAnchors(a Answer) error {
	l.account(a.Runs)
	if a.Err != nil {
		return fmt.Errorf("lm2lm: step %d: anchor groups: %w", l.step+1, a.Err)
	}
	if len(a.Runs) != len(l.plan.jobs) {
		return fmt.Errorf("lm2lm: step %d: anchor groups: %d runs for %d jobs", l.step+1, len(a.Runs), len(l.plan.jobs))
	}
	ar, real := l.core.corr.absorb(l.ro, l.plan, internalRuns(a.Runs))
	if err := l.pool.Add(real...); err != nil {
		return fmt.Errorf("lm2lm: step %d: anchor records: %w", l.step+1, err)
	}
	l.rep.Anchors = &ar
	l.finishRollout(l.plan.set, ar.Weight)
	return nil
}

// finishRollout computes the mini-batches; the synthetic records join the
// pool with the first update (Ready.Stamp).
func (l *Loop) finishRollout(anchor map[int]bool, weight float64) {
	l.batches = l.core.batches(l.ro, l.kept, anchor, weight)
	l.stamp, l.plan, l.kept, l.ph = true, nil, nil, phaseUpdate
}

func (l *Loop) advanceUpdate(a Answer) (StepReport, bool, error) {
	rep := StepReport{Step: l.step + 1}
	if l.stamp {
		// Synthetic state expansion (METHOD.md §1): whether or not the
		// update succeeds, as the rollout is scored.
		l.stamp = false
		if err := l.pool.Add(l.ro.synthetic(a.Now)...); err != nil {
			l.abandon()
			return rep, false, fmt.Errorf("lm2lm: step %d: synthetic expansion: %w", l.step+1, err)
		}
		rr := l.rep
		rep.Rollout = &rr
	}
	if a.Err != nil {
		// The mini-batch stays, so a retry updates on it.
		l.abandon()
		return StepReport{Step: l.step + 1}, false, fmt.Errorf("lm2lm: step %d: update: %w", l.step+1, a.Err)
	}
	l.batches = l.batches[1:]
	rep.Update = a.Stats
	rep.Calibration, l.pendingCal = l.pendingCal, nil
	l.step++
	l.abandon()
	return rep, true, nil
}
