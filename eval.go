package lm2lm

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// EvalConfig parameterises Evaluate (METHOD.md §1 Data and evaluation).
type EvalConfig struct {
	// StatesPerTask is the number of research states drawn per evaluated
	// task; default 4 (library choice: METHOD.md §1 gives 60 AR and 18
	// diffusion states over its held-out tasks).
	StatesPerTask int
	// K is the number of proposals per state, each executed for real;
	// default 4 (Avg@4, Best@4).
	K int
	// MaxHistory is the longest history drawn for a state from the pool;
	// default records.MaxHistory (a state's history length is then
	// uniform on 0..8 once the pool holds 8 records of its task).
	MaxHistory int
	// Parallel bounds concurrent real runs; default 2 (library choice).
	Parallel int
	// Seed fixes the states and the proposals' random sources, so every
	// policy evaluated with one seed (and the same pool) sees the same
	// states; default 1 (library choice).
	Seed uint64
	// Seeds are the run seeds of the samples: sample k of the i-th state
	// of a task runs with Seeds[(i+k) mod len(Seeds)], so the K
	// samples of a state are K measurements with distinct seeds when
	// K ≤ len(Seeds), and a proposal drawn twice is measured twice. The
	// executor pairs each run with the reference run of its seed (the lab
	// does, for its reference seeds). nil = the builder's seed for every
	// sample, so duplicates are one measurement (library default: only the
	// host knows which seeds its executor has references for).
	Seeds []uint64
	// Clip is c: an infeasible run counts in Avg@K and Best@K as a gain of
	// −c σ_e, the reward rule's −c (METHOD.md §1 Reward 2). Default 6.
	Clip float64
	// World, when set, predicts the gain of every valid sample with
	// Evidence in context, for SampleEval.Predicted (pairwise accuracy and
	// predicted-vs-real charts of the same samples). nil = no predictions.
	World    rwm.WorldModel
	Evidence records.Evidence
	// WithHistory: World also reads the real records of each state's own
	// history, after Evidence (records.Evidence.AddReal), as
	// baseline.RerankConfig.History does: its judgement of an unseen task
	// once it has seen that task's records. Default false: Evidence alone.
	WithHistory bool
}

// DefaultEvalConfig returns 4 states per task, 4 proposals per state.
func DefaultEvalConfig() EvalConfig {
	return EvalConfig{StatesPerTask: 4, K: 4, MaxHistory: records.MaxHistory, Parallel: 2, Seed: 1, Clip: 6}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c EvalConfig) Validate() error {
	switch {
	case c.StatesPerTask < 1:
		return fmt.Errorf("%w: StatesPerTask = %d, want ≥ 1", ErrConfig, c.StatesPerTask)
	case c.K < 1:
		return fmt.Errorf("%w: K = %d, want ≥ 1", ErrConfig, c.K)
	case c.MaxHistory < 0 || c.MaxHistory > records.MaxHistory:
		return fmt.Errorf("%w: MaxHistory = %d, want 0..%d", ErrConfig, c.MaxHistory, records.MaxHistory)
	case c.Parallel < 1:
		return fmt.Errorf("%w: Parallel = %d, want ≥ 1", ErrConfig, c.Parallel)
	case !(c.Clip > 0) || math.IsInf(c.Clip, 1):
		return fmt.Errorf("%w: Clip = %g, want finite and > 0", ErrConfig, c.Clip)
	}
	return nil
}

// SampleEval is one of a state's K samples and its real outcome, as plain
// values: statistics over an evaluation (evalstat) are pure functions of
// these.
type SampleEval struct {
	Task   string // task ID
	Family string
	State  int    // index of the state in EvalReport.States
	Index  int    // k: the sample's index within its state
	Key    string // the proposal's canonical key ("" when invalid)
	Seed   uint64 // the run's seed (0 when nothing was built)
	// Invalid: the sample could not be parsed into a proposal; it was not
	// run and counts in no average.
	Invalid bool
	// Measured: a real record was obtained, feasible or infeasible. A
	// valid sample that is not measured failed for reasons other than the
	// proposal (EvalReport.Failures) and counts in no average.
	Measured bool
	Feasible bool
	// Gain is the real gain in σ_e units: (b_e − ℓ)/σ_e when feasible,
	// −Clip when infeasible, NaN when not measured.
	Gain float64
	// Predicted is EvalConfig.World's predicted gain in σ_e units (−Clip
	// when it judged the proposal invalid); NaN without a world model or
	// for an invalid sample.
	Predicted float64
	// Reused: the executor served the outcome from its store or a
	// coalesced twin (builder.Outcome.Reused); the run was paid for before.
	Reused bool
}

