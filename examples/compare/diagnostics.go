package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/examples/compare/internal/probe"
	"github.com/lm2lm/lm2lm/internal/stat"
)

// The report of the research probes (package probe) that ran beside the
// methods: the judgement against -landscape and its references, and each
// calibration's locality.

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

// judgementRefTable writes the references (none without -landscape).
func judgementRefTable(b *strings.Builder, refs []probe.Reference) {
	if len(refs) == 0 {
		return
	}
	b.WriteString("\nJudgement references (the landscape itself, no method): the rank of each task's best mechanism by one seed's runs against the other seed's best (how reproducible a task's need is), by the landscape of the evaluated task nearest in its descriptors, and by the mean landscape of the other evaluated tasks of its region and of all of them (what pays on average, blind to the task).\n\n")
	b.WriteString("| reference | part | tasks | best's rank (chance) |\n|---|---|---|---|\n")
	for _, r := range refs {
		fmt.Fprintf(b, "| %s | %s | %d | %.1f (%.1f) |\n", r.Reference, r.Part, r.Tasks, r.BestRank, r.ChanceRank)
	}
}

// LocalityRow is one calibrating method's locality, averaged over its
// calibrations and seeds: the mean absolute shift of each class, the gap
// on the calibrated records before and after them, and the probes'
// pairwise accuracy on the policy's own proposals before and after.
type LocalityRow struct {
	Method       string `json:"method"`
	Calibrations int    `json:"calibrations"`
	// Shift is the mean absolute shift of each class, probe.LocalityClasses
	// order (null: no pair of the class).
	Shift []*float64 `json:"mean_abs_shift"`
	// GapBefore and GapAfter are the calibrated records' mean gap;
	// AccuracyBefore and Accuracy the probes' pairwise accuracy, over
	// AccuracyProbes probes.
	GapBefore, GapAfter      *float64
	AccuracyBefore, Accuracy *float64
	AccuracyProbes           int `json:"accuracy_probes"`
}

// localityAcc sums one method's locality measurements.
type localityAcc struct {
	n              int
	shift          []float64
	shiftN         []int
	gb, ga, ab, aa float64
	gapN, accN     int
}

// add sums one result's calibrations and probes.
func (a *localityAcc) add(r Result) {
	for _, l := range r.Locality {
		a.n++
		for k, c := range l.Classes {
			if c.MeanAbsShift != nil && k < len(a.shift) {
				a.shift[k] += *c.MeanAbsShift
				a.shiftN[k]++
			}
		}
		if l.GapBefore != nil && l.GapAfter != nil {
			a.gb += *l.GapBefore
			a.ga += *l.GapAfter
			a.gapN++
		}
	}
	for _, p := range r.Probes {
		if p.AccuracyBefore != nil && p.Accuracy != nil {
			a.ab += *p.AccuracyBefore
			a.aa += *p.Accuracy
			a.accN++
		}
	}
}

// localityRows averages each method's locality measurements (methods
// without any are left out).
func localityRows(rs []Result) []LocalityRow {
	var order []string
	by := map[string]*localityAcc{}
	for _, r := range rs {
		if len(r.Locality) == 0 {
			continue
		}
		a := by[r.Method]
		if a == nil {
			a = &localityAcc{shift: make([]float64, len(probe.LocalityClasses)), shiftN: make([]int, len(probe.LocalityClasses))}
			by[r.Method] = a
			order = append(order, r.Method)
		}
		a.add(r)
	}
	var out []LocalityRow
	for _, m := range order {
		a := by[m]
		row := LocalityRow{Method: m, Calibrations: a.n, AccuracyProbes: a.accN,
			GapBefore: stat.OrNil(a.gb / float64(a.gapN)), GapAfter: stat.OrNil(a.ga / float64(a.gapN)),
			AccuracyBefore: stat.OrNil(a.ab / float64(a.accN)), Accuracy: stat.OrNil(a.aa / float64(a.accN))}
		for k := range a.shift {
			row.Shift = append(row.Shift, stat.OrNil(a.shift[k]/float64(a.shiftN[k])))
		}
		out = append(out, row)
	}
	return out
}

