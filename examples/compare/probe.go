package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// probeGroup is the number of proposals sampled per probed task: the
// trainer's group size G = 8 (METHOD.md §1 Policy optimisation).
const probeGroup = 8

// prober measures the reliability monitors of the world model a trainer
// uses (METHOD.md §1 On-policy calibration: Δ_M, advantage cosine,
// pairwise accuracy, gap) the same way for every method: at each
// calibration step u and after the last step, -probe training tasks drawn
// with the seed and step, G proposals of the current policy per task (empty
// history), predicted under the evidence the trainer holds then (M_0 plus
// the records of the calibrations before u, as the paper's monitors see
// M_u), and each executed for real. The probe's runs
// never join M, so a static world model stays static; they are counted
// apart from the method's budget.
type prober struct {
	e        *env
	ex       *counter
	world    rwm.WorldModel
	pol      proposer.Proposer
	evidence records.Evidence
	seed     uint64
	tasks    int
	// before is the evidence before the latest calibration, until the
	// next probe has measured under it too.
	before *records.Evidence
}

// add puts a calibration's new records into the evidence.
func (p *prober) add(c *lm2lm.CalibrationReport) error {
	ev, err := records.NewEvidence(append(p.evidence.Records(), c.Records...)...)
	if err != nil {
		return err
	}
	p.evidence = ev
	return nil
}

// measure runs one probe after step and returns its monitors and the
// predicted and real normalised rewards of its runs.
func (p *prober) measure(ctx context.Context, step int) (CalibrationResult, error) {
	rng := rand.New(rand.NewPCG(p.seed, 0x70726f6265+uint64(step)))
	cfg := reward.DefaultConfig()
	var pred, predBefore, real [][]float64
	out := CalibrationResult{Step: step}
	before := p.before
	p.before = nil
	for _, ti := range rng.Perm(len(p.e.train))[:min(p.tasks, len(p.e.train))] {
		t := p.e.train[ti]
		smp, err := p.pol.Propose(ctx, records.State{Task: t}, probeGroup, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
		if err != nil {
			return out, err
		}
		var gains, predicted, predictedBefore []float64
		var feasible []bool
		for _, s := range smp {
			if s.Invalid {
				continue
			}
			pr, err := p.world.Predict(ctx, rwm.Query{Task: t, Proposal: s.Proposal, Evidence: p.evidence})
			if err != nil || !pr.Valid {
				continue // a proposal the world model rejects has no predicted reward
			}
			prB := pr
			if before != nil {
				if prB, err = p.world.Predict(ctx, rwm.Query{Task: t, Proposal: s.Proposal, Evidence: *before}); err != nil || !prB.Valid {
					continue
				}
			}
			rec, _, err := lm2lm.RunReal(ctx, p.e.lab, p.ex, t, s.Proposal)
			if err != nil {
				return out, fmt.Errorf("probe at step %d: %w", step, err)
			}
			if rec.Task.ID == "" {
				continue // not measured (a failure that was not the proposal's)
			}
			out.Executed++
			predicted, gains = append(predicted, pr.Gain), append(gains, rec.Gain)
			predictedBefore = append(predictedBefore, prB.Gain)
			feasible = append(feasible, rec.Infeasible == "")
		}
		if len(gains) < 2 {
			continue // a group of one ranks nothing
		}
		tau, tauB := reward.ScaleFor(t, predicted), reward.ScaleFor(t, predictedBefore)
		gp, gpB, gr := make([]float64, len(gains)), make([]float64, len(gains)), make([]float64, len(gains))
		for k := range gains {
			gp[k] = reward.Normalise(predicted[k], tau, cfg)
			gpB[k] = reward.Normalise(predictedBefore[k], tauB, cfg)
			gr[k] = -cfg.Clip
			if feasible[k] {
				gr[k] = reward.Normalise(gains[k], tau, cfg)
			} else {
				out.Infeasible++
			}
		}
		pred, predBefore, real = append(pred, gp), append(predBefore, gpB), append(real, gr)
		out.Predicted, out.Real = append(out.Predicted, gp...), append(out.Real, gr...)
	}
	if len(pred) > 0 {
		m := calibrate.Monitor(pred, real)
		out.Delta, out.Cosine, out.Accuracy, out.Gap = num(m.Bias.Delta), num(m.Cosine), num(m.Accuracy), num(m.Bias.Gap())
		if before != nil {
			out.AccuracyBefore = num(calibrate.Monitor(predBefore, real).Accuracy)
		}
	}
	return out, nil
}
