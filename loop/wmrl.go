package loop

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// AnchorReport describes the anchor groups of one scored batch.
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

// correction is the composable part of the planning core that corrects
// world-model rewards with real runs: WMRL (METHOD.md §2), or none. The
// loop asks it to map predicted gains, to pick anchor groups among the
// kept ones, and to absorb the anchor runs; it never branches on which
// correction it holds.
type correction interface {
	// debias maps a predicted gain (of a task with scale τ) before shaping.
	debias(gain, tau float64) float64
	// anchors picks the anchor groups among kept (nil: none) with rng.
	anchors(ro *rolloutData, kept []int, rng *rand.Rand) *anchorPlan
	// absorb takes the real runs of plan's jobs: it reshapes the anchor
	// groups' rewards from the real gains and updates its own state. It
	// returns the report and the real records obtained.
	absorb(ro *rolloutData, plan *anchorPlan, runs []RealRun) (AnchorReport, []records.Record)
	// state returns the correction's state for a checkpoint (nil: none).
	state() (json.RawMessage, error)
	// restored returns a new correction of the same configuration holding
	// the checkpointed state, validated; the receiver is not changed.
	restored(state json.RawMessage) (correction, error)
}

// noCorrection is the correction of a loop with WMRL off.
type noCorrection struct{}

func (noCorrection) debias(gain, _ float64) float64                      { return gain }
func (noCorrection) anchors(*rolloutData, []int, *rand.Rand) *anchorPlan { return nil }
func (noCorrection) absorb(*rolloutData, *anchorPlan, []RealRun) (AnchorReport, []records.Record) {
	return AnchorReport{Weight: 1}, nil
}
func (noCorrection) state() (json.RawMessage, error) { return nil, nil }
func (c noCorrection) restored(state json.RawMessage) (correction, error) {
	if len(state) > 0 {
		return nil, errors.New("the checkpoint holds WMRL state, the loop has WMRL off")
	}
	return c, nil
}

// anchorPlan is one batch's anchor groups and the runs they need.
type anchorPlan struct {
	groups []int        // anchor group indices, in kept order
	set    map[int]bool // the same as a set
	jobs   []records.TaskChange
	jobOf  [][]int // jobOf[gi][i]: index into jobs, −1 = not run
}

// wmrl is WMRL's correction: anchor groups, the online debiaser and the
// inverse-variance weighter (METHOD.md §2).
type wmrl struct {
	cfg      WMRLConfig
	rc       reward.Config
	debiaser *calibrate.OnlineDebiaser // nil unless cfg.Debias
	weighter *calibrate.Weighter
}

func newWMRL(cfg WMRLConfig, rc reward.Config) (*wmrl, error) {
	w := &wmrl{cfg: cfg, rc: rc, weighter: cfg.NewWeighter()}
	// The debiaser's parameters are validated only when Debias is on, so
	// it is made only then.
	if cfg.Debias {
		d, err := cfg.NewOnlineDebiaser()
		if err != nil {
			return nil, err
		}
		w.debiaser = d
	}
	return w, nil
}

// toUnit and fromUnit map a normalised reward in [−c, c] onto [0, 1] and back.
func toUnit(r, c float64) float64   { return (r + c) / (2 * c) }
func fromUnit(u, c float64) float64 { return u*2*c - c }

// debias maps a predicted gain through the isotonic map: the gain whose
// normalised score is the mapped score of ĝ's.
func (w *wmrl) debias(gain, tau float64) float64 {
	if !w.cfg.Debias || !w.debiaser.Calibrated() || !(tau > 0) {
		return gain
	}
	r := reward.Normalise(gain, tau, w.rc)
	return fromUnit(w.debiaser.Apply(toUnit(r, w.rc.Clip)), w.rc.Clip) * tau
}

// anchors draws AnchorCount(len(kept)) anchor groups uniformly among kept.
// Each distinct (task, change) among them is run once: a within-group
// duplicate earns min − δ whatever it measures (METHOD.md §1 Reward 3),
// and a second run of one job measures nothing new (with an idempotent
// executor it is the same record).
func (w *wmrl) anchors(ro *rolloutData, kept []int, rng *rand.Rand) *anchorPlan {
	n := w.cfg.AnchorCount(len(kept))
	plan := &anchorPlan{set: map[int]bool{}, jobOf: make([][]int, len(ro.groups))}
	for _, k := range rng.Perm(len(kept))[:n] {
		plan.set[kept[k]] = true
	}
	jobIdx := map[string]int{}
	for _, gi := range kept {
		if !plan.set[gi] {
			continue
		}
		plan.groups = append(plan.groups, gi)
		g := ro.groups[gi]
		plan.jobOf[gi] = make([]int, len(g.samples))
		for i, s := range g.samples {
			plan.jobOf[gi][i] = -1
			if !s.measurable() {
				continue
			}
			tc := records.TaskChange{Task: g.state.Task, Proposal: s.Proposal}
			j, ok := jobIdx[tc.Key()]
			if !ok {
				j = len(plan.jobs)
				jobIdx[tc.Key()] = j
				plan.jobs = append(plan.jobs, tc)
			}
			plan.jobOf[gi][i] = j
		}
	}
	return plan
}

