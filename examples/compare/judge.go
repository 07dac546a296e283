package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// landscape is, per test task, each mechanism's best measured gain in σ_e
// units: what the judgement diagnostic calls the state's needs.
type landscape map[string]map[string]float64

// landStore is a landscape store as compare reads it once: the landscape
// the diagnostic judges against, and what its references need
// (landscapeRefs).
type landStore struct {
	// gains is each task's landscape over all its seeds.
	gains landscape
	// bySeed holds each task's landscape from its first and from its
	// second seed's runs alone (seeds in increasing order); a task run
	// with one seed is in neither.
	bySeed [2]landscape
	// tasks is each task as its records name it (family, split,
	// descriptors).
	tasks map[string]records.Task
}

// loadLandscape reads a landscape store (examples/sweep -landscape -suite
// SPLIT -store FILE), read only: every catalogue change run on every task
// of the split. A proposal's gain is its mean over the seeds run, an
// infeasible run counting infeasibleGain; a mechanism's gain is its best
// proposal's. The landscapes of the first and second seeds alone are
// built the same way from their own runs.
func loadLandscape(ctx context.Context, path string) (*landStore, error) {
	s, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("-landscape: %w", err)
	}
	defer s.Close()
	rs, err := s.Scan(ctx, records.Filter{Source: records.Real})
	if err != nil {
		return nil, fmt.Errorf("-landscape: %w", err)
	}
	type run struct {
		seed uint64
		gain float64
	}
	type acc struct {
		mech string
		runs []run
	}
	byKey := map[string]map[string]*acc{}
	st := &landStore{gains: landscape{}, bySeed: [2]landscape{{}, {}}, tasks: map[string]records.Task{}}
	seeds := map[string][]uint64{}
	for _, r := range rs {
		g := infeasibleGain
		if r.Infeasible == "" {
			if !(r.Task.SeedNoise > 0) {
				continue
			}
			g = r.Gain / r.Task.SeedNoise
		}
		m := byKey[r.Task.ID]
		if m == nil {
			m = map[string]*acc{}
			byKey[r.Task.ID] = m
			st.tasks[r.Task.ID] = r.Task
		}
		a := m[r.Proposal.Key()]
		if a == nil {
			a = &acc{mech: records.CanonicalName(r.Proposal.Mechanism)}
			m[r.Proposal.Key()] = a
		}
		var seed uint64
		if len(r.Seeds) > 0 {
			seed = r.Seeds[0]
		}
		a.runs = append(a.runs, run{seed, g})
		if !slices.Contains(seeds[r.Task.ID], seed) {
			seeds[r.Task.ID] = append(seeds[r.Task.ID], seed)
		}
	}
	// put keeps a mechanism's best proposal.
	put := func(l landscape, task, mech string, g float64) {
		best := l[task]
		if best == nil {
			best = map[string]float64{}
			l[task] = best
		}
		if b, ok := best[mech]; !ok || g > b {
			best[mech] = g
		}
	}
	for task, m := range byKey {
		ss := seeds[task]
		slices.Sort(ss)
		for _, a := range m {
			sum := 0.0
			for _, r := range a.runs {
				sum += r.gain
			}
			put(st.gains, task, a.mech, sum/float64(len(a.runs)))
			if len(ss) < 2 {
				continue
			}
			for i := range st.bySeed {
				sum, n := 0.0, 0
				for _, r := range a.runs {
					if r.seed == ss[i] {
						sum += r.gain
						n++
					}
				}
				if n > 0 {
					put(st.bySeed[i], task, a.mech, sum/float64(n))
				}
			}
		}
	}
	if len(st.gains) == 0 {
		return nil, fmt.Errorf("-landscape: %s holds no real run", path)
	}
	return st, nil
}

