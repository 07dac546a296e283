package lm2lm

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// WMRLConfig switches on WMRL's corrections (METHOD.md §2) in a Trainer:
// in every rollout a fraction of the kept groups (anchor groups) is also
// executed for real and trained on real rewards; an isotonic map from
// world-model score to real score is refitted online on the anchor pairs and
// applied to every world-model reward (Online Debiasing); anchor groups'
// advantages are up-weighted by the inverse-variance weight of the measured
// disagreement (Inverse-Variance Denoising). Its fields, defaults and
// validation are calibrate.WMRLConfig's.
//
// Scores are the normalised rewards clip(g/τ_e, −c, c) (−c when invalid)
// mapped affinely onto [0, 1] so that WMRL's binned isotonic fit on [0, 1]
// applies unchanged (library choice).
type WMRLConfig = calibrate.WMRLConfig

// DefaultWMRLConfig returns calibrate.DefaultWMRLConfig(): anchor fraction
// 0.10 (METHOD.md §2), debiaser 200/64/10/5000 and weighter 64/32/4/2
// (library choice, WMRL's code).
func DefaultWMRLConfig() WMRLConfig { return calibrate.DefaultWMRLConfig() }

// AnchorReport describes the anchor groups of one rollout.
type AnchorReport struct {
	Groups   int     // anchor groups executed
	Runs     int     // real runs (records obtained)
	Pairs    int     // (world-model score, real score) pairs added
	Fitted   bool    // the debiasing map has been fitted at least once
	Weight   float64 // weight applied to the anchor groups' advantages
	Disagree float64 // the weighter's current EWMA disagreement D
	// Failures lists the anchor runs that produced no record ("task key:
	// reason"); those samples keep their world-model rewards.
	Failures []string
}

// wmrlState is the trainer's WMRL state.
type wmrlState struct {
	cfg      WMRLConfig
	debiaser *calibrate.OnlineDebiaser // nil unless cfg.Debias
	weighter *calibrate.Weighter
}

func newWMRL(cfg WMRLConfig) *wmrlState {
	w := &wmrlState{cfg: cfg, weighter: cfg.NewWeighter()}
	// The debiaser's parameters are validated only when Debias is on (a
	// negative Bins would panic), so it is made only then.
	if cfg.Debias {
		w.debiaser = cfg.NewOnlineDebiaser()
	}
	return w
}

// toUnit and fromUnit map a normalised reward in [−c, c] onto [0, 1] and back.
func toUnit(r, c float64) float64   { return (r + c) / (2 * c) }
func fromUnit(u, c float64) float64 { return u*2*c - c }

// debiasGain maps a predicted gain through the isotonic map: the gain whose
// normalised score is the mapped score of ĝ's.
func (w *wmrlState) debiasGain(gain, tau float64, rc reward.Config) float64 {
	if !w.cfg.Debias || !w.debiaser.Calibrated() || !(tau > 0) {
		return gain
	}
	r := reward.Normalise(gain, tau, rc)
	return fromUnit(w.debiaser.Apply(toUnit(r, rc.Clip)), rc.Clip) * tau
}

