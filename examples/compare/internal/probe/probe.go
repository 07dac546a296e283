// Package probe holds the comparison's research probes: measurements taken
// beside a method, the same way for every method, that are no part of what
// the method computes. A Monitor measures the reliability of a trainer's
// world model on the policy's own proposals at each calibration step, how
// far each calibration moved its predictions (Locality) and, given the
// training tasks' landscape, how the world model and the policy rank
// their mechanisms (Teacher); Judge scores
// an evaluation against a landscape store (internal/landscape) and
// References ranks each task's best mechanism from the landscape alone.
// examples/compare drives them: a Monitor observes the trainer's steps, and
// the judgement reads the evaluation once it is done.
package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// Group is the number of proposals sampled per probed task: the trainer's
// group size G = 8 (METHOD.md §1 Policy optimisation).
const Group = 8

// Point is one reliability measurement: the monitors of a calibration
// point or of a probe, and the predicted and real normalised rewards of
// the runs it executed. Undefined numbers are nil.
type Point struct {
	Step       int      `json:"step"`
	Executed   int      `json:"executed"`
	Infeasible int      `json:"infeasible"`
	Delta      *float64 `json:"delta"`
	Cosine     *float64 `json:"advantage_cosine"`
	Accuracy   *float64 `json:"pairwise_accuracy"`
	// AccuracyBefore is, for a probe right after a calibration, the
	// pairwise accuracy of the same proposals predicted under the evidence
	// before the calibration's records (so Accuracy − AccuracyBefore is
	// what those records did to the ranking).
	AccuracyBefore *float64  `json:"pairwise_accuracy_before,omitempty"`
	Gap            *float64  `json:"gap"`
	Predicted      []float64 `json:"predicted_reward"`
	Real           []float64 `json:"real_reward"`
	// Trigger says why a calibration ran under an adaptive trigger (the
	// monitor that fired, or "deadline step N"); empty under the fixed
	// schedule and for a probe.
	Trigger string `json:"trigger,omitempty"`
}

// Config is what a Monitor measures with: the trainer's world model,
// policy and starting evidence (M_0), the lab that runs the probes'
// proposals through Executor (counted apart from the method's budget), the
// training tasks, and when to probe.
type Config struct {
	World    rwm.WorldModel
	Policy   proposer.Proposer
	Evidence records.Evidence
	Builder  builder.Builder
	Executor builder.Executor
	Train    []records.Task
	// Seed draws the probed tasks and proposals (with the step).
	Seed uint64
	// Tasks is the number of training tasks probed at each probe step,
	// each with Group proposals (0 = no probe and no locality).
	Tasks int
	// Steps are the calibration steps of the schedule, and Last the last
	// training step: the probe steps.
	Steps []int
	Last  int
	// Teacher, when set and Policy is a *proposer.Policy, measures a
	// Teacher point at each probe step, whatever Tasks.
	Teacher *TeacherConfig
}

// Monitor measures the reliability monitors of the world model a trainer
// uses (METHOD.md §1 On-policy calibration: Δ_M, advantage cosine,
// pairwise accuracy, gap) the same way for every method: at each
// calibration step u and after the last step, Tasks training tasks drawn
// with the seed and step, Group proposals of the current policy per task
// (empty history), predicted under the evidence the trainer holds then
// (M_0 plus the records of the calibrations before u, as the paper's
// monitors see M_u), and each executed for real. At each calibration it
// also measures the calibration's Locality. The probe's runs never join
// M, so a static world model stays static.
type Monitor struct {
	cfg      Config
	evidence records.Evidence
	// before is the evidence before the latest calibration, until the
	// next probe has measured under it too.
	before   *records.Evidence
	probes   []Point
	locality []Locality
	teacher  *teacher
	teach    []Teacher
	err      error
}

// NewMonitor returns a monitor that has observed no step.
func NewMonitor(cfg Config) *Monitor {
	m := &Monitor{cfg: cfg, evidence: cfg.Evidence}
	if pol, ok := cfg.Policy.(*proposer.Policy); ok && cfg.Teacher != nil {
		m.teacher = &teacher{cfg: *cfg.Teacher, world: cfg.World, pol: pol, train: cfg.Train}
	}
	return m
}

// Observe takes in one training step of the trainer: after a calibration
// its records join the monitor's evidence and the calibration's locality
// is measured, and at a probe step the probe runs. After the first error
// it measures nothing more (Err).
func (m *Monitor) Observe(ctx context.Context, s lm2lm.StepReport) {
	if c := s.Calibration; c != nil && m.err == nil {
		before := m.evidence
		if m.err = m.add(c); m.err == nil && m.cfg.Tasks > 0 {
			m.before = &before
			var loc Locality
			loc, m.err = m.measureLocality(ctx, s.Step, before, c)
			m.locality = append(m.locality, loc)
		}
	}
	at := slices.Contains(m.cfg.Steps, s.Step) || s.Step == m.cfg.Last
	if m.teacher != nil && m.err == nil && at {
		var p Teacher
		p, m.err = m.teacher.measure(ctx, s.Step, m.evidence, m.cfg.Evidence)
		m.teach = append(m.teach, p)
	}
	if m.cfg.Tasks > 0 && m.err == nil && at {
		var p Point
		p, m.err = m.measure(ctx, s.Step)
		m.probes = append(m.probes, p)
	}
}

