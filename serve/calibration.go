package serve

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/records"
)

// Calibration runs off the scoring path (METHOD.md §1 On-policy
// calibration: each training segment between calibrations has a fixed
// world-model reward). When the trainer's step reaches a scheduled point,
// the service picks the point's runs (greedy top-B_u over the candidates
// scored since the last point), checkpoints the picks and executes them in
// the background; scoring goes on under M_u meanwhile. Once the runs are
// done, their records join M at the next step boundary: the first request
// of a later step applies them before it is scored, and that step is the
// calibration's effective_step, from which every group is scored under
// M_{u+1}. A calibration's runs that fail are retried at the next step
// boundary (an idempotent executor pays nothing twice).

// Calibration states.
const (
	CalRunning = "running" // its runs are executing
	CalReady   = "ready"   // its runs are done; they apply at the next step
	CalFailed  = "failed"  // its runs failed; retried at the next step
	CalApplied = "applied" // its records are in M from EffectiveStep on
)

// CalibrationStatus is one calibration point as the service reports it.
type CalibrationStatus struct {
	// Point is u, Step the trainer's step it was picked at, Budget B_u
	// and Runs the number of runs picked.
	Point  int    `json:"point"`
	Step   int    `json:"step"`
	Budget int    `json:"budget"`
	Runs   int    `json:"runs"`
	State  string `json:"state"`
	Error  string `json:"error,omitempty"`
	// EffectiveStep is the first step scored under M_{u+1}.
	EffectiveStep *int               `json:"effective_step,omitempty"`
	Result        *CalibrationResult `json:"result,omitempty"`
}

// CalibrationResult is an applied calibration's report on the wire
// (loop.CalibrationReport; monitors that are undefined are absent).
type CalibrationResult struct {
	Executed     int              `json:"executed"`
	Infeasible   int              `json:"infeasible"`
	MeanRealGain float64          `json:"mean_real_gain_sigmas"`
	Records      []records.Record `json:"records"`
	Failures     []string         `json:"failures,omitempty"`
	DeltaM       *float64         `json:"delta_m,omitempty"`
	Gap          *float64         `json:"gap,omitempty"`
	Cosine       *float64         `json:"advantage_cosine,omitempty"`
	Accuracy     *float64         `json:"pairwise_accuracy,omitempty"`
}

func calibrationResult(r loop.CalibrationReport) CalibrationResult {
	m := r.Monitors
	return CalibrationResult{Executed: r.Executed, Infeasible: r.Infeasible, MeanRealGain: r.MeanRealGain, Records: r.Records,
		Failures: r.Failures, DeltaM: finPtr(m.Bias.Delta), Gap: finPtr(m.Bias.Gap()), Cosine: finPtr(m.Cosine), Accuracy: finPtr(m.Accuracy)}
}

// calRun is the calibration in flight. Guarded by Service.mu.
type calRun struct {
	u       int
	jobs    []loop.RunJob
	runs    []loop.RealRun
	err     error
	done    bool
	running bool
}

// status returns the status entry of point u. The caller holds mu.
func (s *Service) status(u int) *CalibrationStatus {
	for i := range s.cals {
		if s.cals[i].Point == u {
			return &s.cals[i]
		}
	}
	return nil
}

// startDue launches the runs of the calibration the loop picked when it
// observed the step (or of one restored in flight). The pick is durable
// before the runs start: it is the step's journal entry, replayed to the
// same pick. The caller holds mu.
func (s *Service) startDue() {
	if s.closed {
		return
	}
	rd := s.loop.Ready()
	if rd.Kind != loop.CalibrationRuns || s.cal != nil {
		return
	}
	s.cal = &calRun{u: s.loop.Status().Calibrations, jobs: rd.Execute}
	s.launch(s.cal)
}

