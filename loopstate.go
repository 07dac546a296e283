package lm2lm

import (
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// This file is the JSON form of a Loop's step in flight and of its scored
// groups (checkpoint version 3).

// sampleJSON is one sample with what the core computed of it.
type sampleJSON struct {
	Sample proposer.Sample `json:"sample"`
	Pred   rwm.Prediction  `json:"pred"`
	OK     bool            `json:"ok,omitempty"`
	Gain   float64         `json:"gain"`
	Scaled float64         `json:"scaled"`
	Reward float64         `json:"reward"`
}

// groupJSON is one group.
type groupJSON struct {
	State   records.State `json:"state"`
	Tau     float64       `json:"tau"`
	Samples []sampleJSON  `json:"samples"`
}

// inFlight is a Loop's step in flight.
type inFlight struct {
	Phase   int             `json:"phase"`
	States  []records.State `json:"states,omitempty"`
	Seeds   [][2]uint64     `json:"seeds,omitempty"`
	Groups  []groupJSON     `json:"groups,omitempty"`
	Rescore bool            `json:"rescore,omitempty"`
	// Cal is the calibration being executed: point, budget, reason and
	// picks (group, sample).
	CalU      int      `json:"cal_u,omitempty"`
	CalBudget int      `json:"cal_budget,omitempty"`
	CalWhy    string   `json:"cal_why,omitempty"`
	CalPicks  [][2]int `json:"cal_picks,omitempty"`
	// CalAt is the step the point was picked at when it differs from the
	// loop's step (an outside trainer's steps go on while its runs do).
	CalAt *int `json:"cal_at,omitempty"`
	// Report is the rollout report so far (from keep on).
	Report *RolloutReport `json:"report,omitempty"`
	Kept   []int          `json:"kept,omitempty"`
	// Anchor plan: groups, jobs and each anchor group's job per sample.
	PlanGroups []int                `json:"plan_groups,omitempty"`
	PlanJobs   []records.TaskChange `json:"plan_jobs,omitempty"`
	PlanJobOf  map[int][]int        `json:"plan_job_of,omitempty"`
	HasPlan    bool                 `json:"has_plan,omitempty"`
	Stamp      bool                 `json:"stamp,omitempty"`
	// Pending is the report of a calibration whose step has not completed
	// (its monitors are recomputed from Predicted and Real).
	Pending *CalibrationReport `json:"pending,omitempty"`
}

// fin returns x, or 0 when it is not finite (JSON has no NaN); used only
// for the numbers of invalid samples, which no decision reads.
func fin(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

func groupsJSON(ro *rolloutData) []groupJSON {
	out := make([]groupJSON, len(ro.groups))
	for gi, g := range ro.groups {
		gj := groupJSON{State: g.state, Tau: g.tau, Samples: make([]sampleJSON, len(g.samples))}
		for i, s := range g.samples {
			p := s.pred
			p.Gain, p.Low, p.High = fin(p.Gain), fin(p.Low), fin(p.High)
			gj.Samples[i] = sampleJSON{Sample: s.Sample, Pred: p, OK: s.ok, Gain: fin(s.gain), Scaled: fin(s.scaled), Reward: fin(s.reward)}
		}
		out[gi] = gj
	}
	return out
}

// groupsFromJSON rebuilds groups, checking their states are of training
// tasks and their numbers finite.
func (l *Loop) groupsFromJSON(gs []groupJSON) (*rolloutData, error) {
	known := map[string]bool{}
	for _, t := range l.stateTasks() {
		known[t.ID] = true
	}
	ro := &rolloutData{groups: make([]*group, len(gs))}
	for gi, gj := range gs {
		if !known[gj.State.Task.ID] {
			return nil, fmt.Errorf("group %d: task %q is not a training task", gi, records.Excerpt(gj.State.Task.ID))
		}
		if err := gj.State.Validate(); err != nil {
			return nil, fmt.Errorf("group %d: %w", gi, err)
		}
		if len(gj.Samples) == 0 {
			return nil, fmt.Errorf("group %d has no samples", gi)
		}
		g := &group{state: gj.State, tau: gj.Tau, samples: make([]sample, len(gj.Samples))}
		for i, sj := range gj.Samples {
			if sj.OK {
				if err := sj.Pred.Validate(); err != nil || !sj.Pred.Valid {
					return nil, fmt.Errorf("group %d sample %d: prediction marked usable is not: %v", gi, i, err)
				}
			}
			g.samples[i] = sample{Sample: sj.Sample, pred: sj.Pred, ok: sj.OK, gain: sj.Gain, scaled: sj.Scaled, reward: sj.Reward}
		}
		ro.groups[gi] = g
	}
	return ro, nil
}

// inFlight returns the loop's step in flight, or nil between steps.
func (l *Loop) inFlight() *inFlight {
	if l.ph == phaseIdle {
		return nil
	}
	fl := &inFlight{Phase: int(l.ph), States: l.states, Seeds: l.seeds, Rescore: l.rescore, Stamp: l.stamp, Kept: l.kept}
	if l.ro != nil {
		fl.Groups = groupsJSON(l.ro)
	}
	if l.ph == phaseCalibrate {
		fl.CalU, fl.CalBudget, fl.CalWhy = l.cal.u, l.cal.budget, l.cal.why
		if l.cal.at != l.step {
			at := l.cal.at
			fl.CalAt = &at
		}
		for _, p := range l.cal.picks {
			fl.CalPicks = append(fl.CalPicks, [2]int{p.g, p.i})
		}
	}
	if l.ph == phaseAnchors || l.ph == phaseUpdate {
		rep := l.rep
		fl.Report = &rep
	}
	if l.plan != nil {
		fl.HasPlan, fl.PlanGroups, fl.PlanJobs, fl.PlanJobOf = true, l.plan.groups, l.plan.jobs, map[int][]int{}
		for gi, j := range l.plan.jobOf {
			if j != nil {
				fl.PlanJobOf[gi] = j
			}
		}
	}
	if l.pendingCal != nil {
		p := *l.pendingCal
		p.Monitors = calibrate.Monitors{}
		fl.Pending = &p
	}
	return fl
}

// restoredFlight is a validated step in flight.
type restoredFlight struct {
	fl *inFlight
	ro *rolloutData
}

// checkInFlight validates the step in flight of cp against the loop.
func (l *Loop) checkInFlight(cp checkpoint) (*restoredFlight, error) {
	fl := cp.InFlight
	ph := phase(fl.Phase)
	if ph <= phaseIdle || ph > phaseUpdate {
		return nil, fmt.Errorf("phase %d", fl.Phase)
	}
	out := &restoredFlight{fl: fl}
	if ph == phaseSamples {
		if len(fl.States) == 0 || len(fl.States) != len(fl.Seeds) {
			return nil, fmt.Errorf("%d states and %d sources", len(fl.States), len(fl.Seeds))
		}
		return out, nil
	}
	if len(fl.Groups) == 0 {
		if ph != phaseUpdate {
			return nil, fmt.Errorf("phase %d without a rollout", fl.Phase)
		}
	} else {
		ro, err := l.groupsFromJSON(fl.Groups)
		if err != nil {
			return nil, err
		}
		out.ro = ro
	}
	ref := func(g, i int) bool {
		return out.ro != nil && g >= 0 && g < len(out.ro.groups) && i >= 0 && i < len(out.ro.groups[g].samples)
	}
	for _, p := range fl.CalPicks {
		if !ref(p[0], p[1]) {
			return nil, fmt.Errorf("calibration pick %v outside the rollout", p)
		}
	}
	if fl.CalAt != nil && (*fl.CalAt < 0 || *fl.CalAt > cp.Step) {
		return nil, fmt.Errorf("calibration picked at step %d, after the checkpoint's step %d", *fl.CalAt, cp.Step)
	}
	for _, k := range fl.Kept {
		if !ref(k, 0) {
			return nil, fmt.Errorf("kept group %d outside the rollout", k)
		}
	}
	if ph == phaseCalibrate && (fl.CalU < 0 || fl.CalU >= len(l.cfg.Schedule.Steps) || fl.CalU != cp.Calibrations) {
		return nil, fmt.Errorf("calibration point %d after %d calibrations", fl.CalU, cp.Calibrations)
	}
	if ph == phaseAnchors {
		if !fl.HasPlan || fl.Report == nil {
			return nil, fmt.Errorf("anchor runs without a plan")
		}
		for _, gi := range fl.PlanGroups {
			if !ref(gi, 0) || len(fl.PlanJobOf[gi]) != len(out.ro.groups[gi].samples) {
				return nil, fmt.Errorf("anchor group %d", gi)
			}
			for _, j := range fl.PlanJobOf[gi] {
				if j < -1 || j >= len(fl.PlanJobs) {
					return nil, fmt.Errorf("anchor group %d: job %d of %d", gi, j, len(fl.PlanJobs))
				}
			}
		}
	}
	if ph == phaseUpdate && len(cp.Batches) == 0 {
		return nil, fmt.Errorf("update without a mini-batch")
	}
	if fl.Stamp && out.ro == nil {
		return nil, fmt.Errorf("synthetic records without a rollout")
	}
	return out, nil
}

// apply installs the step in flight into l.
func (r *restoredFlight) apply(l *Loop) {
	fl := r.fl
	l.ph, l.states, l.seeds, l.ro, l.rescore, l.stamp, l.kept = phase(fl.Phase), fl.States, fl.Seeds, r.ro, fl.Rescore, fl.Stamp, fl.Kept
	if l.ph == phaseCalibrate {
		l.cal = calInFlight{u: fl.CalU, budget: fl.CalBudget, at: l.step, why: fl.CalWhy}
		if fl.CalAt != nil {
			l.cal.at = *fl.CalAt
		}
		for _, p := range fl.CalPicks {
			l.cal.picks = append(l.cal.picks, ref{p[0], p[1]})
		}
	}
	if fl.Report != nil {
		l.rep = *fl.Report
	}
	if fl.HasPlan {
		l.plan = &anchorPlan{groups: fl.PlanGroups, jobs: fl.PlanJobs, set: map[int]bool{}, jobOf: make([][]int, len(r.ro.groups))}
		for _, gi := range fl.PlanGroups {
			l.plan.set[gi] = true
			l.plan.jobOf[gi] = fl.PlanJobOf[gi]
		}
	}
	if fl.Pending != nil {
		p := *fl.Pending
		p.Monitors = calibrate.Monitor(p.Predicted, p.Real)
		l.pendingCal = &p
	}
}
