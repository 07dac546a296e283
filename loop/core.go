package loop

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// This file is the loop's planning core: pure functions of a batch of
// groups (states, samples, predictions, real outcomes) that compute τ,
// shaped rewards, dynamic sampling, advantages, synthetic records,
// calibration picks and monitors. The only randomness is an explicit
// *rand.Rand.

// sample is one proposal of a group with what the core computed of it.
type sample struct {
	proposer.Sample
	pred rwm.Prediction // the world model's answer (zero when not asked)
	ok   bool           // prediction obtained and valid
	// gain is the gain that was shaped: the prediction, debiased by the
	// correction (WMRL), or the real gain of an anchor run.
	gain float64
	// scaled is r(s, a; M) (reward.Rate): the normalised reward before the
	// group-dependent duplicate penalty and diversity bonus. Calibration
	// rates by it and the monitors compare it with the real reward.
	scaled float64
	reward float64 // the shaped reward R_i
	// change is the TaskChange key of a candidate's measurable sample,
	// made when it joins the candidates so that a calibration point's
	// pick does not make thousands at once ("" until then).
	change string
}

// changeKey returns the TaskChange key of sample s of group g.
func (g *group) changeKey(s *sample) string {
	if s.change != "" {
		return s.change
	}
	return records.TaskChange{Task: g.state.Task, Proposal: s.Proposal}.Key()
}

// measurable reports whether the sample is asked of the world model and
// may be run for real: parsed, and not the no-change proposal (which earns
// the no-change reward whatever a world model says of it, METHOD.md §1
// Reward 2; the embedded model answers Valid = false for it, which would
// score it −c instead of −3).
func (s *sample) measurable() bool { return !s.Invalid && !s.Proposal.IsNoChange() }

// valid reports whether the sample counts as valid for reward shaping: its
// prediction is valid, or it is the no-change proposal.
func (s *sample) valid() bool { return s.ok || (!s.Invalid && s.Proposal.IsNoChange()) }

// group is one state's proposals.
type group struct {
	state   records.State
	tau     float64 // τ_e of the group's task in this rollout
	samples []sample
}

// rolloutData is a batch of groups (a rollout): a group per state.
type rolloutData struct{ groups []*group }

// newGroup returns the group of state s with the policy's samples.
func newGroup(s records.State, smp []proposer.Sample) *group {
	g := &group{state: s, samples: make([]sample, len(smp))}
	for i, x := range smp {
		g.samples[i].Sample = x
	}
	return g
}

// ref names sample i of group g.
type ref struct{ g, i int }

// predictionJobs clears every prediction of the rollout and returns the
// samples the world model must be asked about, in order.
func (ro *rolloutData) predictionJobs() []ref {
	var jobs []ref
	for gi, g := range ro.groups {
		for i := range g.samples {
			s := &g.samples[i]
			s.pred, s.ok = rwm.Prediction{}, false
			if s.measurable() {
				jobs = append(jobs, ref{gi, i})
			}
		}
	}
	return jobs
}

// acceptPrediction turns a world model's answer into the sample's
// prediction. A "valid" prediction with a non-finite gain cannot be shaped
// nor stored as a synthetic record, so it is a bad prediction; an unusable
// answer about one proposal (rwm.ErrBadPrediction, records.ErrInvalid)
// scores it as invalid rather than stopping training. Any other error is
// returned.
func acceptPrediction(s *sample, p rwm.Prediction, err error) error {
	if err == nil {
		if verr := p.Validate(); verr != nil {
			err = fmt.Errorf("%w: %w", rwm.ErrBadPrediction, verr)
		}
	}
	switch {
	case err == nil:
		s.pred, s.ok = p, p.Valid
	case errors.Is(err, rwm.ErrBadPrediction), errors.Is(err, records.ErrInvalid):
		s.pred, s.ok = rwm.Prediction{Reason: err.Error()}, false
	default:
		return err
	}
	return nil
}

// core is the loop's pure planning core.
type core struct {
	cfg  Config
	corr correction // WMRL or none
	// unmeasured holds the IDs of the tasks no real run measures
	// (Setup.Unmeasured): calibration never picks their samples.
	unmeasured map[string]bool
}

// shape computes τ_e per task over the rollout's valid predicted gains
// (METHOD.md §1 Reward 1), maps each gain through the correction, and
// shapes the rewards of every group (METHOD.md §1 Reward).
func (c *core) shape(ro *rolloutData) {
	byTask := map[string][]float64{}
	sigma := map[string]float64{}
	for _, g := range ro.groups {
		sigma[g.state.Task.ID] = g.state.Task.SeedNoise
		for _, s := range g.samples {
			if s.ok {
				byTask[g.state.Task.ID] = append(byTask[g.state.Task.ID], s.pred.Gain)
			}
		}
	}
	for _, g := range ro.groups {
		g.tau = reward.TaskScale(sigma[g.state.Task.ID], byTask[g.state.Task.ID])
		cands := make([]reward.Candidate, len(g.samples))
		for i := range g.samples {
			s := &g.samples[i]
			gain := c.corr.debias(s.pred.Gain, g.tau)
			cands[i] = reward.NewCandidate(g.state, s.Proposal, gain, s.valid())
			if s.ok && s.pred.HasInterval {
				cands[i].Low, cands[i].HasLow = c.corr.debias(s.pred.Low, g.tau), true
			}
			s.gain = gain
			s.scaled = reward.Rate(c.cfg.Reward, g.tau, cands[i])
		}
		setRewards(g, reward.Shape(c.cfg.Reward, g.tau, cands))
	}
}

