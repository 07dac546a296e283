package lm2lm

import (
	"math"
	"sort"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// evalTally accumulates an evaluation's counts and sums.
type evalTally struct {
	clip                             float64
	measured, neg, above, infeasible int
	sumAvg, sumBest, sumFeas         float64
	nAvg, nFeas                      int
	fam                              map[string]*famTally
}

// famTally accumulates one family's sums.
type famTally struct {
	metric                         records.Metric
	states, infeasible             int
	avg, best, avgSigma, bestSigma float64
}

// summarise turns the real runs of each state's samples (and their
// predictions, nil = none) into the report (pure).
func summarise(clip float64, states []StateEval, samples [][]proposer.Sample, runs [][]realRun, preds [][]float64) EvalReport {
	var rep EvalReport
	tl := evalTally{clip: clip, fam: map[string]*famTally{}}
	for si := range states {
		var pr []float64
		if preds != nil {
			pr = preds[si]
		}
		tl.state(&rep, si, &states[si], samples[si], runs[si], pr)
	}
	rep.States = states
	rep.AvgK, rep.BestK, rep.AvgKFeasible = math.NaN(), math.NaN(), math.NaN()
	if tl.nAvg > 0 {
		rep.AvgK, rep.BestK = tl.sumAvg/float64(tl.nAvg), tl.sumBest/float64(tl.nAvg)
	}
	if tl.nFeas > 0 {
		rep.AvgKFeasible = tl.sumFeas / float64(tl.nFeas)
	}
	if tl.measured > 0 {
		rep.NegativeRate = float64(tl.neg) / float64(tl.measured)
		rep.Above2Sigma = float64(tl.above) / float64(tl.measured)
		rep.InfeasibleRate = float64(tl.infeasible) / float64(tl.measured)
	}
	rep.Family = tl.families()
	return rep
}

// families returns the per-family averages, sorted by family.
func (tl *evalTally) families() []FamilyEval {
	names := make([]string, 0, len(tl.fam))
	for n := range tl.fam {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []FamilyEval
	for _, n := range names {
		f := tl.fam[n]
		fe := FamilyEval{Family: n, Metric: f.metric, States: f.states, Infeasible: f.infeasible,
			Avg: math.NaN(), Best: math.NaN(), AvgSigma: math.NaN(), BestSigma: math.NaN()}
		if f.states > 0 {
			d := float64(f.states)
			fe.Avg, fe.Best, fe.AvgSigma, fe.BestSigma = f.avg/d, f.best/d, f.avgSigma/d, f.bestSigma/d
		}
		out = append(out, fe)
	}
	return out
}

// sample returns the plain value of sample k of state si and counts its
// run in rep's runs, cost and reuse.
func (tl *evalTally) sample(rep *EvalReport, si, k int, st *StateEval, smp proposer.Sample, run realRun, pred float64) SampleEval {
	t := st.State.Task
	x := SampleEval{Task: t.ID, Family: t.Family, State: si, Index: k, Seed: run.Seed, Invalid: smp.Invalid,
		Gain: math.NaN(), Predicted: pred, Reused: run.Ran && run.Reused}
	if !smp.Invalid {
		x.Key = smp.Proposal.Key()
	}
	switch {
	case run.Fresh():
		rep.Runs++
		rep.Cost = rep.Cost.Add(run.Cost)
	case run.Ran:
		rep.Reused++
	}
	if !run.Measured {
		return x
	}
	x.Measured, x.Feasible = true, run.Rec.Infeasible == ""
	x.Gain = -tl.clip
	if x.Feasible {
		x.Gain = run.Rec.Gain / t.SeedNoise
	}
	return x
}

// state adds one state's runs: its Samples, Records, Avg, Best and
// AvgFeasible, the report's runs, cost, invalid samples and failures, and
// the tallies.
func (tl *evalTally) state(rep *EvalReport, si int, st *StateEval, samples []proposer.Sample, runs []realRun, preds []float64) {
	st.Avg, st.Best, st.AvgFeasible = math.NaN(), math.NaN(), math.NaN()
	var sum, best, sumFeas float64
	n, nFeas := 0, 0
	for k, run := range runs {
		pred := math.NaN()
		if preds != nil {
			pred = preds[k]
		}
		x := tl.sample(rep, si, k, st, samples[k], run, pred)
		st.Samples = append(st.Samples, x)
		if !x.Measured {
			if x.Invalid {
				rep.Invalid++
			} else {
				rep.Failures = append(rep.Failures, keyOnTask(x.Key, x.Task)+": "+run.Failure)
			}
			continue
		}
		st.Records = append(st.Records, run.Rec)
		tl.measured++
		switch {
		case !x.Feasible:
			tl.infeasible++
			tl.neg++
		case run.Rec.Gain <= 0:
			tl.neg++
		case x.Gain > 2:
			tl.above++
		}
		if x.Feasible {
			sumFeas += x.Gain
			nFeas++
		}
		if n == 0 || x.Gain > best {
			best = x.Gain
		}
		sum += x.Gain
		n++
	}
	if nFeas > 0 {
		st.AvgFeasible = sumFeas / float64(nFeas)
		tl.sumFeas += st.AvgFeasible
		tl.nFeas++
	}
	tl.addState(st, n, nFeas, sum, best)
}

// addState adds a state's Avg and Best (over n measured samples, nFeas of
// them feasible) to the report's and its family's sums.
func (tl *evalTally) addState(st *StateEval, n, nFeas int, sum, best float64) {
	f := tl.fam[st.State.Task.Family]
	if f == nil {
		f = &famTally{metric: st.State.Task.Metric}
		tl.fam[st.State.Task.Family] = f
	}
	f.infeasible += n - nFeas
	if n == 0 {
		return
	}
	sigma := st.State.Task.SeedNoise
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
