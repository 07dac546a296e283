package lm2lm

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The loop is tested with plain values: hand-built states and answers, no
// world model, no executor, no goroutines.

// loopConfig: two steps of one rollout each, two states of four samples,
// a calibration of one run at step 1, rewards without diversity bonus.
func loopConfig() Config {
	cfg := DefaultConfig()
	cfg.Steps, cfg.RolloutEvery, cfg.States = 2, 1, 2
	cfg.DAPO.GroupSize, cfg.DAPO.Quota = 4, 2
	cfg.Reward.DiversityScale = 0
	cfg.Schedule = calibrate.Schedule{Steps: []int{1}, Budgets: []int{1}}
	return cfg
}

func loopEvidence(t *testing.T) records.Evidence {
	ev, err := records.NewEvidence(records.Record{Task: coreTask, Proposal: prop("z"), Gain: 0.25, Loss: 2.75, Source: records.Real})
	require.NoError(t, err)
	return ev
}

func newTestLoop(t *testing.T, cfg Config) *Loop {
	l, err := NewLoop(cfg, []records.Task{coreTask}, loopEvidence(t), nil)
	require.NoError(t, err)
	return l
}

// fourSamples is a group a, b, unparseable, no change.
func fourSamples() []proposer.Sample {
	return []proposer.Sample{{Proposal: prop("a")}, {Proposal: prop("b")}, {Invalid: true},
		{Proposal: records.Proposal{Mechanism: records.NoChange}}}
}

// gains is the deterministic world model: a gain per mechanism.
var fixedGain = map[string]float64{"a": 0.5, "b": 1.0, "c": 0.75}

func fixedGains(jobs []PredictJob) []Prediction {
	out := make([]Prediction, len(jobs))
	for k, j := range jobs {
		g, ok := fixedGain[j.Query.Proposal.Mechanism]
		if !ok {
			out[k].Err = rwm.ErrBadPrediction
			continue
		}
		out[k].Prediction = rwm.Prediction{Valid: true, Gain: g}
	}
	return out
}

