package main

import (
	"math"

	"github.com/lm2lm/lm2lm/proposer"
)

// Fit measures how linear the advantages of world-model groups are in the
// real scores: within one group (one research state) the advantages are
// (g'_i − mean g')/τ_e with g' the (debiased) predicted score, so when the
// debiaser has recovered the distortion, A is an affine function of the
// real score s and R² = 1; under the distortion D it is affine in D(s).
// Groups that were anchored (executed for real) and groups with fewer than
// three distinct real scores are skipped; duplicates count once.
type Fit struct {
	Groups int     // groups measured
	MeanR2 float64 // mean R² of the per-group least-squares line A ~ s
}

// GroupR2 returns the R² of the least-squares line of a on s; ok is false
// with fewer than three distinct s values.
func GroupR2(s, a []float64) (float64, bool) {
	distinct := map[float64]bool{}
	for _, v := range s {
		distinct[v] = true
	}
	if len(distinct) < 3 {
		return 0, false
	}
	n := float64(len(s))
	var ms, ma float64
	for i := range s {
		ms, ma = ms+s[i]/n, ma+a[i]/n
	}
	var sss, saa, ssa float64
	for i := range s {
		sss += (s[i] - ms) * (s[i] - ms)
		saa += (a[i] - ma) * (a[i] - ma)
		ssa += (s[i] - ms) * (a[i] - ma)
	}
	if saa == 0 {
		return 0, true
	}
	return ssa * ssa / (sss * saa), true
}

// MeasureFit computes Fit over batches; score returns a sample's real
// score and anchored reports whether its group was executed.
func MeasureFit(batches [][]proposer.Item, score func(task, solution string) (float64, bool),
	anchored func(task, draw string) bool) Fit {
	var f Fit
	var sum float64
	for _, b := range batches {
		type grp struct {
			s, a []float64
			seen map[string]bool
		}
		groups := map[string]*grp{}
		var order []string
		for _, it := range b {
			task, draw := it.State.Task.ID, it.Sample.Proposal.Params["draw"]
			if anchored(task, draw) {
				continue
			}
			k := task + "/" + draw
			g, ok := groups[k]
			if !ok {
				g = &grp{seen: map[string]bool{}}
				groups[k] = g
				order = append(order, k)
			}
			name := it.Sample.Proposal.Mechanism
			sc, ok := score(task, name)
			if !ok || g.seen[name] {
				continue
			}
			g.seen[name] = true
			g.s, g.a = append(g.s, sc), append(g.a, it.Advantage)
		}
		for _, k := range order {
			if r2, ok := GroupR2(groups[k].s, groups[k].a); ok && !math.IsNaN(r2) {
				f.Groups++
				sum += r2
			}
		}
	}
	if f.Groups > 0 {
		f.MeanR2 = sum / float64(f.Groups)
	}
	return f
}