// notePick records the calibration point the loop picked when it
// observed a step (applying the step's op). The caller holds mu.
func (s *Service) notePick() {
	rd := s.loop.Ready()
	if u := s.loop.Status().Calibrations; rd.Kind == loop.CalibrationRuns && s.status(u) == nil {
		s.cals = append(s.cals, CalibrationStatus{Point: u, Step: rd.Step, Budget: s.cfg.Schedule.Budgets[u], Runs: len(rd.Execute), State: CalRunning})
	}
}

// launch executes a calibration's runs in the background. The caller
// holds mu.
func (s *Service) launch(c *calRun) {
	c.running, c.err = true, nil
	if st := s.status(c.u); st != nil {
		st.State, st.Error = CalRunning, ""
	}
	s.goBG(func() {
		runs, err := s.execute(s.ctx, c.jobs)
		s.mu.Lock()
		defer s.mu.Unlock()
		c.running = false
		st := s.status(c.u)
		if err != nil {
			c.err = err
			if st != nil {
				st.State, st.Error = CalFailed, records.ErrorExcerpt(err)
			}
			return
		}
		c.runs, c.done = runs, true
		if st != nil {
			st.State = CalReady
		}
	})
}

// applyReady adds a finished calibration's records to M before the first
// request of step is scored: its runs are journalled (and synced) before
// they are applied, so that a restart at any later moment has them, and a
// checkpoint is then written off the lock to compact the journal. The
// caller holds mu.
func (s *Service) applyReady(step int) error {
	c := s.cal
	if c == nil || !c.done {
		return nil
	}
	if len(c.runs) != len(c.jobs) {
		return fmt.Errorf("%w: calibration %d: %d runs for %d jobs", ErrState, c.u, len(c.runs), len(c.jobs))
	}
	// The runs applied are the journal's, as a replay reads them.
	b, err := json.Marshal(c.runs)
	if err != nil {
		return fmt.Errorf("%w: calibration %d: %w", ErrState, c.u, err)
	}
	var runs []loop.RealRun
	if err := json.Unmarshal(b, &runs); err != nil {
		return fmt.Errorf("%w: calibration %d: %w", ErrState, c.u, err)
	}
	if _, err := s.commit(op{Kind: "calibrate", Point: c.u, Step: step, Real: runs}); err != nil {
		return err
	}
	s.checkpoint()
	return nil
}

// applyCalibration adds point u's runs to M from step on (a journalled
// calibrate op). The caller holds mu.
func (s *Service) applyCalibration(u, step int, runs []loop.RealRun) error {
	if st := s.loop.Status(); !st.Calibrating || st.Calibrations != u {
		return fmt.Errorf("calibrate op: point %d, but %d done, calibrating %t", u, st.Calibrations, st.Calibrating)
	}
	ab, err := s.loop.Absorb(runs)
	if s.loop.Status().Calibrating {
		return fmt.Errorf("calibration %d: %w", u, err)
	}
	if s.cal != nil && s.cal.u == u {
		s.cal = nil
	}
	rep := *ab.Calibration
	res := calibrationResult(rep)
	eff := step
	if st := s.status(u); st != nil {
		st.State, st.Error, st.EffectiveStep, st.Result = CalApplied, "", &eff, &res
		if err != nil {
			st.Error = records.ErrorExcerpt(err) // M was extended: the calibration is done
		}
	}
	s.mon = &MonitorsResponse{API: APIVersion, Calibrated: true, Point: u, DeltaM: res.DeltaM, Gap: res.Gap, Cosine: res.Cosine, Accuracy: res.Accuracy}
	s.met.calibrated(rep)
	return nil
}