// setRewards stores a group's shaped rewards.
func setRewards(g *group, r []float64) {
	for i := range g.samples {
		g.samples[i].reward = r[i]
	}
}

// rewards returns a group's shaped rewards.
func (g *group) rewards() []float64 {
	r := make([]float64, len(g.samples))
	for i, s := range g.samples {
		r[i] = s.reward
	}
	return r
}

// report returns the rollout's counts, means and mechanism shares.
func (ro *rolloutData) report() RolloutReport {
	var rep RolloutReport
	var mechs []string
	var sumR, sumG float64
	var nR, nG int
	for _, g := range ro.groups {
		for _, s := range g.samples {
			mech := s.Proposal.Mechanism
			if s.Invalid && strings.TrimSpace(mech) == "" {
				mech = Unparseable
			}
			mechs = append(mechs, mech)
			sumR += s.reward
			nR++
			switch {
			case s.ok:
				sumG += s.pred.Gain / g.state.Task.SeedNoise
				nG++
			case !s.valid():
				rep.Invalid++
			}
		}
	}
	rep.Groups = len(ro.groups)
	if nR > 0 {
		rep.MeanReward = sumR / float64(nR)
	}
	if nG > 0 {
		rep.MeanGain = sumG / float64(nG)
	}
	rep.Share = calibrate.MechanismShare(mechs)
	return rep
}

// synthetic returns the rollout's (state, proposal, predicted gain) triples
// as synthetic records stamped now (METHOD.md §1 Synthetic state
// expansion). No-change proposals are valid but unpredicted: no record.
func (ro *rolloutData) synthetic(now time.Time) []records.Record {
	var out []records.Record
	for _, g := range ro.groups {
		for _, s := range g.samples {
			if s.ok {
				out = append(out, records.Record{
					Task: g.state.Task, Proposal: s.Proposal, Gain: s.pred.Gain,
					Loss: g.state.Task.RefLoss - s.pred.Gain, Source: records.Synthetic, Time: now,
				})
			}
		}
	}
	return out
}

// keep applies dynamic sampling (METHOD.md §1 Policy optimisation): the
// indices of the informative groups kept, at most Quota of them in order
// (every one when Quota is 0), and the kept and flat counts.
func (c *core) keep(ro *rolloutData) ([]int, dapo.Report) {
	rewards := make([][]float64, len(ro.groups))
	for gi, g := range ro.groups {
		rewards[gi] = g.rewards()
	}
	quota := c.cfg.Quota
	if quota == 0 {
		quota = len(ro.groups)
	}
	// A batch short of its quota keeps what it has (dapo.ErrShortBatch):
	// the driver decides what a batch without signal means.
	kept, dr, _ := dapo.Select(rewards, quota, c.cfg.FlatTol)
	return kept, dr
}

// advantages returns group g's advantages (METHOD.md §1 Policy
// optimisation), scaled by weight when it is not 1 (WMRL's anchor groups,
// METHOD.md §2 Inverse-Variance Denoising).
func (c *core) advantages(g *group, weight float64) []float64 {
	adv := dapo.Advantages(g.rewards(), c.cfg.Norm, c.cfg.Eps)
	if weight != 1 {
		dapo.ScaleAdvantages(adv, weight)
	}
	return adv
}

// calibrationPicks returns the samples that calibration executes with
// budget B_u (METHOD.md §1 On-policy calibration): TopRated picks the
// greedy top-B by r(s, a; M_u); RandomCalibration draws uniformly with rng
// under the same task and key limits. Changes already measured on their
// task (in m) are not candidates unless DuplicateRuns is set: with an
// idempotent executor the second run returns the stored record, a duplicate
// in M that measured nothing.
func (c *core) calibrationPicks(ro *rolloutData, m records.Evidence, budget int, rng *rand.Rand) []ref {
	known := map[string]bool{}
	if !c.cfg.DuplicateRuns {
		for i := 0; i < m.Len(); i++ {
			r := m.At(i)
			known[records.TaskChange{Task: r.Task, Proposal: r.Proposal}.Key()] = true
		}
	}
	var cands []ref
	var scores []float64
	var keys []string
	for gi, g := range ro.groups {
		if c.unmeasured[g.state.Task.ID] {
			continue
		}
		for i, s := range g.samples {
			if !s.measurable() {
				continue
			}
			key := g.changeKey(&g.samples[i])
			if known[key] {
				continue
			}
			cands = append(cands, ref{gi, i})
			scores = append(scores, s.scaled)
			keys = append(keys, key)
		}
	}
	var opt calibrate.Options
	if !c.cfg.DuplicateRuns {
		opt.Key, opt.UniqueKeys = keys, true
	}
	if c.cfg.Calibration == RandomCalibration {
		perm := rng.Perm(len(scores))
		rnd := make([]float64, len(scores))
		for r, i := range perm {
			rnd[i] = float64(len(scores) - r)
		}
		scores = rnd
	}
	pick := calibrate.TopBWith(scores, budget, opt)
	out := make([]ref, len(pick))
	for k, ci := range pick {
		out[k] = cands[ci]
	}
	return out
}

