package lm2lm

import (
	"errors"
	"fmt"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// This file is the Loop's side for a driver whose policy is trained
// elsewhere (an RL framework reaching the environment service, package
// serve): the framework samples and updates, the loop scores groups of
// completions, counts steps and calibrates on the candidates it scored.

// Group is one state's completions, parsed into samples, as an outside
// trainer hands them in for scoring.
type Group struct {
	State   records.State
	Samples []proposer.Sample
}

// ScoredGroup is what ScoreGroups computed of one group, one entry per
// sample in each slice.
type ScoredGroup struct {
	// Rewards are the shaped rewards R_i (METHOD.md §1 Reward, with the
	// duplicate penalty, diversity bonus and invalid rules).
	Rewards []float64
	// Advantages are the group-relative advantages (METHOD.md §1 Policy
	// optimisation; Config.DAPO.Norm), all zero for a flat group.
	Advantages []float64
	// Gains are the gains that were shaped (the world model's prediction,
	// debiased under WMRL); Valid whether each sample counted as valid;
	// Reasons the world model's or the parser's reason.
	Gains   []float64
	Valid   []bool
	Reasons []string
	// Tau is τ_e of the group's task in this request.
	Tau float64
	// Kept reports that dynamic sampling keeps the group (it is
	// informative); a flat group is dropped (METHOD.md §1 Policy
	// optimisation).
	Kept bool
}

// Scored is the result of ScoreGroups.
type Scored struct {
	Groups []ScoredGroup
	Report RolloutReport
}

// ScoreJobs returns the world-model queries that scoring gs needs under
// the current M, one per parsed sample that changes something, in order
// of groups then samples (the order ScoreGroups reads its predictions in).
func (l *Loop) ScoreJobs(gs []Group) []PredictJob {
	ro := groupsOf(gs)
	return l.predictJobs(ro, ro.predictionJobs())
}

func groupsOf(gs []Group) *rolloutData {
	ro := &rolloutData{groups: make([]*group, len(gs))}
	for i, g := range gs {
		ro.groups[i] = newGroup(g.State, g.Samples)
	}
	return ro
}

// ScoreGroups shapes the rewards of gs from preds, the answers to
// ScoreJobs(gs) in order: τ_e per task over the request's valid predicted
// gains, the shaped rewards, group-relative advantages and dynamic
// sampling (a request whose groups are all flat is no error: every group
// has Kept false). The groups join the calibration candidates (Calibrate),
// their samples' tokens dropped, and their predicted samples join the pool
// as synthetic records stamped now (METHOD.md §1 Synthetic state
// expansion). An error leaves the loop unchanged.
func (l *Loop) ScoreGroups(gs []Group, preds []Prediction, now time.Time) (Scored, error) {
	ro := groupsOf(gs)
	jobs := ro.predictionJobs()
	if len(preds) != len(jobs) {
		return Scored{}, fmt.Errorf("lm2lm: score: %d predictions for %d queries", len(preds), len(jobs))
	}
	for k, j := range jobs {
		g := ro.groups[j.g]
		s := &g.samples[j.i]
		if err := acceptPrediction(s, preds[k].Prediction, preds[k].Err); err != nil {
			return Scored{}, fmt.Errorf("lm2lm: score: predict %s: %w", onTask(s.Proposal, g.state.Task), err)
		}
	}
	l.core.shape(ro)
	out := Scored{Groups: make([]ScoredGroup, len(ro.groups)), Report: ro.report()}
	rewards := make([][]float64, len(ro.groups))
	for gi, g := range ro.groups {
		rewards[gi] = g.rewards()
	}
	kept, dr, err := dapo.Select(rewards, len(ro.groups), l.cfg.DAPO.FlatTol)
	if err != nil && !errors.Is(err, dapo.ErrShortBatch) {
		return Scored{}, fmt.Errorf("lm2lm: score: %w", err)
	}
	out.Report.Kept, out.Report.Flat = dr.Kept, dr.Flat
	isKept := map[int]bool{}
	for _, k := range kept {
		isKept[k] = true
	}
	for gi, g := range ro.groups {
		sg := ScoredGroup{Rewards: rewards[gi], Tau: g.tau, Kept: isKept[gi], Advantages: make([]float64, len(g.samples)),
			Gains: make([]float64, len(g.samples)), Valid: make([]bool, len(g.samples)), Reasons: make([]string, len(g.samples))}
		if sg.Kept {
			sg.Advantages = dapo.Advantages(rewards[gi], l.cfg.DAPO.Norm, l.cfg.DAPO.Eps)
		}
		for i, s := range g.samples {
			sg.Gains[i], sg.Valid[i] = fin(s.gain), s.valid()
			sg.Reasons[i] = s.pred.Reason
			if s.Invalid {
				sg.Reasons[i] = s.Reason
			}
		}
		out.Groups[gi] = sg
	}
	if err := l.pool.Add(ro.synthetic(now)...); err != nil {
		return Scored{}, fmt.Errorf("lm2lm: score: synthetic expansion: %w", err)
	}
	for _, g := range ro.groups {
		for i := range g.samples {
			g.samples[i].Tokens, g.samples[i].LogProbs = nil, nil
		}
		l.since.groups = append(l.since.groups, g)
	}
	return out, nil
}

// Candidates returns the number of groups scored since the last
// calibration.
func (l *Loop) Candidates() int { return len(l.since.groups) }

// CandidateShare returns the mechanism shares of the samples scored since
// the last calibration (METHOD.md §1 On-policy calibration, case study).
func (l *Loop) CandidateShare() []calibrate.Share { return l.since.report().Share }

// LastMonitors returns the reliability monitors of the last calibration
// (predicted under M_u vs real normalised rewards of its runs) and whether
// one has run since the loop was made or restored with trigger state.
func (l *Loop) LastMonitors() (calibrate.Monitors, bool) {
	if l.last.Step < 0 {
		return calibrate.Monitors{}, false
	}
	return calibrate.Monitor(l.last.Predicted, l.last.Real), true
}

// SetStep records that the outside policy has done step updates. The step
// never goes back: a smaller step is ignored. It returns the loop's step.
func (l *Loop) SetStep(step int) int {
	if step > l.step {
		l.step = step
	}
	return l.step
}

// Draw draws n states from the pool with the loop's random source
// (records.Pool.States over the training tasks, histories up to
// Config.MaxHistory).
func (l *Loop) Draw(n int) []records.State {
	return l.pool.States(l.rng, l.stateTasks(), n, l.cfg.MaxHistory)
}

// Calibrate starts the calibration point due at the current step, if any
// (the first point not yet executed whose scheduled step is at most the
// step: an outside trainer's step may jump over a point): greedy top-B_u
// (or random, Config.Calibration) over the candidates scored since the
// last calibration, which are handed to it. It returns the runs to execute
// (answer them with FinishCalibration) and ok = false when no point is due
// or a calibration is already in flight. Under Static it never calibrates.
// The loop is then in a step (InStep) until FinishCalibration; its
// checkpoint holds the picks, so a restarted driver executes the same
// runs (PendingRuns).
func (l *Loop) Calibrate() (jobs []RunJob, ok bool) {
	if l.ph != phaseIdle || l.cfg.Calibration == Static {
		return nil, false
	}
	u := l.calDone
	if u >= len(l.cfg.Schedule.Steps) || l.cfg.Schedule.Steps[u] > l.step {
		return nil, false
	}
	ro := &rolloutData{groups: l.since.groups}
	l.since = rolloutData{}
	l.ro, l.ph = ro, phaseCalibrate
	l.cal = calInFlight{u: u, budget: l.cfg.Schedule.Budgets[u], at: l.step, picks: l.core.calibrationPicks(ro, l.m, l.cfg.Schedule.Budgets[u], l.rng)}
	return l.PendingRuns(), true
}

// PendingRuns returns the runs of the calibration in flight (Calibrate),
// nil when none.
func (l *Loop) PendingRuns() []RunJob {
	if l.ph != phaseCalibrate || l.ro == nil {
		return nil
	}
	var out []RunJob
	for _, tc := range l.ro.changes(l.cal.picks) {
		out = append(out, RunJob{Change: tc})
	}
	if out == nil {
		out = []RunJob{}
	}
	return out
}

// FinishCalibration takes the runs of the calibration in flight, in job
// order, through the loop's one calibration path (the Trainer's too): their
// records join M and the pool, and the report (stepped at the step the point
// was picked at) carries the reliability monitors on them. Groups scored
// while the runs went (ScoreGroups under M_u: each segment keeps a fixed
// reward function, METHOD.md §1 On-policy calibration) stay candidates of
// the next point. On an error (a wrong number of runs) the calibration stays
// in flight.
func (l *Loop) FinishCalibration(runs []RealRun) (CalibrationReport, error) {
	if l.ph != phaseCalibrate || l.ro == nil {
		return CalibrationReport{}, fmt.Errorf("lm2lm: no calibration in flight")
	}
	cr, err := l.applyCalibration(runs)
	if err != nil && l.calDone != l.cal.u+1 {
		return cr, err
	}
	l.abandon()
	return cr, err
}

// CalibrationInFlight reports whether a calibration's runs are pending
// (Calibrate until FinishCalibration).
func (l *Loop) CalibrationInFlight() bool { return l.ph == phaseCalibrate }

// TrimCandidates keeps at most n of the groups scored since the last
// calibration, dropping the oldest (those of the most stale policy; the
// greedy top-B of METHOD.md §1 On-policy calibration picks among the
// current policy's candidates), and returns how many it dropped. A host
// that scores without bound calls it to bound the loop's memory.
func (l *Loop) TrimCandidates(n int) int {
	if n < 0 || len(l.since.groups) <= n {
		return 0
	}
	drop := len(l.since.groups) - n
	l.since.groups = append([]*group(nil), l.since.groups[drop:]...)
	return drop
}