// anchors executes the anchor groups among kept for real, replaces their
// rewards by rewards shaped from the real gains, feeds the debiaser and the
// weighter, and returns the anchor groups' indices with the weight for their
// advantages (METHOD.md §2).
func (t *Trainer) anchors(ctx context.Context, ro *rolloutData, kept []int) (map[int]bool, AnchorReport, error) {
	w := t.wmrl
	n := w.cfg.AnchorCount(len(kept))
	rep := AnchorReport{Groups: n}
	perm := t.rng.Perm(len(kept))
	anchor := map[int]bool{}
	for _, k := range perm[:n] {
		anchor[kept[k]] = true
	}
	ids := make([]int, 0, n)
	for _, gi := range kept {
		if anchor[gi] {
			ids = append(ids, gi)
		}
	}
	// Each distinct (task, change) among the anchor groups is run once:
	// a within-group duplicate earns min − δ whatever it measures
	// (METHOD.md §1 Reward 3), and a second run of one job measures nothing
	// new (with an idempotent executor it is the same record).
	jobOf := make([][]int, len(ro.groups)) // jobOf[gi][i]: index into jobs, −1 = not run
	jobIdx := map[string]int{}
	type job struct {
		task records.Task
		p    records.Proposal
	}
	var jobs []job
	for _, gi := range ids {
		g := ro.groups[gi]
		jobOf[gi] = make([]int, len(g.samples))
		for i, s := range g.samples {
			jobOf[gi][i] = -1
			if s.Invalid || s.Proposal.IsNoChange() {
				continue
			}
			key := g.state.Task.ID + "\x00" + s.Proposal.Key()
			j, ok := jobIdx[key]
			if !ok {
				j = len(jobs)
				jobIdx[key] = j
				jobs = append(jobs, job{g.state.Task, s.Proposal})
			}
			jobOf[gi][i] = j
		}
	}
	runs := make([]realRun, len(jobs))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(t.cfg.Parallel)
	for j, jb := range jobs {
		eg.Go(func() error {
			r, err := runReal(ectx, t.c.Builder, t.c.Executor, jb.task, jb.p)
			runs[j] = r
			return err
		})
	}
	err := eg.Wait()
	t.account(runs)
	if err != nil {
		return nil, rep, fmt.Errorf("lm2lm: step %d: anchor groups: %w", t.step+1, err)
	}
	var real []records.Record
	for j, r := range runs {
		if r.measured {
			real = append(real, r.rec)
			rep.Runs++
		} else {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s %s: %s", jobs[j].task.ID, jobs[j].p.Key(), r.failure))
		}
	}
	pushed := make([]bool, len(jobs))
	for _, gi := range ids {
		g := ro.groups[gi]
		cands := make([]reward.Candidate, len(g.samples))
		var pred, obs []float64
		seen := map[int]bool{}
		for i, s := range g.samples {
			var r realRun
			j := jobOf[gi][i]
			if j >= 0 {
				r = runs[j]
			}
			feasible := r.measured && r.rec.Infeasible == ""
			// A sample that was not measured (unparseable, no change, or a
			// run that failed for infrastructure reasons) keeps the world
			// model's verdict and its debiased gain.
			gain, valid := g.gains[i], g.valid(i)
			if r.measured {
				gain, valid = 0, feasible
				if feasible {
					gain = r.rec.Gain
				}
			}
			cands[i] = reward.NewCandidate(g.state, s.Proposal, gain, valid)
			if !r.measured || seen[j] {
				continue
			}
			seen[j] = true
			y := realReward(t.cfg.Reward, feasible, gain, g.tau)
			if w.cfg.Debias && !pushed[j] {
				pushed[j] = true
				raw := realReward(t.cfg.Reward, g.ok[i], g.preds[i].Gain, g.tau)
				w.debiaser.Push(toUnit(raw, t.cfg.Reward.Clip), toUnit(y, t.cfg.Reward.Clip))
				rep.Pairs++
			}
			pred = append(pred, g.scaled[i])
			obs = append(obs, y)
		}
		g.rewards = reward.Shape(t.cfg.Reward, g.tau, cands)
		if w.cfg.Weight && len(pred) > 1 {
			w.weighter.ObserveGroup(pred, obs)
		}
	}
	if err := t.pool.Add(real...); err != nil {
		return nil, rep, fmt.Errorf("lm2lm: step %d: anchor records: %w", t.step+1, err)
	}
	rep.Fitted = w.cfg.Debias && w.debiaser.Calibrated()
	rep.Weight = 1
	if w.cfg.Weight {
		rep.Weight = w.weighter.Weight()
	}
	rep.Disagree = w.weighter.Disagreement()
	return anchor, rep, nil
}

// weightAnchors scales the advantages of anchor items in place.
func weightAnchors(adv []float64, weight float64) {
	if weight != 1 {
		dapo.ScaleAdvantages(adv, weight)
	}
}
