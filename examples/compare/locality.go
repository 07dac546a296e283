package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Locality is how far one calibration moved the world model's predictions
// (METHOD.md §1 On-policy calibration: the calibration records join M and
// the frozen model is conditioned on them). A correction that is local
// moves the calibrated pairs and their neighbours, and the rest barely.
type Locality struct {
	Step    int             `json:"step"`
	Classes []LocalityClass `json:"classes"`
	// GapBefore and GapAfter are the mean predicted minus real gain of the
	// calibration's feasible records (σ_e units, each clipped at ±6) under
	// the evidence before and after them.
	GapBefore *float64 `json:"gap_before"`
	GapAfter  *float64 `json:"gap_after"`
}

// LocalityClass is the mean absolute shift of the predictions of one
// class of (task, proposal) pairs, in σ_e units.
type LocalityClass struct {
	Class        string   `json:"class"`
	Pairs        int      `json:"pairs"`
	MeanAbsShift *float64 `json:"mean_abs_shift"`
}

// The classes of a probed pair, by its relation to the calibration's
// records: the calibrated pairs themselves, other proposals on a
// calibrated task, a calibrated mechanism on another task, and the rest.
var localityClasses = []string{"calibrated", "same task", "same mechanism", "other"}

// localityTasks is how many training tasks besides the calibrated ones a
// locality probe predicts on, and localityDraws how many catalogue
// changes besides the calibrated proposals.
const localityTasks, localityDraws = 16, 8

// locality predicts a fixed set of pairs under the evidence before the
// calibration c and under the prober's evidence after it (predictions
// only, no run): every proposal of c's records and localityDraws drawn
// catalogue changes, on c's tasks and localityTasks drawn training tasks.
func (p *prober) locality(ctx context.Context, step int, before records.Evidence, c *lm2lm.CalibrationReport) (Locality, error) {
	out := Locality{Step: step}
	rng := rand.New(rand.NewPCG(p.seed, 0x6c6f63616c+uint64(step)))
	calPair, calTask, calMech := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var tasks []records.Task
	var props []records.Proposal
	seenTask, seenProp := map[string]bool{}, map[string]bool{}
	addTask := func(t records.Task) {
		if !seenTask[t.ID] {
			seenTask[t.ID] = true
			tasks = append(tasks, t)
		}
	}
	addProp := func(q records.Proposal) {
		if !seenProp[q.Key()] {
			seenProp[q.Key()] = true
			props = append(props, q)
		}
	}
	for _, r := range c.Records {
		calPair[r.Task.ID+"\x00"+r.Proposal.Key()] = true
		calTask[r.Task.ID] = true
		calMech[records.CanonicalName(r.Proposal.Mechanism)] = true
		for _, t := range p.e.train {
			if t.ID == r.Task.ID {
				addTask(t)
			}
		}
		addProp(r.Proposal)
	}
	for _, i := range rng.Perm(len(p.e.train))[:min(localityTasks, len(p.e.train))] {
		addTask(p.e.train[i])
	}
	for _, ch := range records.DrawChanges(rng, p.e.train, lab.Catalogue(), localityDraws, nil) {
		addProp(ch.Proposal)
	}
	sums := make([]float64, len(localityClasses))
	counts := make([]int, len(localityClasses))
	predict := func(t records.Task, q records.Proposal, ev records.Evidence) (float64, bool, error) {
		pr, err := p.world.Predict(ctx, rwm.Query{Task: t, Proposal: q, Evidence: ev})
		if err != nil {
			return 0, false, fmt.Errorf("locality at step %d: %w", step, err)
		}
		return pr.Gain / t.SeedNoise, pr.Valid, nil
	}
	for _, t := range tasks {
		for _, q := range props {
			a, okA, err := predict(t, q, before)
			if err != nil {
				return out, err
			}
			b, okB, err := predict(t, q, p.evidence)
			if err != nil {
				return out, err
			}
			if !okA || !okB {
				continue
			}
			k := 3
			switch {
			case calPair[t.ID+"\x00"+q.Key()]:
				k = 0
			case calTask[t.ID]:
				k = 1
			case calMech[records.CanonicalName(q.Mechanism)]:
				k = 2
			}
			sums[k] += math.Abs(b - a)
			counts[k]++
		}
	}
	for k, name := range localityClasses {
		out.Classes = append(out.Classes, LocalityClass{Class: name, Pairs: counts[k], MeanAbsShift: num(sums[k] / float64(counts[k]))})
	}
	clip := func(x float64) float64 { return max(-evalClip, min(evalClip, x)) }
	n, gb, ga := 0, 0.0, 0.0
	for _, r := range c.Records {
		if r.Infeasible != "" || !(r.Task.SeedNoise > 0) {
			continue
		}
		real := clip(r.Gain / r.Task.SeedNoise)
		a, okA, err := predict(r.Task, r.Proposal, before)
		if err != nil {
			return out, err
		}
		b, okB, err := predict(r.Task, r.Proposal, p.evidence)
		if err != nil {
			return out, err
		}
		if okA && okB {
			gb += clip(a) - real
			ga += clip(b) - real
			n++
		}
	}
	out.GapBefore, out.GapAfter = num(gb/float64(n)), num(ga/float64(n))
	return out, nil
}

