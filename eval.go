package lm2lm

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// EvalConfig parameterises Evaluate (METHOD.md §1 Data and evaluation).
type EvalConfig struct {
	// StatesPerTask is the number of research states drawn per held-out
	// task; default 4 (library choice: METHOD.md §1 gives 60 AR and 18
	// diffusion states over its held-out tasks).
	StatesPerTask int
	// K is the number of proposals per state, each executed for real;
	// default 4 (Avg@4, Best@4).
	K int
	// MaxHistory is the longest history drawn for a state from the pool;
	// default records.MaxHistory.
	MaxHistory int
	// Parallel bounds concurrent real runs; default 2 (library choice).
	Parallel int
	// Seed fixes the states and the proposals' random source, so two
	// policies evaluated with one seed see the same states; default 1
	// (library choice).
	Seed uint64
}

// DefaultEvalConfig returns 4 states per task, 4 proposals per state.
func DefaultEvalConfig() EvalConfig {
	return EvalConfig{StatesPerTask: 4, K: 4, MaxHistory: records.MaxHistory, Parallel: 2, Seed: 1}
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
	}
	return nil
}

// StateEval is the real outcome of the K proposals for one state.
type StateEval struct {
	State records.State
	// Records holds one real record per proposal that was measured
	// (feasible or infeasible), in sampling order.
	Records []records.Record
	// Avg and Best are the mean and the maximum gain of the feasible
	// proposals in σ_e units; NaN when none was feasible.
	Avg, Best float64
}

// EvalReport summarises an evaluation. Gains are in units of each task's
// σ_e so that tasks of different metrics can be averaged (METHOD.md §1
// Headline results: seed-normalised gains); Family holds the same in the
// metric's own units per family.
type EvalReport struct {
	States []StateEval
	// AvgK and BestK are the means over states of Avg@K and Best@K, in σ_e
	// units, over states with at least one feasible proposal.
	AvgK, BestK float64
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
	// Cost sums the real runs; Runs counts them (every executor call,
	// including failed ones).
	Cost records.Cost
	Runs int
	// Failures lists the valid proposals that produced no record (a build
	// or run failure that was not the proposal's fault), one "task key:
	// reason" line each; they are left out of every rate.
	Failures []string
}

// FamilyEval is Avg@K and Best@K of one family in its metric's units.
type FamilyEval struct {
	Family     string
	Metric     records.Metric
	States     int     // states with at least one feasible proposal (the averages' denominator)
	Avg, Best  float64 // metric units (b_e − ℓ)
	AvgSigma   float64 // σ_e units
	BestSigma  float64
	Infeasible int
}

// Evaluate draws StatesPerTask research states of each task, samples K
// proposals per state from p and executes every one for real (METHOD.md §1
// Data and evaluation). pool supplies histories (nil = empty histories).
func Evaluate(ctx context.Context, cfg EvalConfig, p proposer.Proposer, b builder.Builder, e builder.Executor, tasks []records.Task, pool *records.Pool) (EvalReport, error) {
	if err := cfg.Validate(); err != nil {
		return EvalReport{}, err
	}
	states, samples, err := evalStates(ctx, cfg, p, tasks, pool)
	if err != nil {
		return EvalReport{}, err
	}
	var jobs []records.TaskChange
	var at []ref // at[j]: the state and sample of job j
	for si, smp := range samples {
		for k, x := range smp {
			if !x.Invalid {
				jobs = append(jobs, records.TaskChange{Task: states[si].State.Task, Proposal: x.Proposal})
				at = append(at, ref{si, k})
			}
		}
	}
	runs, err := runAll(ctx, b, e, cfg.Parallel, jobs)
	if err != nil {
		return EvalReport{}, fmt.Errorf("lm2lm: evaluate: %w", err)
	}
	byState := make([][]realRun, len(states))
	for si := range states {
		byState[si] = make([]realRun, len(samples[si]))
	}
	for j, r := range runs {
		byState[at[j].g][at[j].i] = r
	}
	return summarise(states, samples, byState), nil
}

// evalStates draws the evaluation's states, StatesPerTask per task in task
// order, and K proposals for each, with the random source of cfg.Seed.
func evalStates(ctx context.Context, cfg EvalConfig, p proposer.Proposer, tasks []records.Task, pool *records.Pool) ([]StateEval, [][]proposer.Sample, error) {
	if pool == nil {
		pool = &records.Pool{}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6576616c))
	var states []StateEval
	var samples [][]proposer.Sample
	for _, t := range tasks {
		for i := 0; i < cfg.StatesPerTask; i++ {
			s := pool.Sample(rng, t, cfg.MaxHistory)
			srng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			smp, err := p.Propose(ctx, s, cfg.K, srng)
			if err != nil {
				return nil, nil, fmt.Errorf("lm2lm: evaluate: propose for %s: %w", t.ID, err)
			}
			states = append(states, StateEval{State: s})
			samples = append(samples, smp)
		}
	}
	return states, samples, nil
}

