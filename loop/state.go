package loop

import (
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// This file is the JSON form of a Loop's calibration in flight and of its
// candidates.

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

// inFlight is the calibration in flight: point, budget, reason, the
// candidates it picks among (Groups) and its picks (group, sample). It is
// the layout of an earlier version's step in flight, whose other phases
// (samples, predictions, anchor runs, an update) no longer exist: a
// checkpoint holding one of them is refused.
type inFlight struct {
	Phase     int         `json:"phase"`
	Groups    []groupJSON `json:"groups,omitempty"`
	CalU      int         `json:"cal_u,omitempty"`
	CalBudget int         `json:"cal_budget,omitempty"`
	CalWhy    string      `json:"cal_why,omitempty"`
	CalPicks  [][2]int    `json:"cal_picks,omitempty"`
	// CalAt is the step the point was picked at when it differs from the
	// loop's step (the driver's steps go on while its runs do).
	CalAt *int `json:"cal_at,omitempty"`
}

// phaseCalibrate is the phase number of a calibration in flight.
const phaseCalibrate = 3

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

// inFlight returns the calibration in flight, or nil.
func (l *Loop) inFlight() *inFlight {
	c := l.cal
	if c == nil {
		return nil
	}
	fl := &inFlight{Phase: phaseCalibrate, Groups: groupsJSON(c.ro), CalU: c.u, CalBudget: c.budget, CalWhy: c.why}
	if c.at != l.step {
		at := c.at
		fl.CalAt = &at
	}
	for _, p := range c.picks {
		fl.CalPicks = append(fl.CalPicks, [2]int{p.g, p.i})
	}
	return fl
}

// restoreFlight validates a checkpoint's calibration in flight against
// the loop and returns it.
func (l *Loop) restoreFlight(b body) (*calInFlight, error) {
	fl := b.InFlight
	if fl.Phase != phaseCalibrate {
		return nil, fmt.Errorf("a step in flight in phase %d, which this version no longer has: resume from a checkpoint written between steps", fl.Phase)
	}
	if fl.CalU < 0 || fl.CalU >= len(l.cfg.Schedule.Steps) || fl.CalU != b.Calibrations {
		return nil, fmt.Errorf("calibration point %d after %d calibrations", fl.CalU, b.Calibrations)
	}
	if fl.CalBudget < 0 {
		return nil, fmt.Errorf("calibration budget %d", fl.CalBudget)
	}
	c := &calInFlight{u: fl.CalU, budget: fl.CalBudget, at: b.Step, why: fl.CalWhy, ro: &rolloutData{}}
	if fl.CalAt != nil {
		if *fl.CalAt < 0 || *fl.CalAt > b.Step {
			return nil, fmt.Errorf("calibration picked at step %d, after the checkpoint's step %d", *fl.CalAt, b.Step)
		}
		c.at = *fl.CalAt
	}
	if len(fl.Groups) > 0 {
		ro, err := l.groupsFromJSON(fl.Groups)
		if err != nil {
			return nil, err
		}
		c.ro = ro
	}
	for _, p := range fl.CalPicks {
		g, i := p[0], p[1]
		if g < 0 || g >= len(c.ro.groups) || i < 0 || i >= len(c.ro.groups[g].samples) {
			return nil, fmt.Errorf("calibration pick %v outside its candidates", p)
		}
		c.picks = append(c.picks, ref{g, i})
	}
	return c, nil
}