func TestLoopAsksInOrder(t *testing.T) {
	l := newTestLoop(t, loopConfig())

	// Step 1: samples, predictions, update.
	rd := l.Ready()
	require.Equal(t, NeedSamples, rd.Need)
	require.Equal(t, 1, rd.Step)
	require.Len(t, rd.Propose, 2)
	require.Equal(t, 4, rd.Propose[0].N)
	require.NotEqual(t, rd.Propose[0].Seed, rd.Propose[1].Seed)
	require.Equal(t, rd, l.Ready(), "Ready without Advance repeats itself")
	_, done, err := l.Advance(Answer{Samples: [][]proposer.Sample{fourSamples(), fourSamples()}})
	require.NoError(t, err)
	require.False(t, done)

	rd = l.Ready()
	require.Equal(t, NeedPredictions, rd.Need)
	// The unparseable and the no-change proposals are not asked about.
	require.Len(t, rd.Predict, 4)
	require.Equal(t, "a", rd.Predict[0].Query.Proposal.Mechanism)
	require.Equal(t, "b", rd.Predict[1].Query.Proposal.Mechanism)
	require.Equal(t, 1, rd.Predict[0].Query.Evidence.Len())
	_, _, err = l.Advance(Answer{Predictions: fixedGains(rd.Predict)})
	require.NoError(t, err)

	// METHOD.md §1 Reward: gains 0.5 and 1.0 give τ_e = σ_e = 0.5 and
	// rewards [1, 2, −6, −3]; mean-centred advantages (mean −1.5) are
	// [2.5, 3.5, −4.5, −1.5] (Policy optimisation). Both groups kept, one
	// mini-batch per rollout.
	rd = l.Ready()
	require.Equal(t, NeedUpdate, rd.Need)
	require.True(t, rd.Stamp)
	require.Len(t, rd.Batch, 8)
	for i, want := range []float64{2.5, 3.5, -4.5, -1.5, 2.5, 3.5, -4.5, -1.5} {
		require.InDelta(t, want, rd.Batch[i].Advantage, 1e-12, "item %d", i)
	}
	poolBefore := l.Pool().Len()
	rep, done, err := l.Advance(Answer{Stats: proposer.Stats{Loss: 0.5}})
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, 1, rep.Step)
	require.Equal(t, 0.5, rep.Update.Loss)
	require.Equal(t, 2, rep.Rollout.Kept)
	require.Nil(t, rep.Calibration)
	require.Equal(t, poolBefore+4, l.Pool().Len(), "four predicted samples join the pool as synthetic records")
	require.Equal(t, 1, l.Step())

	// Step 2: the calibration point u = 0 at step 1 executes the top-rated
	// proposal (b, rated 2; its twin in group 1 is the same change), then
	// rescoring under M_1.
	rd = l.Ready()
	require.Equal(t, NeedSamples, rd.Need)
	_, _, err = l.Advance(Answer{Samples: [][]proposer.Sample{fourSamples(), fourSamples()}})
	require.NoError(t, err)
	rd = l.Ready()
	_, _, err = l.Advance(Answer{Predictions: fixedGains(rd.Predict)})
	require.NoError(t, err)
	rd = l.Ready()
	require.Equal(t, NeedRuns, rd.Need)
	require.True(t, rd.Calibration)
	require.Len(t, rd.Execute, 1)
	require.Equal(t, "b", rd.Execute[0].Change.Proposal.Mechanism)
	rec := records.Record{Task: coreTask, Proposal: prop("b"), Gain: 0.2, Loss: 2.8, Source: records.Real}
	_, _, err = l.Advance(Answer{Runs: []RealRun{{Record: rec, Measured: true, Ran: true, Cost: records.Cost{DeviceSeconds: 3}}}})
	require.NoError(t, err)
	require.Equal(t, 2, l.Evidence().Len())
	cost, runs, reused := l.Cost()
	require.Equal(t, 3.0, cost.DeviceSeconds)
	require.Equal(t, 1, runs)
	require.Zero(t, reused)

	rd = l.Ready()
	require.Equal(t, NeedPredictions, rd.Need, "the rollout is rescored under the new M")
	require.Equal(t, 2, rd.Predict[0].Query.Evidence.Len())
	_, _, err = l.Advance(Answer{Predictions: fixedGains(rd.Predict)})
	require.NoError(t, err)
	rd = l.Ready()
	require.Equal(t, NeedUpdate, rd.Need)
	rep, done, err = l.Advance(Answer{})
	require.NoError(t, err)
	require.True(t, done)
	require.NotNil(t, rep.Calibration)
	require.Equal(t, 1, rep.Calibration.Executed)
	// Predicted r = 2 (b under M_0); real clip(0.2/0.5) = 0.4.
	require.Equal(t, [][]float64{{2}}, rep.Calibration.Predicted)
	require.InDelta(t, 0.4, rep.Calibration.Real[0][0], 1e-12)

	require.Equal(t, NeedNothing, l.Ready().Need)
	_, _, err = l.Advance(Answer{})
	require.Error(t, err, "Advance without a need")
}

func TestLoopErrorAbandonsStep(t *testing.T) {
	// A machinery failure abandons the step; the next Ready starts it again
	// with fresh draws.
	l := newTestLoop(t, loopConfig())
	first := l.Ready()
	_, _, err := l.Advance(Answer{Samples: [][]proposer.Sample{fourSamples(), fourSamples()}})
	require.NoError(t, err)
	boom := errors.New("boom")
	_, _, err = l.Advance(Answer{Err: boom})
	require.ErrorIs(t, err, boom)
	require.False(t, l.InStep())
	again := l.Ready()
	require.Equal(t, NeedSamples, again.Need)
	require.NotEqual(t, first.Propose[0].Seed, again.Propose[0].Seed)

	// A prediction error that is not about one proposal fails the step;
	// a bad prediction scores the proposal invalid.
	_, _, err = l.Advance(Answer{Samples: [][]proposer.Sample{fourSamples(), fourSamples()}})
	require.NoError(t, err)
	rd := l.Ready()
	preds := fixedGains(rd.Predict)
	preds[0] = Prediction{Err: rwm.ErrBadPrediction}
	_, _, err = l.Advance(Answer{Predictions: preds})
	require.NoError(t, err)
	require.Equal(t, NeedUpdate, l.Ready().Need)

	// A wrong number of answers is refused.
	l2 := newTestLoop(t, loopConfig())
	l2.Ready()
	_, _, err = l2.Advance(Answer{Samples: [][]proposer.Sample{fourSamples()}})
	require.ErrorContains(t, err, "1 sample groups for 2 states")
}