// localityTable writes the locality rows (none without calibrations).
func localityTable(b *strings.Builder, rows []LocalityRow) {
	if len(rows) == 0 {
		return
	}
	classes := probe.LocalityClasses
	b.WriteString("\nLocality of each calibration (means over calibrations and seeds; predictions in σ_e units): how far the world model's predictions moved with the calibration's records, by the predicted pair's relation to them; the mean predicted minus real gain of the calibrated records before and after them; the probes' within-task pairwise accuracy on the policy's own proposals under the evidence before and after the calibration.\n\n")
	b.WriteString("| method | calibrations | " + strings.Join(classes, " | ") + " | gap before → after | probes' accuracy before → after |\n|---|---|" + strings.Repeat("---|", len(classes)+2) + "\n")
	f := func(x *float64, format string) string {
		if x == nil {
			return "–"
		}
		return fmt.Sprintf(format, *x)
	}
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %d |", r.Method, r.Calibrations)
		for _, s := range r.Shift {
			fmt.Fprintf(b, " %s |", f(s, "%.2f"))
		}
		fmt.Fprintf(b, " %s → %s | %s → %s (%d) |\n", f(r.GapBefore, "%+.2f"), f(r.GapAfter, "%+.2f"), f(r.AccuracyBefore, "%.3f"), f(r.Accuracy, "%.3f"), r.AccuracyProbes)
	}
}

// TeacherRow is one trained method's teacher probe at one step, averaged
// over seeds (probe.Teacher): the world model under the trainer's
// evidence then and under M_0, and the policy.
type TeacherRow struct {
	Method string        `json:"method"`
	Step   int           `json:"step"`
	Seeds  int           `json:"seeds"`
	World  probe.Ranking `json:"world"`
	World0 probe.Ranking `json:"world0"`
	Policy probe.Ranking `json:"policy"`
}

// teacherRows averages each method's teacher points by step, methods in
// order of first appearance and steps in increasing order.
func teacherRows(rs []Result) []TeacherRow {
	type key struct {
		method string
		step   int
	}
	var order []key
	first := map[string]int{}
	by := map[key][]probe.Teacher{}
	for _, r := range rs {
		for _, p := range r.Teacher {
			k := key{r.Method, p.Step}
			if _, ok := first[r.Method]; !ok {
				first[r.Method] = len(first)
			}
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], p)
		}
	}
	slices.SortFunc(order, func(a, b key) int {
		if c := cmp.Compare(first[a.method], first[b.method]); c != 0 {
			return c
		}
		return cmp.Compare(a.step, b.step)
	})
	var out []TeacherRow
	for _, k := range order {
		ps := by[k]
		row := TeacherRow{Method: k.method, Step: k.step, Seeds: len(ps)}
		var w, w0, pol []probe.Ranking
		for _, p := range ps {
			w, w0, pol = append(w, p.World), append(w0, p.World0), append(pol, p.Policy)
		}
		row.World, row.World0, row.Policy = probe.MeanRanking(w), probe.MeanRanking(w0), probe.MeanRanking(pol)
		out = append(out, row)
	}
	return out
}

// teacherTable writes the teacher rows (none without them).
func teacherTable(b *strings.Builder, rows []TeacherRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nThe teacher on the training tasks (means over the landscape's training tasks and seeds): at each calibration step u (under M_u: M_0 and the records of the calibrations before u) and after the last step (M_0 and every calibration's records), the world model that rewards the policy ranks each task's mechanisms (each by its best-rated change of the catalogue, the state judged as the trainer judges it) under that M and under M_0, and the policy by its card probabilities: the rank of the task's best mechanism (of the landscape's), Spearman's correlation with the mechanisms' gains, and the gain of the mechanism ranked first (σ_e).\n\n")
	b.WriteString("| method | step | seeds | world: rank / ρ / top gain | world on M_0 | policy |\n|---|---|---|---|---|---|\n")
	f := func(r probe.Ranking) string {
		rho := "–"
		if r.Spearman != nil {
			rho = fmt.Sprintf("%.3f", *r.Spearman)
		}
		return fmt.Sprintf("%.1f / %s / %+.2f", r.BestRank, rho, r.TopGain)
	}
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s |\n", r.Method, r.Step, r.Seeds, f(r.World), f(r.World0), f(r.Policy))
	}
}
