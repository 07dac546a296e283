package probe

import (
	"math"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/records"
)

// Reference is one reference rank of the judgement diagnostic, read from
// the landscape alone (no method, no budget): where a ranking of the
// mechanisms puts each evaluated task's best one, averaged over the tasks
// of a part. The references bound what the diagnostic can show: "other
// seed" ranks by one seed's runs the best of the other seed's (how
// reproducible a task's need is); "nearest task" ranks by the landscape of
// the evaluated task nearest in its descriptors (standardised over the
// evaluated tasks, Euclidean; the task itself left out); "region mean"
// and "split mean" rank by the mean landscape of the other evaluated tasks
// of the task's region, and of all of them: what pays on average on this
// split, known exactly, blind to the task.
type Reference struct {
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
	RefOtherSeed  = "other seed"
	RefNearest    = "nearest task"
	RefRegionMean = "region mean"
	RefSplitMean  = "split mean"
)

// refs is References' state: the admitted tasks (sorted), their regions
// and standardised descriptors, and the sums of each (reference, part).
type refs struct {
	land   *landscape.Landscape
	tasks  []string
	region func(string) string
	z      map[string][]float64
	accs   map[[2]string]*refAcc
}

type refAcc struct {
	n         int
	rank, ch  float64
	ref, part string
}

// References computes the references over the landscape's tasks that
// eval admits (the comparison's evaluation tasks), for all of them (part
// "all") and by region (region, "" for none), ordered by reference, then
// part (order, then name). A reference with nothing to rank a task by (a
// region of one task, a task run with one seed) leaves that task out. nil
// without a landscape or an admitted task.
func References(land *landscape.Landscape, eval func(records.Task) bool, region func(task string) string, order func(part string) int) []Reference {
	if land == nil {
		return nil
	}
	r := &refs{land: land, region: region, accs: map[[2]string]*refAcc{}}
	for id, t := range land.Tasks {
		if eval(t) && len(land.Gains[id]) > 0 {
			r.tasks = append(r.tasks, id)
		}
	}
	if len(r.tasks) == 0 {
		return nil
	}
	slices.Sort(r.tasks)
	r.z = standardise(land, r.tasks)
	for _, t := range r.tasks {
		if a, b := land.BySeed[0][t], land.BySeed[1][t]; len(a) > 0 && len(b) > 0 {
			// Both directions: each seed ranks the other's best.
			r.add(RefOtherSeed, t, a, b)
			r.add(RefOtherSeed, t, b, a)
		}
		if s := r.nearest(t); s != nil {
			r.add(RefNearest, t, s, land.Gains[t])
		}
		if len(r.tasks) > 1 {
			r.add(RefRegionMean, t, r.mean(t, true), land.Gains[t])
			r.add(RefSplitMean, t, r.mean(t, false), land.Gains[t])
		}
	}
	return r.rows(order)
}

// mean is the mean landscape of the admitted tasks other than task (of
// its region alone when same).
func (r *refs) mean(task string, same bool) map[string]float64 {
	sum, n := map[string]float64{}, map[string]int{}
	for _, o := range r.tasks {
		if o == task || (same && r.region(o) != r.region(task)) {
			continue
		}
		for m, g := range r.land.Gains[o] {
			sum[m] += g
			n[m]++
		}
	}
	for m := range sum {
		sum[m] /= float64(n[m])
	}
	return sum
}

// nearest is the landscape of the admitted task nearest to task in its
// standardised descriptors (the smallest ID wins a tie); nil for none.
func (r *refs) nearest(task string) map[string]float64 {
	best, bd := "", math.Inf(1)
	for _, o := range r.tasks { // sorted: the smallest ID wins a tie
		if o == task {
			continue
		}
		if d := sqDist(r.z[task], r.z[o]); d < bd {
			best, bd = o, d
		}
	}
	if best == "" {
		return nil
	}
	return r.land.Gains[best]
}

// add counts the rank by score of task's best mechanism under gains, in
// part "all" and in task's region.
func (r *refs) add(ref, task string, score, gains map[string]float64) {
	if len(score) == 0 || len(gains) == 0 {
		return
	}
	rank := evalstat.BestRank(score, gains, math.Inf(-1))
	for _, part := range []string{"all", r.region(task)} {
		if part == "" {
			continue
		}
		k := [2]string{ref, part}
		a := r.accs[k]
		if a == nil {
			a = &refAcc{ref: ref, part: part}
			r.accs[k] = a
		}
		a.n++
		a.rank += rank
		a.ch += float64(len(gains)+1) / 2
	}
}

// rows averages the sums, in References' order.
func (r *refs) rows(order func(part string) int) []Reference {
	names := []string{RefOtherSeed, RefNearest, RefRegionMean, RefSplitMean}
	var out []Reference
	for _, a := range r.accs {
		n := float64(a.n)
		out = append(out, Reference{Reference: a.ref, Part: a.part, Tasks: a.n, BestRank: a.rank / n, ChanceRank: a.ch / n})
	}
	slices.SortFunc(out, func(x, y Reference) int {
		if d := slices.Index(names, x.Reference) - slices.Index(names, y.Reference); d != 0 {
			return d
		}
		if d := order(x.Part) - order(y.Part); d != 0 {
			return d
		}
		return strings.Compare(x.Part, y.Part)
	})
	// The other-seed reference counts each task twice (both directions).
	for i := range out {
		if out[i].Reference == RefOtherSeed {
			out[i].Tasks /= 2
		}
	}
	return out
}

// standardise returns each task's descriptors as z-scores over tasks (a
// descriptor a task lacks counts 0; one constant over the tasks is left
// out), by descriptor name in sorted order.
func standardise(land *landscape.Landscape, tasks []string) map[string][]float64 {
	var names []string
	for _, t := range tasks {
		for k := range land.Tasks[t].Descriptors {
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
			v := land.Tasks[t].Descriptors[k]
			mu += v
			sq += v * v
		}
		mu /= n
		sd := math.Sqrt(math.Max(sq/n-mu*mu, 0))
		if !(sd > 1e-12) {
			continue
		}
		for _, t := range tasks {
			out[t] = append(out[t], (land.Tasks[t].Descriptors[k]-mu)/sd)
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
