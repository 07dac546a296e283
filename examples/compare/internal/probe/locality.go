package probe

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/internal/stat"
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

// LocalityClasses are the classes of a probed pair, by its relation to the
// calibration's records: the calibrated pairs themselves, other proposals
// on a calibrated task, a calibrated mechanism on another task, and the
// rest.
var LocalityClasses = []string{"calibrated", "same task", "same mechanism", "other"}

// localityTasks is how many training tasks besides the calibrated ones a
// locality probe predicts on, and localityDraws how many catalogue
// changes besides the calibrated proposals.
const localityTasks, localityDraws = 16, 8

// gapClip bounds the gains of the locality's gaps: the reward's clip, ±6
// σ_e.
var gapClip = -landscape.InfeasibleGain

// calibrated is what a calibration's records cover: its (task, proposal)
// pairs, tasks and mechanisms.
type calibrated struct{ pair, task, mech map[string]bool }

// class is the LocalityClasses index of the pair (t, q).
func (c calibrated) class(t records.Task, q records.Proposal) int {
	switch {
	case c.pair[t.ID+"\x00"+q.Key()]:
		return 0
	case c.task[t.ID]:
		return 1
	case c.mech[records.CanonicalName(q.Mechanism)]:
		return 2
	}
	return 3
}

// localityPairs returns what c's records cover and the tasks and
// proposals a locality probe predicts: c's, then localityTasks drawn
// training tasks and localityDraws drawn catalogue changes (rng), each
// once.
func (m *Monitor) localityPairs(rng *rand.Rand, c *lm2lm.CalibrationReport) (calibrated, []records.Task, []records.Proposal) {
	cal := calibrated{map[string]bool{}, map[string]bool{}, map[string]bool{}}
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
	train := m.cfg.Train
	for _, r := range c.Records {
		cal.pair[r.Task.ID+"\x00"+r.Proposal.Key()] = true
		cal.task[r.Task.ID] = true
		cal.mech[records.CanonicalName(r.Proposal.Mechanism)] = true
		for _, t := range train {
			if t.ID == r.Task.ID {
				addTask(t)
			}
		}
		addProp(r.Proposal)
	}
	for _, i := range rng.Perm(len(train))[:min(localityTasks, len(train))] {
		addTask(train[i])
	}
	for _, ch := range records.DrawChanges(rng, train, lab.Catalogue(), localityDraws, nil) {
		addProp(ch.Proposal)
	}
	return cal, tasks, props
}

// measureLocality predicts a fixed set of pairs under the evidence before
// the calibration c and under the monitor's evidence after it (predictions
// only, no run): every proposal of c's records and localityDraws drawn
// catalogue changes, on c's tasks and localityTasks drawn training tasks.
func (m *Monitor) measureLocality(ctx context.Context, step int, before records.Evidence, c *lm2lm.CalibrationReport) (Locality, error) {
	out := Locality{Step: step}
	rng := rand.New(rand.NewPCG(m.cfg.Seed, 0x6c6f63616c+uint64(step)))
	cal, tasks, props := m.localityPairs(rng, c)
	sums := make([]float64, len(LocalityClasses))
	counts := make([]int, len(LocalityClasses))
	// both predicts (t, q) in σ_e units before and after c's records; ok
	// when both predictions are valid.
	both := func(t records.Task, q records.Proposal) (a, b float64, ok bool, err error) {
		pa, err := m.cfg.World.Predict(ctx, rwm.Query{Task: t, Proposal: q, Evidence: before})
		if err != nil {
			return 0, 0, false, fmt.Errorf("locality at step %d: %w", step, err)
		}
		pb, err := m.cfg.World.Predict(ctx, rwm.Query{Task: t, Proposal: q, Evidence: m.evidence})
		if err != nil {
			return 0, 0, false, fmt.Errorf("locality at step %d: %w", step, err)
		}
		return pa.Gain / t.SeedNoise, pb.Gain / t.SeedNoise, pa.Valid && pb.Valid, nil
	}
	for _, t := range tasks {
		for _, q := range props {
			a, b, ok, err := both(t, q)
			if err != nil {
				return out, err
			}
			if ok {
				k := cal.class(t, q)
				sums[k] += math.Abs(b - a)
				counts[k]++
			}
		}
	}
	for k, name := range LocalityClasses {
		out.Classes = append(out.Classes, LocalityClass{Class: name, Pairs: counts[k], MeanAbsShift: stat.OrNil(sums[k] / float64(counts[k]))})
	}
	clip := func(x float64) float64 { return max(-gapClip, min(gapClip, x)) }
	n, gb, ga := 0, 0.0, 0.0
	for _, r := range c.Records {
		if r.Infeasible != "" || !(r.Task.SeedNoise > 0) {
			continue
		}
		real := clip(r.Gain / r.Task.SeedNoise)
		a, b, ok, err := both(r.Task, r.Proposal)
		if err != nil {
			return out, err
		}
		if ok {
			gb += clip(a) - real
			ga += clip(b) - real
			n++
		}
	}
	out.GapBefore, out.GapAfter = stat.OrNil(gb/float64(n)), stat.OrNil(ga/float64(n))
	return out, nil
}
