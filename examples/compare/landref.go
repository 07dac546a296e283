package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/records"
)

// landscape returns the store's landscape, nil for no store.
func (st *landStore) landscape() landscape {
	if st == nil {
		return nil
	}
	return st.gains
}

// JudgementRef is one reference rank of the judgement diagnostic, read
// from the landscape alone (no method, no budget): where a ranking of the
// mechanisms puts each evaluated task's best one, averaged over the tasks
// of a part. The references bound what the diagnostic can show: "other
// seed" ranks by one seed's runs the best of the other seed's (how
// reproducible a task's need is); "nearest task" ranks by the landscape of
// the evaluated task nearest in its descriptors (standardised over the
// evaluated tasks, Euclidean; the task itself left out); "region mean"
// and "split mean" rank by the mean landscape of the other evaluated tasks
// of the task's region, and of all of them: what pays on average on this
// split, known exactly, blind to the task.
type JudgementRef struct {
	Reference string `json:"reference"`
	Part      string `json:"part"`
	// Tasks is the number of evaluated tasks ranked.
	Tasks int `json:"tasks"`
	// BestRank is the mean rank of each task's best mechanism
	// (evalstat.BestRank; a mechanism the ranking never saw ranks last);
	// ChanceRank the mean (n+1)/2 of a ranking blind to the task.
	BestRank   float64 `json:"best_rank"`
	ChanceRank float64 `json:"chance_rank"`
}

// The references' names, in table order.
const (
	refOtherSeed  = "other seed"
	refNearest    = "nearest task"
	refRegionMean = "region mean"
	refSplitMean  = "split mean"
)

// landscapeRefs computes the references (JudgementRef) over the
// landscape's tasks that eval admits (the comparison's evaluation tasks),
// for all of them (part "all") and by region (stratumOf), parts in
// partName order. A reference with nothing to rank a task by (a region of
// one task, a task run with one seed) leaves that task out. nil without a
// store or an admitted task.
func landscapeRefs(suite string, st *landStore, eval func(records.Task) bool) []JudgementRef {
	if st == nil {
		return nil
	}
	var tasks []string
	for id, t := range st.tasks {
		if eval(t) && len(st.gains[id]) > 0 {
			tasks = append(tasks, id)
		}
	}
	if len(tasks) == 0 {
		return nil
	}
	slices.Sort(tasks)
	region := func(id string) string { return stratumOf(suite, id) }
	z := standardise(st, tasks)
	mean := func(task string, same bool) map[string]float64 {
		sum, n := map[string]float64{}, map[string]int{}
		for _, o := range tasks {
			if o == task || (same && region(o) != region(task)) {
				continue
			}
			for m, g := range st.gains[o] {
				sum[m] += g
				n[m]++
			}
		}
		for m := range sum {
			sum[m] /= float64(n[m])
		}
		return sum
	}
	nearest := func(task string) map[string]float64 {
		best, bd := "", math.Inf(1)
		for _, o := range tasks { // sorted: the smallest ID wins a tie
			if o == task {
				continue
			}
			if d := sqDist(z[task], z[o]); d < bd {
				best, bd = o, d
			}
		}
		if best == "" {
			return nil
		}
		return st.gains[best]
	}
	type acc struct {
		n         int
		rank, ch  float64
		ref, part string
	}
	accs := map[[2]string]*acc{}
	add := func(ref, task string, score, gains map[string]float64) {
		if len(score) == 0 || len(gains) == 0 {
			return
		}
		r := evalstat.BestRank(score, gains, math.Inf(-1))
		for _, part := range []string{"all", region(task)} {
			if part == "" {
				continue
			}
			k := [2]string{ref, part}
			a := accs[k]
			if a == nil {
				a = &acc{ref: ref, part: part}
				accs[k] = a
			}
			a.n++
			a.rank += r
			a.ch += float64(len(gains)+1) / 2
		}
	}
	for _, t := range tasks {
		if a, b := st.bySeed[0][t], st.bySeed[1][t]; len(a) > 0 && len(b) > 0 {
			// Both directions: each seed ranks the other's best.
			add(refOtherSeed, t, a, b)
			add(refOtherSeed, t, b, a)
		}
		if s := nearest(t); s != nil {
			add(refNearest, t, s, st.gains[t])
		}
		if len(tasks) > 1 {
			add(refRegionMean, t, mean(t, true), st.gains[t])
			add(refSplitMean, t, mean(t, false), st.gains[t])
		}
	}
	refs := []string{refOtherSeed, refNearest, refRegionMean, refSplitMean}
	var out []JudgementRef
	for _, a := range accs {
		n := float64(a.n)
		out = append(out, JudgementRef{Reference: a.ref, Part: a.part, Tasks: a.n, BestRank: a.rank / n, ChanceRank: a.ch / n})
	}
	slices.SortFunc(out, func(x, y JudgementRef) int {
		if d := slices.Index(refs, x.Reference) - slices.Index(refs, y.Reference); d != 0 {
			return d
		}
		if d := partOrder(x.Part) - partOrder(y.Part); d != 0 {
			return d
		}
		return strings.Compare(x.Part, y.Part)
	})
	// The other-seed reference counts each task twice (both directions).
	for i := range out {
		if out[i].Reference == refOtherSeed {
			out[i].Tasks /= 2
		}
	}
	return out
}

// standardise returns each task's descriptors as z-scores over tasks (a
// descriptor a task lacks counts 0; one constant over the tasks is left
// out), by descriptor name in sorted order.
func standardise(st *landStore, tasks []string) map[string][]float64 {
	var names []string
	for _, t := range tasks {
		for k := range st.tasks[t].Descriptors {
			if !slices.Contains(names, k) {
				names = append(names, k)
			}
		}
	}
	slices.Sort(names)
	out := make(map[string][]float64, len(tasks))
	n := float64(len(tasks))
	for _, k := range names {
		mu, sq := 0.0, 0.0
		for _, t := range tasks {
			v := st.tasks[t].Descriptors[k]
			mu += v
			sq += v * v
		}
		mu /= n
		sd := math.Sqrt(math.Max(sq/n-mu*mu, 0))
		if !(sd > 1e-12) {
			continue
		}
		for _, t := range tasks {
			out[t] = append(out[t], (st.tasks[t].Descriptors[k]-mu)/sd)
		}
	}
	return out
}

// sqDist is the squared Euclidean distance of two equal-length vectors.
func sqDist(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		x := a[i] - b[i]
		d += x * x
	}
	return d
}

// judgementRefTable writes the references (none without -landscape).
func judgementRefTable(b *strings.Builder, refs []JudgementRef) {
	if len(refs) == 0 {
		return
	}
	b.WriteString("\nJudgement references (the landscape itself, no method): the rank of each task's best mechanism by one seed's runs against the other seed's best (how reproducible a task's need is), by the landscape of the evaluated task nearest in its descriptors, and by the mean landscape of the other evaluated tasks of its region and of all of them (what pays on average, blind to the task).\n\n")
	b.WriteString("| reference | part | tasks | best's rank (chance) |\n|---|---|---|---|\n")
	for _, r := range refs {
		fmt.Fprintf(b, "| %s | %s | %d | %.1f (%.1f) |\n", r.Reference, r.Part, r.Tasks, r.BestRank, r.ChanceRank)
	}
}