// observeStep takes a request's step: a step more than StepLag behind,
// more than MaxStepJump ahead or beyond MaxStep is refused; a later step
// applies a finished calibration, is journalled, and starts the
// calibration due at it. The caller holds mu.
func (s *Service) observeStep(step int) error {
	cur := s.loop.Status().Step
	switch {
	case step < 0 || step > MaxStep:
		return badRequest("bad_step", "step = %d, want 0..%d", step, MaxStep)
	case step < cur-s.cfg.StepLag:
		return conflict("stale_step", "step %d is behind the service's step %d (at most %d behind are accepted)", step, cur, s.cfg.StepLag)
	case step > cur+s.cfg.MaxStepJump:
		return badRequest("step_jump", "step %d is more than %d steps after the service's step %d", step, s.cfg.MaxStepJump, cur)
	case step <= cur:
		return nil
	}
	if err := s.applyReady(step); err != nil {
		return err
	}
	if c := s.cal; c != nil && !c.running && c.err != nil {
		s.launch(c) // retry a calibration whose runs failed
	}
	if _, err := s.commit(op{Kind: "step", Step: step}); err != nil {
		return err
	}
	s.startDue()
	return nil
}

// AdvanceResponse answers an advance request at once: the step and every
// calibration point started so far (poll GET /v1/calibrations, or advance
// again, to follow them).
type AdvanceResponse struct {
	API          string              `json:"api"`
	Step         int                 `json:"step"`
	Calibrations []CalibrationStatus `json:"calibrations"`
}

// Advance records the trainer's step (a step already passed changes
// nothing) and answers at once with the calibrations' status; a
// calibration due at the step starts in the background. A retried advance
// answers the same.
func (s *Service) Advance(step int) (AdvanceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.observeStep(step); err != nil {
		return AdvanceResponse{}, err
	}
	return AdvanceResponse{API: APIVersion, Step: s.loop.Status().Step, Calibrations: s.calibrations()}, nil
}

// Calibrations returns every calibration point started so far.
func (s *Service) Calibrations() AdvanceResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return AdvanceResponse{API: APIVersion, Step: s.loop.Status().Step, Calibrations: s.calibrations()}
}

func (s *Service) calibrations() []CalibrationStatus {
	return append([]CalibrationStatus{}, s.cals...)
}

// execute runs jobs for real, at most Parallel at once, in job order.
func (s *Service) execute(ctx context.Context, jobs []loop.RunJob) ([]loop.RealRun, error) {
	runs, err := lm2lm.RunRealJobs(ctx, s.c.Builder, s.c.Executor, s.cfg.Parallel, jobs)
	if err != nil {
		return nil, fmt.Errorf("serve: runs: %w", err)
	}
	return runs, nil
}

// MonitorsResponse reports the reliability monitors.
type MonitorsResponse struct {
	API string `json:"api"`
	// Calibrated is false before the first applied calibration; the
	// monitors are then absent. Point is that calibration's u.
	Calibrated bool `json:"calibrated"`
	Point      int  `json:"point"`
	// DeltaM is Δ_M = J̄ − Ĵ_M and Gap = Ĵ_M − J̄ on the last
	// calibration's runs (METHOD.md §1 Known weaknesses); Cosine the
	// advantage cosine, Accuracy the pairwise accuracy.
	DeltaM   *float64 `json:"delta_m,omitempty"`
	Gap      *float64 `json:"gap,omitempty"`
	Cosine   *float64 `json:"advantage_cosine,omitempty"`
	Accuracy *float64 `json:"pairwise_accuracy,omitempty"`
	// Share is each mechanism's share of the proposals scored since the
	// last calibration point started.
	Share []ShareRow `json:"mechanism_share"`
}

// ShareRow is one mechanism's share.
type ShareRow struct {
	Mechanism string  `json:"mechanism"`
	Count     int     `json:"count"`
	Fraction  float64 `json:"fraction"`
}

// Monitors returns the monitors (NaN ones absent); they survive restarts.
func (s *Service) Monitors() MonitorsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := MonitorsResponse{API: APIVersion}
	if s.mon != nil {
		r = *s.mon
	}
	r.Share = []ShareRow{}
	for _, sh := range s.loop.Share() {
		r.Share = append(r.Share, ShareRow{Mechanism: sh.Mechanism, Count: sh.Count, Fraction: sh.Fraction})
	}
	return r
}

func finPtr(x float64) *float64 {
	if x != x || x > 1e308 || x < -1e308 {
		return nil
	}
	return &x
}