// absorb reshapes each anchor group from its real gains, pushes one
// (world-model score, real score) pair per distinct job to the debiaser and
// one group disagreement to the weighter.
func (w *wmrl) absorb(ro *rolloutData, plan *anchorPlan, runs []RealRun) (AnchorReport, []records.Record) {
	rep := AnchorReport{Groups: len(plan.groups)}
	var real []records.Record
	for j, r := range runs {
		if r.Measured {
			real = append(real, r.Record)
			rep.Runs++
		} else {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %s", realrun.OnTask(plan.jobs[j].Proposal, plan.jobs[j].Task), r.Failure))
		}
	}
	pushed := make([]bool, len(plan.jobs))
	for _, gi := range plan.groups {
		rep.Pairs += w.absorbGroup(ro.groups[gi], plan.jobOf[gi], runs, pushed)
	}
	rep.Fitted = w.cfg.Debias && w.debiaser.Calibrated()
	rep.Weight = w.weight()
	rep.Disagree = w.weighter.Disagreement()
	return rep, real
}

// absorbGroup reshapes one anchor group and feeds the debiaser and the
// weighter; it returns the number of pairs pushed.
func (w *wmrl) absorbGroup(g *group, jobOf []int, runs []RealRun, pushed []bool) int {
	rc := w.rc
	cands := make([]reward.Candidate, len(g.samples))
	var pred, obs []float64
	seen := map[int]bool{}
	pairs := 0
	for i := range g.samples {
		s := &g.samples[i]
		var r RealRun
		j := jobOf[i]
		if j >= 0 {
			r = runs[j]
		}
		feasible := r.Measured && r.Record.Infeasible == ""
		// A sample that was not measured (unparseable, no change, or a run
		// that failed for infrastructure reasons) keeps the world model's
		// verdict and its debiased gain.
		gain, valid := s.gain, s.valid()
		if r.Measured {
			gain, valid = 0, feasible
			if feasible {
				gain = r.Record.Gain
			}
		}
		cands[i] = reward.NewCandidate(g.state, s.Proposal, gain, valid)
		if !r.Measured || seen[j] {
			continue
		}
		seen[j] = true
		y := realReward(rc, feasible, gain, g.tau)
		if w.cfg.Debias && !pushed[j] {
			pushed[j] = true
			raw := realReward(rc, s.ok, s.pred.Gain, g.tau)
			w.debiaser.Push(toUnit(raw, rc.Clip), toUnit(y, rc.Clip))
			pairs++
		}
		pred = append(pred, s.scaled)
		obs = append(obs, y)
	}
	setRewards(g, reward.Shape(rc, g.tau, cands))
	if w.cfg.Weight && len(pred) > 1 {
		w.weighter.ObserveGroup(pred, obs)
	}
	return pairs
}

// weight is the weight of the anchor groups' advantages: the weighter's
// when Weight is on, else 1.
func (w *wmrl) weight() float64 {
	if !w.cfg.Weight {
		return 1
	}
	return w.weighter.Weight()
}

// wmrlState is the checkpointed state of WMRL's correction.
type wmrlState struct {
	Debiaser json.RawMessage `json:"debiaser,omitempty"` // absent when Debias is off
	Weighter json.RawMessage `json:"weighter"`
}

func (w *wmrl) state() (json.RawMessage, error) {
	var st wmrlState
	var err error
	if w.debiaser != nil {
		if st.Debiaser, err = w.debiaser.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	if st.Weighter, err = w.weighter.MarshalBinary(); err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

func (w *wmrl) restored(state json.RawMessage) (correction, error) {
	if len(state) == 0 {
		return nil, errors.New("the loop has WMRL on, the checkpoint holds no WMRL state")
	}
	var st wmrlState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, err
	}
	out, err := newWMRL(w.cfg, w.rc)
	if err != nil {
		return nil, err
	}
	if (out.debiaser != nil) != (len(st.Debiaser) > 0) {
		return nil, fmt.Errorf("debiaser state present %v, debiasing on %v", len(st.Debiaser) > 0, out.debiaser != nil)
	}
	if out.debiaser != nil {
		if err := out.debiaser.UnmarshalBinary(st.Debiaser); err != nil {
			return nil, err
		}
	}
	if err := out.weighter.UnmarshalBinary(st.Weighter); err != nil {
		return nil, err
	}
	return out, nil
}