// StateEval is the real outcome of the K proposals for one state.
type StateEval struct {
	State records.State
	// Samples holds the K samples in sampling order.
	Samples []SampleEval
	// Records holds one real record per proposal that was measured
	// (feasible or infeasible), in sampling order.
	Records []records.Record
	// Avg and Best are the mean and the maximum of the measured samples'
	// Gain in σ_e units, an infeasible run counting −Clip; NaN when none
	// was measured. AvgFeasible is the mean over the feasible ones alone;
	// NaN when none was feasible.
	Avg, Best, AvgFeasible float64
}

// EvalReport summarises an evaluation. Gains are in units of each task's
// σ_e so that tasks of different metrics can be averaged (METHOD.md §1
// Headline results: seed-normalised gains); Family holds the same in the
// metric's own units per family.
//
// Avg@K semantics: a state's Avg is the mean of its measured samples' gains
// with an infeasible run at −c σ_e (the reward rule's −c, EvalConfig.Clip),
// Best the maximum, and AvgK / BestK their means over states with at least
// one measured sample. AvgKFeasible is the mean over states of the
// feasible-only average, the number earlier reports called Avg@K. Each
// sample is its own measurement with its own seed (EvalConfig.Seeds).
type EvalReport struct {
	States []StateEval
	// AvgK and BestK are the means over states of Avg@K and Best@K, in σ_e
	// units, over states with at least one measured sample.
	AvgK, BestK float64
	// AvgKFeasible is the mean over states with a feasible sample of their
	// feasible-only average.
	AvgKFeasible float64
	// NegativeRate is the fraction of measured proposals with gain ≤ 0;
	// an infeasible proposal counts as negative (library choice: it cost a
	// run and improved nothing).
	NegativeRate float64
	// Above2Sigma is the fraction of measured proposals with gain > 2σ_e.
	Above2Sigma float64
	// InfeasibleRate is the fraction of measured proposals that were
	// infeasible.
	InfeasibleRate float64
	// Invalid counts sampled proposals that could not be parsed (never run).
	Invalid int
	// Family breaks AvgK and BestK down by family, in metric units.
	Family []FamilyEval
	// Runs counts the executions paid for by this evaluation (failed ones
	// included) and Cost sums their cost; Reused counts the measurements
	// the executor served from its store or a coalesced twin
	// (builder.Outcome.Reused), whose cost was paid before.
	Cost   records.Cost
	Runs   int
	Reused int
	// Failures lists the valid proposals that produced no record (a build
	// or run failure that was not the proposal's fault), one "task key:
	// reason" line each; they are left out of every rate.
	Failures []string
}

// Samples returns every state's samples in report order.
func (r EvalReport) Samples() []SampleEval {
	var out []SampleEval
	for _, s := range r.States {
		out = append(out, s.Samples...)
	}
	return out
}

// FamilyEval is Avg@K and Best@K of one family in its metric's units.
type FamilyEval struct {
	Family     string
	Metric     records.Metric
	States     int     // states with at least one measured sample (the averages' denominator)
	Avg, Best  float64 // metric units (b_e − ℓ; an infeasible run at −c σ_e)
	AvgSigma   float64 // σ_e units
	BestSigma  float64
	Infeasible int
}

// Evaluate draws StatesPerTask research states of each task, samples K
// proposals per state from p and executes every valid one for real
// (METHOD.md §1 Data and evaluation). pool supplies the states' histories
// (nil = empty histories); for honest states it holds real records of the
// evaluated tasks themselves, measured once before and counted by the host
// as evaluation cost. State i of task t is drawn with its own random
// stream, a function of cfg.Seed, t's ID and i alone: its history (length
// uniform on 0..min(MaxHistory, records of t in pool)) and then its K
// proposals. Every policy evaluated with the same seed, tasks and pool
// therefore sees the same states, whatever the other tasks of the list.
func Evaluate(ctx context.Context, cfg EvalConfig, p proposer.Proposer, b builder.Builder, e builder.Executor, tasks []records.Task, pool *records.Pool) (EvalReport, error) {
	if err := cfg.Validate(); err != nil {
		return EvalReport{}, err
	}
	states, samples, err := evalStates(ctx, cfg, p, tasks, pool)
	if err != nil {
		return EvalReport{}, err
	}
	jobs, at := evalJobs(cfg, states, samples)
	runs, err := realrun.MeasureAll(ctx, b, e, cfg.Parallel, jobs)
	if err != nil {
		return EvalReport{}, fmt.Errorf("lm2lm: evaluate: %w", err)
	}
	byState := make([][]realRun, len(states))
	for si := range states {
		byState[si] = make([]realRun, len(samples[si]))
	}
	for j, r := range runs {
		byState[at[j][0]][at[j][1]] = r
	}
	preds, err := predictAll(ctx, cfg, states, samples)
	if err != nil {
		return EvalReport{}, err
	}
	return summarise(cfg.Clip, states, samples, byState, preds), nil
}