// changes returns the (task, proposal) of each named sample.
func (ro *rolloutData) changes(refs []ref) []records.TaskChange {
	out := make([]records.TaskChange, len(refs))
	for k, r := range refs {
		g := ro.groups[r.g]
		out[k] = records.TaskChange{Task: g.state.Task, Proposal: g.samples[r.i].Proposal}
	}
	return out
}

// realReward is the normalised reward of a real outcome without bonus:
// clip(g/τ_e, −c, c), −c when infeasible.
func realReward(cfg reward.Config, valid bool, gain, tau float64) float64 {
	if !valid {
		return -cfg.Clip
	}
	return reward.Normalise(gain, tau, cfg)
}

// calibrationReport turns the real runs of the picked samples into the
// calibration point's report: the new records, the failures, and the
// reliability monitors on predicted (under M_u) vs real normalised rewards,
// grouped by task (library choice: greedy top-B rarely takes two proposals
// of one state, so within-state groups would leave the cosine and the
// pairwise accuracy undefined; proposals of one task share b_e and σ_e).
func (c *core) calibrationReport(ro *rolloutData, step, budget int, picks []ref, runs []RealRun) CalibrationReport {
	rep := CalibrationReport{Step: step, Budget: budget}
	byTask := map[string]int{}
	var sumGain float64
	var nGain int
	for k, p := range picks {
		g := ro.groups[p.g]
		s := g.samples[p.i]
		if !runs[k].Measured {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %s", realrun.OnTask(s.Proposal, g.state.Task), runs[k].Failure))
			continue
		}
		rec := runs[k].Record
		rep.Records = append(rep.Records, rec)
		if rec.Infeasible != "" {
			rep.Infeasible++
		} else {
			sumGain += rec.Gain / g.state.Task.SeedNoise
			nGain++
		}
		slot, seen := byTask[g.state.Task.ID]
		if !seen {
			slot = len(rep.Predicted)
			byTask[g.state.Task.ID] = slot
			rep.Predicted = append(rep.Predicted, nil)
			rep.Real = append(rep.Real, nil)
		}
		rep.Predicted[slot] = append(rep.Predicted[slot], s.scaled)
		rep.Real[slot] = append(rep.Real[slot], realReward(c.cfg.Reward, rec.Infeasible == "", rec.Gain, g.tau))
	}
	if nGain > 0 {
		rep.MeanRealGain = sumGain / float64(nGain)
	}
	rep.Executed = len(rep.Records)
	rep.Monitors = calibrate.Monitor(rep.Predicted, rep.Real)
	return rep
}

// calibrationDue is the calibration decision at an observed step (updates
// done), given the schedule points already executed (done), the step of
// the last calibration (negative: none) and its monitors (nil: none).
// Without a trigger it is the fixed schedule: point u = done runs at the
// first observed step at or after Steps[u] (METHOD.md §1 On-policy
// calibration; a driver whose step jumps may pass a point's step). With a
// trigger (beyond the paper, METHOD.md §1 Known weaknesses) the schedule's
// budgets are spent in order: the next point u = done runs at the first
// observed step where the trigger fires on the last calibration's
// monitors, and at step Steps[u] + Horizon at the latest, so the trigger
// never spends more than the schedule's total nor calibrates after the
// last scheduled step plus Horizon. Before the first calibration there are no real residuals, so
// point 0 waits for its deadline. reason says why the point runs ("" for
// the fixed schedule).
func calibrationDue(s calibrate.Schedule, trig *TriggerConfig, step, done, last int, m *calibrate.Monitors) (u, budget int, reason string, ok bool) {
	if done >= len(s.Steps) {
		return 0, 0, "", false
	}
	if trig == nil {
		if s.Steps[done] <= step {
			return done, s.Budgets[done], "", true
		}
		return 0, 0, "", false
	}
	if deadline := s.Steps[done] + trig.Horizon; step >= deadline {
		return done, s.Budgets[done], fmt.Sprintf("deadline step %d", deadline), true
	}
	if m == nil {
		return 0, 0, "", false
	}
	if fire, why := trig.Rule.Fire(step, last, *m); fire {
		return done, s.Budgets[done], why, true
	}
	return 0, 0, "", false
}