// answerer answers any Ready deterministically from the Ready alone.
func answerer(rd Ready) Answer {
	var a Answer
	switch rd.Need {
	case NeedSamples:
		mechs := []string{"a", "b", "c", "x", records.NoChange}
		for _, j := range rd.Propose {
			rng := j.Rand()
			var g []proposer.Sample
			for range j.N {
				m := mechs[rng.IntN(len(mechs))]
				if rng.IntN(6) == 0 {
					g = append(g, proposer.Sample{Invalid: true, Reason: "unparseable"})
					continue
				}
				p := records.Proposal{Mechanism: m}
				if m != records.NoChange {
					p = prop(m)
				}
				g = append(g, proposer.Sample{Proposal: p, Tokens: []string{m}, LogProbs: []float64{-0.7}, Temperature: 1})
			}
			a.Samples = append(a.Samples, g)
		}
	case NeedPredictions:
		a.Predictions = fixedGains(rd.Predict)
	case NeedRuns:
		for _, j := range rd.Execute {
			g := fixedGain[j.Change.Proposal.Mechanism] - 0.1*float64(j.Change.Task.Budget)/100
			a.Runs = append(a.Runs, RealRun{Record: records.Record{Task: j.Change.Task, Proposal: j.Change.Proposal,
				Gain: g, Loss: j.Change.Task.RefLoss - g, Source: records.Real}, Measured: true, Ran: true,
				Cost: records.Cost{DeviceSeconds: 1.5}})
		}
	case NeedUpdate:
		a.Stats = proposer.Stats{Tokens: len(rd.Batch)}
	}
	return a
}

// drive runs l to the end with answerer, returning the step reports (an
// ErrNoSignal step is retried) and the final checkpoint.
func drive(t *testing.T, l *Loop) ([]StepReport, []byte) {
	var reps []StepReport
	for guard := 0; guard < 1000; guard++ {
		rd := l.Ready()
		if rd.Need == NeedNothing {
			cp, err := l.MarshalBinary()
			require.NoError(t, err)
			return reps, cp
		}
		rep, done, err := l.Advance(answerer(rd))
		if errors.Is(err, ErrNoSignal) {
			continue
		}
		require.NoError(t, err)
		if done {
			reps = append(reps, rep)
		}
	}
	t.Fatal("the loop did not finish")
	return nil, nil
}

func TestLoopCheckpointMidStep(t *testing.T) {
	// A checkpoint taken at any point of any step, restored into a new
	// loop, continues exactly as the uninterrupted loop: same reports, same
	// final state, bit for bit. WMRL on, so anchor runs are in flight too.
	for _, wmrlOn := range []bool{false, true} {
		cfg := loopConfig()
		cfg.Steps, cfg.RolloutEvery, cfg.States, cfg.DAPO.Quota = 6, 2, 6, 3
		cfg.Schedule = calibrate.Schedule{Steps: []int{2, 4}, Budgets: []int{2, 2}}
		if wmrlOn {
			w := DefaultWMRLConfig()
			w.AnchorFraction = 0.5
			cfg.WMRL = &w
		}
		wantReps, wantCP := drive(t, newTestLoop(t, cfg))
		require.Len(t, wantReps, 6)

		// Record a checkpoint at every Ready of an identical run.
		l := newTestLoop(t, cfg)
		var cps [][]byte
		var prefix [][]StepReport
		var reps []StepReport
		for {
			rd := l.Ready()
			if rd.Need == NeedNothing {
				break
			}
			cp, err := l.MarshalBinary()
			require.NoError(t, err)
			cps, prefix = append(cps, cp), append(prefix, append([]StepReport(nil), reps...))
			rep, done, err := l.Advance(answerer(rd))
			if errors.Is(err, ErrNoSignal) {
				continue
			}
			require.NoError(t, err)
			if done {
				reps = append(reps, rep)
			}
		}
		require.Greater(t, len(cps), 12)
		sawRuns := false
		for k, cp := range cps {
			r := newTestLoop(t, cfg)
			require.NoError(t, r.UnmarshalBinary(cp), "checkpoint %d", k)
			sawRuns = sawRuns || r.Ready().Need == NeedRuns
			rest, final := drive(t, r)
			got := append(append([]StepReport(nil), prefix[k]...), rest...)
			if diff := cmp.Diff(wantReps, got, cmp.Comparer(func(a, b float64) bool { return a == b || (a != a && b != b) })); diff != "" {
				t.Fatalf("wmrl %v checkpoint %d: reports differ (-want +got):\n%s", wmrlOn, k, diff)
			}
			require.Equal(t, string(wantCP), string(final), "wmrl %v checkpoint %d: final state", wmrlOn, k)
		}
		require.True(t, sawRuns, "some checkpoint was taken with runs in flight")
	}
}

