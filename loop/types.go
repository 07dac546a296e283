package loop

import (
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// This file is the loop's vocabulary: what a driver hands in and what it
// is handed back.

// Group is one state's samples, as a driver hands them in for scoring.
type Group struct {
	State   records.State
	Samples []proposer.Sample
}

// PredictJob is one world-model query. Under Config.HeldOutTask, PinTask
// names the state's task and Pin is M without that task's records: a
// world model that implements rwm.Pinner is pinned on Pin (once per task
// and M) and asked Query with the pinned configuration. Otherwise PinTask
// is "".
type PredictJob struct {
	Query   rwm.Query
	PinTask string
	Pin     records.Evidence
}

// Prediction is the world model's answer to one PredictJob: a prediction
// or the error Predict returned. rwm.ErrBadPrediction and
// records.ErrInvalid score the proposal as invalid; Score refuses any
// other error.
type Prediction struct {
	Prediction rwm.Prediction
	Err        error
}

// RunJob is one change to build and run for real. When SetSeed is set the
// job's seed is replaced by Seed.
type RunJob struct {
	Change  records.TaskChange
	Seed    uint64
	SetSeed bool
}

// RealRun is the result of one attempt to measure a RunJob: Record when
// Measured (feasible or infeasible), else Failure says why. Ran reports
// the executor was called, Reused that it served a stored or coalesced
// outcome (nothing paid); Cost is what the run reported.
type RealRun struct {
	Record   records.Record
	Measured bool
	Ran      bool
	Reused   bool
	Seed     uint64
	Cost     records.Cost
	Failure  string
}

// Kind says which runs Ready.Execute holds.
type Kind int

const (
	// NoRuns: nothing to execute.
	NoRuns Kind = iota
	// CalibrationRuns: a calibration point's top-B_u candidates (METHOD.md
	// §1 On-policy calibration).
	CalibrationRuns
	// AnchorRuns: WMRL's anchor groups of the last scored batch (METHOD.md
	// §2); there may be none to execute, Absorb(nil) is then the answer.
	AnchorRuns
)

func (k Kind) String() string {
	switch k {
	case NoRuns:
		return "none"
	case CalibrationRuns:
		return "calibration"
	case AnchorRuns:
		return "anchors"
	}
	return "Kind(?)"
}

// Ready is what is pending: the world-model queries that scoring the
// groups given to Ready needs, and the real runs to execute. The slices
// belong to the caller.
type Ready struct {
	// Step is the driver's step the loop last observed.
	Step int
	// Predict holds one query per sample of the given groups that is
	// parsed and changes something, in order of groups then samples, under
	// the current M: the predictions Score reads.
	Predict []PredictJob
	// Kind says what Execute is; Execute holds the runs to answer with
	// Absorb, in job order.
	Kind    Kind
	Execute []RunJob
}

// ScoredGroup is what Score computed of one group, one entry per sample in
// each slice.
type ScoredGroup struct {
	// Rewards are the shaped rewards R_i (METHOD.md §1 Reward, with the
	// duplicate penalty, diversity bonus and invalid rules).
	Rewards []float64
	// Advantages are the group-relative advantages (METHOD.md §1 Policy
	// optimisation; Config.Norm) of a kept group, WMRL's weight applied to
	// an anchor group's; all zero for a group not kept.
	Advantages []float64
	// Gains are the gains that were shaped (the world model's prediction,
	// debiased under WMRL); Valid whether each sample counted as valid;
	// Reasons the world model's or the parser's reason.
	Gains   []float64
	Valid   []bool
	Reasons []string
	// Tau is τ_e of the group's task in its batch.
	Tau float64
	// Kept reports that dynamic sampling keeps the group (METHOD.md §1
	// Policy optimisation: informative, within Config.Quota).
	Kept bool
}

// Scored is what Score, or Absorb of anchor runs, computed of a batch.
type Scored struct {
	Groups []ScoredGroup
	Report RolloutReport
}

// Unparseable is the mechanism under which RolloutReport.Share counts
// samples that could not be parsed into a proposal.
const Unparseable = "(unparseable)"

// RolloutReport describes one scored batch (a rollout).
type RolloutReport struct {
	Groups     int     // groups scored
	Kept       int     // informative groups kept
	Flat       int     // groups dropped as flat
	Invalid    int     // proposals that were invalid (unparseable, rejected by W, bad prediction)
	MeanReward float64 // mean shaped reward over all proposals
	MeanGain   float64 // mean predicted gain of valid proposals in σ_e units
	// Share is each mechanism direction's share of the sampled proposals,
	// most frequent first (METHOD.md §1 On-policy calibration, case study).
	Share []calibrate.Share
	// Anchors is set when WMRL's anchor runs were absorbed.
	Anchors *AnchorReport
}

// CalibrationReport describes one calibration point.
type CalibrationReport struct {
	Step   int // the step the point was picked at
	Budget int // B_u
	// Trigger says why the point ran when Config.Trigger is set: the
	// monitor that crossed its threshold (e.g. "gap 1.8 > 1") or
	// "deadline step N"; "" under the fixed schedule.
	Trigger  string
	Executed int // runs that produced a record (feasible or not)
	// Records are the new real records added to M.
	Records []records.Record
	// Predicted and Real are the predicted (under M_u, before the new
	// records) and real normalised rewards (clip(g/τ_e, −c, c), −c when
	// infeasible; the predicted one normalises the value Reward.Pessimism
	// blends with q10, the gain itself by default) of the executed
	// proposals, grouped by task in order of first appearance, as the
	// reliability monitors see them. Calibration picks by Predicted.
	Predicted, Real [][]float64
	// Monitors are the reliability monitors on exactly those proposals.
	Monitors calibrate.Monitors
	// MeanRealGain is the mean real gain of the feasible runs in σ_e units.
	MeanRealGain float64
	Infeasible   int
	// Failures lists the picked proposals that produced no record (a build
	// or run failure that was not the proposal's fault), one "task key:
	// reason" line each; they are not in Records and not retried.
	Failures []string
}

// Absorbed is what Absorb made of the runs: a calibration's report, or
// WMRL's anchor report with the batch scored again on the real gains.
type Absorbed struct {
	Calibration *CalibrationReport
	Anchors     *AnchorReport
	Scored      *Scored
}

// Status is the loop's state, as a driver reports it.
type Status struct {
	// Step is the driver's step the loop last observed.
	Step int
	// Calibrations is the number of calibration points whose records
	// joined M; Calibrating reports a point's runs are pending.
	Calibrations int
	Calibrating  bool
	// Evidence is the current M (M_0 plus every calibration record); Pool
	// the state pool (it changes as the loop goes on).
	Evidence records.Evidence
	Pool     *records.Pool
	// Candidates is the number of groups the next calibration chooses
	// among.
	Candidates int
	// Cost and Runs are the summed cost and number of the real runs paid
	// for (fresh executions); Reused the measurements served without a run.
	Cost   records.Cost
	Runs   int
	Reused int
}
