package loop

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The planning core is tested with plain values: no world model, no
// executor, no goroutines.

var coreTask = records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte,
	RefLoss: 3, SeedNoise: 0.5, Budget: 100}

func prop(mech string) records.Proposal {
	return records.Proposal{Mechanism: mech, Params: map[string]string{"level": "1"}}
}

// coreGroup is a group of four samples: a, b predicted 0.5 and 1.0, an
// unparseable sample and the no-change proposal.
func coreGroup(gainA, gainB float64) *group {
	g := newGroup(records.State{Task: coreTask}, []proposer.Sample{
		{Proposal: prop("a")}, {Proposal: prop("b")}, {Invalid: true},
		{Proposal: records.Proposal{Mechanism: records.NoChange}},
	})
	for i, gain := range []float64{gainA, gainB} {
		require.NoError(nil, acceptPrediction(&g.samples[i], rwm.Prediction{Valid: true, Gain: gain}, nil))
	}
	return g
}

func coreConfig() Config {
	cfg := DefaultConfig()
	cfg.Reward.DiversityScale = 0 // rewards are the base rewards
	cfg.Quota = 1
	return cfg
}

func TestCoreShape(t *testing.T) {
	// METHOD.md §1 Reward: gains 0.5 and 1.0 have median 0.75 and MAD 0.25,
	// 1.4826·0.25 = 0.37 < σ_e = 0.5, so τ_e = 0.5; r = clip(ĝ/τ) = 1 and 2,
	// −6 for the unparseable sample, −3 for no change.
	c := core{cfg: coreConfig(), corr: noCorrection{}}
	ro := &rolloutData{groups: []*group{coreGroup(0.5, 1.0)}}
	require.Equal(t, []ref{{0, 0}, {0, 1}}, (&rolloutData{groups: []*group{newGroup(records.State{Task: coreTask},
		[]proposer.Sample{{Proposal: prop("a")}, {Proposal: prop("b")}, {Invalid: true}, {Proposal: records.Proposal{Mechanism: records.NoChange}}})}}).predictionJobs())
	c.shape(ro)
	g := ro.groups[0]
	require.Equal(t, 0.5, g.tau)
	require.Equal(t, []float64{1, 2, -6, -3}, g.rewards())
	for i, want := range []float64{1, 2, -6, -3} {
		require.Equal(t, want, g.samples[i].scaled)
	}

	rep := ro.report()
	require.Equal(t, 1, rep.Invalid, "the no-change proposal is valid")
	require.Equal(t, -1.5, rep.MeanReward) // (1 + 2 − 6 − 3)/4
	require.Equal(t, 1.5, rep.MeanGain)    // (0.5 + 1.0)/2 / σ_e
	require.Len(t, rep.Share, 4)           // a, b, (unparseable), no change
	syn := ro.synthetic(time.Time{})
	require.Len(t, syn, 2, "only predicted samples become synthetic records")
	require.Equal(t, 2.5, syn[0].Loss) // b_e − ĝ
	require.Equal(t, records.Synthetic, syn[0].Source)
}

func TestCoreKeepAndAdvantages(t *testing.T) {
	// Dynamic sampling drops the flat group (every reward −6) and keeps the
	// informative one; mean-centred advantages of [1, 2, −6, −3] (mean
	// −1.5) are [2.5, 3.5, −4.5, −1.5] (METHOD.md §1 Policy optimisation).
	c := core{cfg: coreConfig(), corr: noCorrection{}}
	flat := newGroup(records.State{Task: coreTask}, []proposer.Sample{{Invalid: true}, {Invalid: true}})
	ro := &rolloutData{groups: []*group{flat, coreGroup(0.5, 1.0), coreGroup(0.25, 1.0)}}
	c.shape(ro)
	kept, rep := c.keep(ro)
	require.Equal(t, []int{1}, kept, "Quota 1 keeps the first informative group")
	require.Equal(t, 1, rep.Kept)
	require.Equal(t, 1, rep.Flat)
	require.Equal(t, []float64{2.5, 3.5, -4.5, -1.5}, c.advantages(ro.groups[1], 1))
	// An anchor group's advantages are scaled by the weight (METHOD.md §2).
	require.Equal(t, []float64{5, 7, -9, -3}, c.advantages(ro.groups[1], 2))

	// Quota 0 keeps every informative group; a batch all flat keeps none.
	c.cfg.Quota = 0
	kept, _ = c.keep(ro)
	require.Equal(t, []int{1, 2}, kept)
	kept, rep = c.keep(&rolloutData{groups: []*group{flat}})
	require.Empty(t, kept)
	require.Equal(t, 1, rep.Flat)
}