func TestLoopCheckpointRefusesBadFlight(t *testing.T) {
	l := newTestLoop(t, loopConfig())
	l.Ready()
	_, _, err := l.Advance(Answer{Samples: [][]proposer.Sample{fourSamples(), fourSamples()}})
	require.NoError(t, err)
	cp, err := l.checkpoint()
	require.NoError(t, err)
	for name, edit := range map[string]func(c *checkpoint){
		"phase":         func(c *checkpoint) { c.InFlight.Phase = 9 },
		"unknown task":  func(c *checkpoint) { c.InFlight.Groups[0].State.Task.ID = "nope" },
		"pick outside":  func(c *checkpoint) { c.InFlight.CalPicks = [][2]int{{5, 0}} },
		"empty group":   func(c *checkpoint) { c.InFlight.Groups[0].Samples = nil },
		"kept outside":  func(c *checkpoint) { c.InFlight.Kept = []int{7} },
		"no states yet": func(c *checkpoint) { c.InFlight.Phase, c.InFlight.States = int(phaseSamples), nil },
	} {
		t.Run(name, func(t *testing.T) {
			c := cp
			fl := *cp.InFlight
			fl.Groups = append([]groupJSON(nil), fl.Groups...)
			fl.Groups[0].State = cp.InFlight.Groups[0].State
			c.InFlight = &fl
			edit(&c)
			b, err := seal(c)
			require.NoError(t, err)
			r := newTestLoop(t, loopConfig())
			require.ErrorIs(t, r.UnmarshalBinary(b), ErrCheckpoint)
			require.False(t, r.InStep(), "the loop is unchanged")
		})
	}
}

func TestLoopScoresOutsideGroups(t *testing.T) {
	// The service's side: an outside trainer's groups are scored as a
	// rollout (METHOD.md §1 Reward: rewards [1, 2, −6, −3]; mean-centred
	// advantages [2.5, 3.5, −4.5, −1.5]), a flat group is flagged and gets
	// zero advantages, and the calibration at step 1 takes the top-rated
	// candidate scored since (b, r = 2).
	cfg := loopConfig()
	cfg.Steps = 1 << 20
	l := newTestLoop(t, cfg)
	flat := []proposer.Sample{{Invalid: true}, {Invalid: true}}
	gs := []Group{{State: records.State{Task: coreTask}, Samples: fourSamples()}, {State: records.State{Task: coreTask}, Samples: flat}}
	jobs := l.ScoreJobs(gs)
	require.Len(t, jobs, 2)
	sc, err := l.ScoreGroups(gs, fixedGains(jobs), time.Time{})
	require.NoError(t, err)
	require.Equal(t, []float64{1, 2, -6, -3}, sc.Groups[0].Rewards)
	for i, want := range []float64{2.5, 3.5, -4.5, -1.5} {
		require.InDelta(t, want, sc.Groups[0].Advantages[i], 1e-12)
	}
	require.True(t, sc.Groups[0].Kept)
	require.False(t, sc.Groups[1].Kept)
	require.Equal(t, []float64{0, 0}, sc.Groups[1].Advantages)
	require.Equal(t, []bool{true, true, false, true}, sc.Groups[0].Valid)
	require.Equal(t, 1, sc.Report.Flat)
	require.Equal(t, 2, l.Candidates())
	_, err = l.ScoreGroups(gs, nil, time.Time{})
	require.ErrorContains(t, err, "0 predictions for 2 queries")

	_, ok := l.Calibrate()
	require.False(t, ok, "nothing due at step 0")
	require.Equal(t, 1, l.SetStep(1))
	require.Equal(t, 1, l.SetStep(0), "the step never goes back")
	runs, ok := l.Calibrate()
	require.True(t, ok)
	require.Len(t, runs, 1)
	require.Equal(t, "b", runs[0].Change.Proposal.Mechanism)
	require.Zero(t, l.Candidates(), "the candidates went to the calibration")
	_, again := l.Calibrate()
	require.False(t, again, "one calibration at a time")

	// A checkpoint in the middle of the calibration resumes it.
	cp, err := l.MarshalBinary()
	require.NoError(t, err)
	r := newTestLoop(t, cfg)
	require.NoError(t, r.UnmarshalBinary(cp))
	require.Equal(t, runs, r.PendingRuns())

	rec := records.Record{Task: coreTask, Proposal: prop("b"), Gain: 0.2, Loss: 2.8, Source: records.Real}
	for _, x := range []*Loop{l, r} {
		_, err = x.FinishCalibration(nil)
		require.ErrorContains(t, err, "0 runs for 1 jobs")
		rep, err := x.FinishCalibration([]RealRun{{Record: rec, Measured: true, Ran: true}})
		require.NoError(t, err)
		require.Equal(t, [][]float64{{2}}, rep.Predicted)
		require.Equal(t, 2, x.Evidence().Len())
		require.Equal(t, 1, x.Calibrations())
		require.False(t, x.InStep())
		m, ok := x.LastMonitors()
		require.True(t, ok)
		require.InDelta(t, 2-0.4, m.Bias.Gap(), 1e-12) // Ĵ_M − J̄ = 2 − clip(0.2/0.5)
	}
	a, _ := l.MarshalBinary()
	b, _ := r.MarshalBinary()
	require.Equal(t, string(a), string(b))
}