// Probes returns the probes measured so far, Locality each calibration's
// locality, and Err the error that stopped the monitor, if any.
func (m *Monitor) Probes() []Point      { return m.probes }
func (m *Monitor) Locality() []Locality { return m.locality }
func (m *Monitor) Teacher() []Teacher   { return m.teach }
func (m *Monitor) Err() error           { return m.err }

// add puts a calibration's new records into the evidence.
func (m *Monitor) add(c *lm2lm.CalibrationReport) error {
	ev, err := records.NewEvidence(append(m.evidence.Records(), c.Records...)...)
	if err != nil {
		return err
	}
	m.evidence = ev
	return nil
}

// measure runs one probe after step and returns its monitors and the
// predicted and real normalised rewards of its runs.
func (m *Monitor) measure(ctx context.Context, step int) (Point, error) {
	rng := rand.New(rand.NewPCG(m.cfg.Seed, 0x70726f6265+uint64(step)))
	cfg := reward.DefaultConfig()
	var pred, predBefore, real [][]float64
	out := Point{Step: step}
	before := m.before
	m.before = nil
	train := m.cfg.Train
	for _, ti := range rng.Perm(len(train))[:min(m.cfg.Tasks, len(train))] {
		t := train[ti]
		smp, err := m.cfg.Policy.Propose(ctx, records.State{Task: t}, Group, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
		if err != nil {
			return out, err
		}
		g, err := m.group(ctx, step, t, smp, before)
		if err != nil {
			return out, err
		}
		out.Executed += len(g.gains)
		if len(g.gains) < 2 {
			continue // a group of one ranks nothing
		}
		tau, tauB := reward.ScaleFor(t, g.predicted), reward.ScaleFor(t, g.predictedBefore)
		n := len(g.gains)
		gp, gpB, gr := make([]float64, n), make([]float64, n), make([]float64, n)
		for k := range g.gains {
			gp[k] = reward.Normalise(g.predicted[k], tau, cfg)
			gpB[k] = reward.Normalise(g.predictedBefore[k], tauB, cfg)
			gr[k] = -cfg.Clip
			if g.feasible[k] {
				gr[k] = reward.Normalise(g.gains[k], tau, cfg)
			} else {
				out.Infeasible++
			}
		}
		pred, predBefore, real = append(pred, gp), append(predBefore, gpB), append(real, gr)
		out.Predicted, out.Real = append(out.Predicted, gp...), append(out.Real, gr...)
	}
	if len(pred) > 0 {
		mon := calibrate.Monitor(pred, real)
		out.Delta, out.Cosine, out.Accuracy, out.Gap = stat.OrNil(mon.Bias.Delta), stat.OrNil(mon.Cosine), stat.OrNil(mon.Accuracy), stat.OrNil(mon.Bias.Gap())
		if before != nil {
			out.AccuracyBefore = stat.OrNil(calibrate.Monitor(predBefore, real).Accuracy)
		}
	}
	return out, nil
}

// probed is one probed task's measured proposals: the predicted gain
// under the current evidence and under the evidence before the latest
// calibration (the same without one), the real gain and feasibility.
type probed struct {
	gains, predicted, predictedBefore []float64
	feasible                          []bool
}

// group predicts and runs the valid samples of one probed task t; a
// proposal the world model rejects, or whose run failed for a reason that
// was not the proposal's, is left out.
func (m *Monitor) group(ctx context.Context, step int, t records.Task, smp []proposer.Sample, before *records.Evidence) (probed, error) {
	var g probed
	for _, s := range smp {
		if s.Invalid {
			continue
		}
		pr, err := m.cfg.World.Predict(ctx, rwm.Query{Task: t, Proposal: s.Proposal, Evidence: m.evidence})
		if err != nil || !pr.Valid {
			continue // a proposal the world model rejects has no predicted reward
		}
		prB := pr
		if before != nil {
			if prB, err = m.cfg.World.Predict(ctx, rwm.Query{Task: t, Proposal: s.Proposal, Evidence: *before}); err != nil || !prB.Valid {
				continue
			}
		}
		rec, _, err := lm2lm.RunReal(ctx, m.cfg.Builder, m.cfg.Executor, t, s.Proposal)
		if err != nil {
			return g, fmt.Errorf("probe at step %d: %w", step, err)
		}
		if rec.Task.ID == "" {
			continue // not measured (a failure that was not the proposal's)
		}
		g.predicted, g.gains = append(g.predicted, pr.Gain), append(g.gains, rec.Gain)
		g.predictedBefore = append(g.predictedBefore, prB.Gain)
		g.feasible = append(g.feasible, rec.Infeasible == "")
	}
	return g, nil
}