// evalJobs returns the changes of the states' valid samples to measure for
// real, in state and sampling order, each with its seed when cfg.Seeds is
// set, and at[j], the state and sample of job j.
func evalJobs(cfg EvalConfig, states []StateEval, samples [][]proposer.Sample) (jobs []seededChange, at [][2]int) {
	for si, smp := range samples {
		for k, x := range smp {
			if !x.Invalid {
				c := seededChange{TaskChange: records.TaskChange{Task: states[si].State.Task, Proposal: x.Proposal}}
				if len(cfg.Seeds) > 0 {
					c.Seed, c.SetSeed = cfg.Seeds[(si%cfg.StatesPerTask+k)%len(cfg.Seeds)], true
				}
				jobs = append(jobs, c)
				at = append(at, [2]int{si, k})
			}
		}
	}
	return jobs, at
}

// EvalRuns returns the runs Evaluate with the same arguments would
// measure for real, in the order it measures them, without running any:
// the valid samples of its states, each with its seed when cfg.Seeds is
// set (else the builder's), and how many samples were invalid (never
// run). It asks p as Evaluate does, so for a proposer whose samples depend
// on the states' random streams alone (proposer.NewPolicy, untrained) the
// runs are exactly those Evaluate measures; for a server they are one
// sampling of it, not a promise.
func EvalRuns(ctx context.Context, cfg EvalConfig, p proposer.Proposer, tasks []records.Task, pool *records.Pool) ([]loop.RunJob, int, error) {
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	states, samples, err := evalStates(ctx, cfg, p, tasks, pool)
	if err != nil {
		return nil, 0, err
	}
	jobs, _ := evalJobs(cfg, states, samples)
	out := make([]loop.RunJob, len(jobs))
	for i, j := range jobs {
		out[i] = loop.RunJob{Change: j.TaskChange, Seed: j.Seed, SetSeed: j.SetSeed}
	}
	invalid := -len(jobs)
	for _, smp := range samples {
		invalid += len(smp)
	}
	return out, invalid, nil
}

// stateStream returns the random source of the i-th state of task id.
func stateStream(seed uint64, id string, i int) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d", id, i)
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// evalStates draws the evaluation's states, StatesPerTask per task in task
// order, and K proposals for each, each state from its own stream.
func evalStates(ctx context.Context, cfg EvalConfig, p proposer.Proposer, tasks []records.Task, pool *records.Pool) ([]StateEval, [][]proposer.Sample, error) {
	if pool == nil {
		pool = &records.Pool{}
	}
	var states []StateEval
	var samples [][]proposer.Sample
	for _, t := range tasks {
		for i := 0; i < cfg.StatesPerTask; i++ {
			rng := stateStream(cfg.Seed, t.ID, i)
			s := pool.Sample(rng, t, cfg.MaxHistory)
			smp, err := p.Propose(ctx, s, cfg.K, rng)
			if err != nil {
				return nil, nil, fmt.Errorf("lm2lm: evaluate: propose for %s: %w", t.ID, err)
			}
			states = append(states, StateEval{State: s})
			samples = append(samples, smp)
		}
	}
	return states, samples, nil
}

// predictAll returns cfg.World's predicted gain in σ_e units of every
// valid sample (NaN elsewhere), or nil without a world model.
func predictAll(ctx context.Context, cfg EvalConfig, states []StateEval, samples [][]proposer.Sample) ([][]float64, error) {
	if cfg.World == nil {
		return nil, nil
	}
	out := make([][]float64, len(states))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(cfg.Parallel)
	for si, smp := range samples {
		out[si] = make([]float64, len(smp))
		task := states[si].State.Task
		ev := cfg.Evidence
		if cfg.WithHistory {
			var err error
			if ev, err = ev.AddReal(states[si].State.History...); err != nil {
				return nil, fmt.Errorf("lm2lm: evaluate: history of a state of %s: %w", task.ID, err)
			}
		}
		for k, x := range smp {
			out[si][k] = math.NaN()
			if x.Invalid {
				continue
			}
			eg.Go(func() error {
				pr, err := cfg.World.Predict(ectx, rwm.Query{Task: task, Proposal: x.Proposal, Evidence: ev})
				if err != nil {
					return fmt.Errorf("lm2lm: evaluate: predict %s: %w", onTask(x.Proposal, task), err)
				}
				out[si][k] = -cfg.Clip
				if pr.Valid {
					out[si][k] = pr.Gain / task.SeedNoise
				}
				return nil
			})
		}
	}
	return out, eg.Wait()
}