func TestDeferredCalibration(t *testing.T) {
	// An outside trainer steps on while a calibration's runs go: groups
	// scored meanwhile (under M_u) become the next point's candidates, the
	// report keeps the step the point was picked at, and only a loop made
	// WithDeferredCalibration restores a checkpoint past a point whose
	// records are not yet in M.
	cfg := loopConfig()
	cfg.Steps = 1 << 20
	cfg.Schedule = calibrate.Schedule{Steps: []int{1, 3}, Budgets: []int{1, 1}}
	l, err := NewLoop(cfg, []records.Task{coreTask}, loopEvidence(t), nil, WithDeferredCalibration())
	require.NoError(t, err)
	gs := []Group{{State: records.State{Task: coreTask}, Samples: fourSamples()}}
	score := func() {
		t.Helper()
		jobs := l.ScoreJobs(gs)
		_, err := l.ScoreGroups(gs, fixedGains(jobs), time.Time{})
		require.NoError(t, err)
	}
	score()
	l.SetStep(1)
	runs, ok := l.Calibrate()
	require.True(t, ok)
	require.True(t, l.CalibrationInFlight())
	l.SetStep(cfg.Schedule.Steps[1] + 3) // past the next point too
	score()
	require.Equal(t, 1, l.Candidates())
	cp, err := l.MarshalBinary()
	require.NoError(t, err)
	strict := newTestLoop(t, cfg)
	require.ErrorIs(t, strict.UnmarshalBinary(cp), ErrCheckpoint)
	r, err := NewLoop(cfg, []records.Task{coreTask}, loopEvidence(t), nil, WithDeferredCalibration())
	require.NoError(t, err)
	require.NoError(t, r.UnmarshalBinary(cp))
	rec := records.Record{Task: coreTask, Proposal: runs[0].Change.Proposal, Gain: 0.2, Loss: 2.8, Source: records.Real}
	for _, x := range []*Loop{l, r} {
		rep, err := x.FinishCalibration([]RealRun{{Record: rec, Measured: true, Ran: true}})
		require.NoError(t, err)
		require.Equal(t, 1, rep.Step, "the step it was picked at")
		require.Equal(t, 1, x.Candidates(), "the group scored during the runs waits for the next point")
		require.False(t, x.CalibrationInFlight())
		require.Zero(t, x.TrimCandidates(-1))
		require.Zero(t, x.TrimCandidates(5))
	}
	require.Equal(t, 1, l.TrimCandidates(0))
	require.Zero(t, l.Candidates())
}