// evalTally accumulates an evaluation's counts and sums.
type evalTally struct {
	measured, neg, above, infeasible int
	sumAvg, sumBest                  float64
	nAvg                             int
	fam                              map[string]*famTally
}

// famTally accumulates one family's sums.
type famTally struct {
	metric                         records.Metric
	states, infeasible             int
	avg, best, avgSigma, bestSigma float64
}

// summarise turns the real runs of each state's samples into the report
// (pure).
func summarise(states []StateEval, samples [][]proposer.Sample, runs [][]realRun) EvalReport {
	var rep EvalReport
	tl := evalTally{fam: map[string]*famTally{}}
	for si := range states {
		tl.state(&rep, &states[si], samples[si], runs[si])
	}
	rep.States = states
	rep.AvgK, rep.BestK = math.NaN(), math.NaN()
	if tl.nAvg > 0 {
		rep.AvgK, rep.BestK = tl.sumAvg/float64(tl.nAvg), tl.sumBest/float64(tl.nAvg)
	}
	if tl.measured > 0 {
		rep.NegativeRate = float64(tl.neg) / float64(tl.measured)
		rep.Above2Sigma = float64(tl.above) / float64(tl.measured)
		rep.InfeasibleRate = float64(tl.infeasible) / float64(tl.measured)
	}
	names := make([]string, 0, len(tl.fam))
	for n := range tl.fam {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := tl.fam[n]
		fe := FamilyEval{Family: n, Metric: f.metric, States: f.states, Infeasible: f.infeasible,
			Avg: math.NaN(), Best: math.NaN(), AvgSigma: math.NaN(), BestSigma: math.NaN()}
		if f.states > 0 {
			d := float64(f.states)
			fe.Avg, fe.Best, fe.AvgSigma, fe.BestSigma = f.avg/d, f.best/d, f.avgSigma/d, f.bestSigma/d
		}
		rep.Family = append(rep.Family, fe)
	}
	return rep
}

// state adds one state's runs: its Records, Avg and Best, the report's
// runs, cost, invalid samples and failures, and the tallies.
func (tl *evalTally) state(rep *EvalReport, st *StateEval, samples []proposer.Sample, runs []realRun) {
	st.Avg, st.Best = math.NaN(), math.NaN()
	sigma := st.State.Task.SeedNoise
	var sum, best float64
	n := 0
	for k, run := range runs {
		if run.ran {
			rep.Runs++
			rep.Cost = rep.Cost.Add(run.cost)
		}
		if !run.measured {
			if samples[k].Invalid {
				rep.Invalid++
			} else {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s %s: %s", st.State.Task.ID, samples[k].Proposal.Key(), run.failure))
			}
			continue
		}
		r := run.rec
		st.Records = append(st.Records, r)
		tl.measured++
		if r.Infeasible != "" {
			tl.infeasible++
			tl.neg++
			continue
		}
		g := r.Gain / sigma
		if r.Gain <= 0 {
			tl.neg++
		}
		if g > 2 {
			tl.above++
		}
		if n == 0 || g > best {
			best = g
		}
		sum += g
		n++
	}
	f := tl.fam[st.State.Task.Family]
	if f == nil {
		f = &famTally{metric: st.State.Task.Metric}
		tl.fam[st.State.Task.Family] = f
	}
	f.infeasible += len(st.Records) - n
	if n == 0 {
		return
	}
	st.Avg, st.Best = sum/float64(n), best
	tl.sumAvg += st.Avg
	tl.sumBest += st.Best
	tl.nAvg++
	f.states++
	f.avgSigma += st.Avg
	f.bestSigma += st.Best
	f.avg += st.Avg * sigma
	f.best += st.Best * sigma
}

// WinRate returns the fraction of states where a's Avg beats b's, over the
// states both measured (METHOD.md §1 Data and evaluation: win rate vs Base
// per state). a and b must come from Evaluate with the same seed, tasks,
// StatesPerTask, MaxHistory and pool contents, so that their states match;
// states at one index whose tasks differ are skipped. A tie counts half.
func WinRate(a, b EvalReport) float64 {
	n, w := 0, 0.0
	for i := range a.States {
		if i >= len(b.States) {
			break
		}
		x, y := a.States[i].Avg, b.States[i].Avg
		if math.IsNaN(x) || math.IsNaN(y) || a.States[i].State.Task.ID != b.States[i].State.Task.ID {
			continue
		}
		n++
		switch {
		case x > y:
			w++
		case x == y:
			w += 0.5
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return w / float64(n)
}