func TestCoreCalibration(t *testing.T) {
	// Greedy top-1 by r(s, a; M) picks b (r = 2) unless b is already in M,
	// then a (r = 1); unparseable and no-change samples are never picked.
	c := core{cfg: coreConfig(), corr: noCorrection{}}
	ro := &rolloutData{groups: []*group{coreGroup(0.5, 1.0)}}
	c.shape(ro)
	rng := rand.New(rand.NewPCG(1, 2))
	require.Equal(t, []ref{{0, 1}}, c.calibrationPicks(ro, records.Evidence{}, 1, rng))
	known, err := records.NewEvidence(records.Record{Task: coreTask, Proposal: prop("b"), Gain: 0.1, Loss: 2.9, Source: records.Real})
	require.NoError(t, err)
	require.Equal(t, []ref{{0, 0}}, c.calibrationPicks(ro, known, 1, rng))
	require.Equal(t, []ref{{0, 1}, {0, 0}}, c.calibrationPicks(ro, records.Evidence{}, 5, rng))

	// b measured 0.25 for real (r = 0.5), a failed for infrastructure
	// reasons: one record, one failure, monitors on one pair.
	picks := []ref{{0, 1}, {0, 0}}
	rec := records.Record{Task: coreTask, Proposal: prop("b"), Gain: 0.25, Loss: 2.75, Source: records.Real}
	rep := c.calibrationReport(ro, 8, 2, picks, []RealRun{{Record: rec, Measured: true, Ran: true}, {Failure: "run: lost node"}})
	require.Equal(t, 8, rep.Step)
	require.Equal(t, 1, rep.Executed)
	require.Equal(t, []records.Record{rec}, rep.Records)
	require.Equal(t, []string{`"a{level=1}" on "t": run: lost node`}, rep.Failures)
	require.Equal(t, [][]float64{{2}}, rep.Predicted)
	require.Equal(t, [][]float64{{0.5}}, rep.Real)
	require.Equal(t, 0.5, rep.MeanRealGain) // 0.25 / σ_e
	require.Equal(t, []records.TaskChange{{Task: coreTask, Proposal: prop("b")}}, ro.changes(picks[:1]))
}

func TestAcceptPrediction(t *testing.T) {
	var s sample
	require.NoError(t, acceptPrediction(&s, rwm.Prediction{Valid: true, Gain: 0.3}, nil))
	require.True(t, s.ok)
	// A valid prediction with a NaN gain is a bad prediction: invalid, kept.
	require.NoError(t, acceptPrediction(&s, rwm.Prediction{Valid: true, Gain: math.NaN()}, nil))
	require.False(t, s.ok)
	require.Contains(t, s.pred.Reason, "bad prediction")
	require.NoError(t, acceptPrediction(&s, rwm.Prediction{}, rwm.ErrBadPrediction))
	require.False(t, s.ok)
	boom := errors.New("server down")
	require.ErrorIs(t, acceptPrediction(&s, rwm.Prediction{}, boom), boom)
}

func TestWMRLAbsorb(t *testing.T) {
	// One anchor group: a measured −0.5 (r = −1), b infeasible (−6). The
	// group is reshaped from the real outcomes, each distinct job pushes one
	// (world-model score, real score) pair mapped onto [0, 1], and the
	// weighter observes the group.
	w := DefaultWMRLConfig()
	w.MinPairs, w.Warmup = 2, 1
	corr, err := newWMRL(w, coreConfig().Reward)
	require.NoError(t, err)
	c := core{cfg: coreConfig(), corr: corr}
	ro := &rolloutData{groups: []*group{coreGroup(0.5, 1.0)}}
	c.shape(ro)
	plan := c.corr.anchors(ro, []int{0}, rand.New(rand.NewPCG(1, 2)))
	require.Equal(t, []int{0}, plan.groups)
	require.Equal(t, []int{0, 1, -1, -1}, plan.jobOf[0])
	require.Len(t, plan.jobs, 2)
	runs := []RealRun{
		{Measured: true, Record: records.Record{Task: coreTask, Proposal: prop("a"), Gain: -0.5, Loss: 3.5, Source: records.Real}},
		{Measured: true, Record: records.Record{Task: coreTask, Proposal: prop("b"), Source: records.Real, Infeasible: "diverged"}},
	}
	rep, real := c.corr.absorb(ro, plan, runs)
	require.Len(t, real, 2)
	require.Equal(t, 2, rep.Pairs)
	require.Equal(t, 2, rep.Runs)
	require.Equal(t, []float64{-1, -6, -6, -3}, ro.groups[0].rewards())
	x, y := c.corr.(*wmrl).debiaser.Pairs()
	// World-model scores 1 and 2, real −1 and −6, on [0, 1]: (r + 6)/12.
	require.Equal(t, []float64{7.0 / 12, 8.0 / 12}, x)
	require.Equal(t, []float64{5.0 / 12, 0}, y)
	require.Equal(t, 1, c.corr.(*wmrl).weighter.Observations())
	// With WMRL off there is no plan and no change.
	require.Nil(t, noCorrection{}.anchors(ro, []int{0}, nil))
}