// LocalityRow is one calibrating method's locality, averaged over its
// calibrations and seeds: the mean absolute shift of each class, the gap
// on the calibrated records before and after them, and the probes'
// pairwise accuracy on the policy's own proposals before and after.
type LocalityRow struct {
	Method       string `json:"method"`
	Calibrations int    `json:"calibrations"`
	// Shift is the mean absolute shift of each class, localityClasses
	// order (null: no pair of the class).
	Shift []*float64 `json:"mean_abs_shift"`
	// GapBefore and GapAfter are the calibrated records' mean gap;
	// AccuracyBefore and Accuracy the probes' pairwise accuracy, over
	// AccuracyProbes probes.
	GapBefore, GapAfter      *float64
	AccuracyBefore, Accuracy *float64
	AccuracyProbes           int `json:"accuracy_probes"`
}

// localityRows averages each method's locality measurements (methods
// without any are left out).
func localityRows(rs []Result) []LocalityRow {
	var order []string
	type acc struct {
		n              int
		shift          []float64
		shiftN         []int
		gb, ga, ab, aa float64
		gapN, accN     int
	}
	by := map[string]*acc{}
	for _, r := range rs {
		if len(r.Locality) == 0 {
			continue
		}
		a := by[r.Method]
		if a == nil {
			a = &acc{shift: make([]float64, len(localityClasses)), shiftN: make([]int, len(localityClasses))}
			by[r.Method] = a
			order = append(order, r.Method)
		}
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
	var out []LocalityRow
	for _, m := range order {
		a := by[m]
		row := LocalityRow{Method: m, Calibrations: a.n, AccuracyProbes: a.accN,
			GapBefore: num(a.gb / float64(a.gapN)), GapAfter: num(a.ga / float64(a.gapN)),
			AccuracyBefore: num(a.ab / float64(a.accN)), Accuracy: num(a.aa / float64(a.accN))}
		for k := range a.shift {
			row.Shift = append(row.Shift, num(a.shift[k]/float64(a.shiftN[k])))
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
	b.WriteString("\nLocality of each calibration (means over calibrations and seeds; predictions in σ_e units): how far the world model's predictions moved with the calibration's records, by the predicted pair's relation to them; the mean predicted minus real gain of the calibrated records before and after them; the probes' within-task pairwise accuracy on the policy's own proposals under the evidence before and after the calibration.\n\n")
	b.WriteString("| method | calibrations | " + strings.Join(localityClasses, " | ") + " | gap before → after | probes' accuracy before → after |\n|---|---|" + strings.Repeat("---|", len(localityClasses)+2) + "\n")
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