// judge returns the judgement diagnostic (evalstat.JudgeRegions) of one
// evaluation: per evaluated state on a task of the landscape, the
// method's distribution over mechanisms there and the task's mechanism
// gains. A method that samples from pol (Base, SFT, RFT, LM2LM without
// test-time rerank) has its exact card probabilities at the evaluation
// temperature; any other (the rerank, best-known changes) the share of
// each mechanism among its K proposals. nil without a landscape or when
// no evaluated task is in it.
func judge(suite string, land landscape, ev lm2lm.EvalReport, prop proposer.Proposer, pol *proposer.Policy) ([]evalstat.Judgement, error) {
	if land == nil {
		return nil, nil
	}
	exact := prop == proposer.Proposer(pol)
	var mechs []string
	if exact {
		for _, m := range pol.Mechanisms() {
			mechs = append(mechs, records.CanonicalName(m))
		}
	}
	var states []evalstat.Judged
	for _, st := range ev.States {
		gains, ok := land[st.State.Task.ID]
		if !ok {
			continue
		}
		p := map[string]float64{}
		if exact {
			for i, x := range pol.CardProbs(st.State) {
				m := records.NoChange
				if i < len(mechs) {
					m = mechs[i]
				}
				p[m] += x
			}
		} else {
			n := 0
			for _, smp := range st.Samples {
				if smp.Key != "" {
					n++
				}
			}
			for _, smp := range st.Samples {
				if smp.Key != "" {
					mech, _, _ := strings.Cut(smp.Key, "{")
					p[records.CanonicalName(mech)] += 1 / float64(n)
				}
			}
			if n == 0 {
				continue
			}
		}
		states = append(states, evalstat.Judged{Region: stratumOf(suite, st.State.Task.ID), Policy: p, Gains: gains})
	}
	if len(states) == 0 {
		return nil, nil
	}
	return evalstat.JudgeRegions(states)
}

// JudgementRow is one method's judgement diagnostic in one part, averaged
// over its seeds.
type JudgementRow struct {
	Method, Part                         string
	Seeds, States                        int
	BestRank, ChanceRank, BestMass       float64
	PolicySpread, BestSpread, Dependence float64
}

// judgementRows averages each method's per-seed judgements by part ("all"
// first, then the parts in partName order), methods in row order within a
// part.
func judgementRows(rs []Result) []JudgementRow {
	type key struct{ method, part string }
	acc := map[key]*JudgementRow{}
	var order []key
	dep := map[key]int{}
	for _, r := range rs {
		for _, j := range r.Judgement {
			part := j.Region
			if part == "" {
				part = "all"
			}
			k := key{r.Method, part}
			a := acc[k]
			if a == nil {
				a = &JudgementRow{Method: r.Method, Part: part}
				acc[k] = a
				order = append(order, k)
			}
			a.Seeds++
			a.States += j.States
			a.BestRank += j.BestRank
			a.ChanceRank += j.ChanceRank
			a.BestMass += j.BestMass
			a.PolicySpread += j.PolicySpread
			a.BestSpread += j.BestSpread
			if !math.IsNaN(j.Dependence) {
				a.Dependence += j.Dependence
				dep[k]++
			}
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if d := partOrder(a.part) - partOrder(b.part); d != 0 {
			return d
		}
		return methods[a.method].order - methods[b.method].order
	})
	var out []JudgementRow
	for _, k := range order {
		a := *acc[k]
		n := float64(a.Seeds)
		a.BestRank, a.ChanceRank, a.BestMass = a.BestRank/n, a.ChanceRank/n, a.BestMass/n
		a.PolicySpread, a.BestSpread = a.PolicySpread/n, a.BestSpread/n
		if dep[k] > 0 {
			a.Dependence /= float64(dep[k])
		} else {
			a.Dependence = math.NaN()
		}
		out = append(out, a)
	}
	return out
}

// partOrder orders the judgement's parts: "all" first, then the regions
// in partName order.
func partOrder(part string) int {
	if part == "all" {
		return -1
	}
	_, r := partName(part)
	return r
}

// judgementTable writes the judgement rows (none without -landscape).
func judgementTable(b *strings.Builder, rows []JudgementRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nJudgement (mechanisms; means over seeds): the rank of each state's best mechanism under the method (chance: a ranking blind to the state), the probability it puts there, the spread of its choices across states (mean total variation) against the spread of the best mechanisms (share of state pairs whose best differ), and their ratio (0: blind to the state).\n\n")
	b.WriteString("| method | part | states | best's rank (chance) | best's probability | spread of choices | spread of bests | dependence |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		dep := "–"
		if !math.IsNaN(r.Dependence) {
			dep = fmt.Sprintf("%.2f", r.Dependence)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.1f (%.1f) | %.3f | %.3f | %.3f | %s |\n", r.Method, r.Part, r.States, r.BestRank, r.ChanceRank,
			r.BestMass, r.PolicySpread, r.BestSpread, dep)
	}
}
