package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The loop is tested with plain values: hand-built states and answers, no
// world model, no executor, no goroutines.

// loopConfig: a calibration of one run at step 1, rewards without
// diversity bonus, two candidates.
func loopConfig() Config {
	cfg := DefaultConfig()
	cfg.Quota, cfg.Candidates = 2, 2
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
	l, err := New(cfg, Setup{Tasks: []records.Task{coreTask}, Evidence: loopEvidence(t)})
	require.NoError(t, err)
	return l
}

// fourSamples is a group a, b, unparseable, no change.
func fourSamples() []proposer.Sample {
	return []proposer.Sample{{Proposal: prop("a")}, {Proposal: prop("b")}, {Invalid: true},
		{Proposal: records.Proposal{Mechanism: records.NoChange}}}
}

// fixedGain is the deterministic world model: a gain per mechanism.
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

// realRuns answers run jobs deterministically: the fixed gain less a
// tenth of the task's budget in hundreds, costing 1.5 device seconds.
func realRuns(jobs []RunJob) []RealRun {
	out := make([]RealRun, 0, len(jobs))
	for _, j := range jobs {
		g := fixedGain[j.Change.Proposal.Mechanism] - 0.1*float64(j.Change.Task.Budget)/100
		out = append(out, RealRun{Record: records.Record{Task: j.Change.Task, Proposal: j.Change.Proposal,
			Gain: g, Loss: j.Change.Task.RefLoss - g, Source: records.Real}, Measured: true, Ran: true,
			Cost: records.Cost{DeviceSeconds: 1.5}})
	}
	return out
}

func TestLoopScoresCalibratesAndRescores(t *testing.T) {
	l := newTestLoop(t, loopConfig())
	st := records.State{Task: coreTask}
	flat := []proposer.Sample{{Invalid: true}, {Invalid: true}}
	gs := []Group{{State: st, Samples: fourSamples()}, {State: st, Samples: flat}}

	// The unparseable and the no-change proposals are not asked about.
	rd := l.Ready(gs...)
	require.Len(t, rd.Predict, 2)
	require.Equal(t, "a", rd.Predict[0].Query.Proposal.Mechanism)
	require.Equal(t, "b", rd.Predict[1].Query.Proposal.Mechanism)
	require.Equal(t, 1, rd.Predict[0].Query.Evidence.Len())
	require.Equal(t, NoRuns, rd.Kind)
	require.Empty(t, rd.Execute)

	_, err := l.Score(gs, nil)
	require.ErrorContains(t, err, "0 predictions for 2 queries")
	require.Zero(t, l.Status().Candidates, "an error changes nothing")

	// METHOD.md §1 Reward: gains 0.5 and 1.0 give τ_e = σ_e = 0.5 and
	// rewards [1, 2, −6, −3]; mean-centred advantages (mean −1.5) are
	// [2.5, 3.5, −4.5, −1.5] (Policy optimisation). The flat group is
	// dropped by dynamic sampling and gets zero advantages.
	sc, err := l.Score(gs, fixedGains(rd.Predict))
	require.NoError(t, err)
	require.Equal(t, []float64{1, 2, -6, -3}, sc.Groups[0].Rewards)
	require.Equal(t, []float64{2.5, 3.5, -4.5, -1.5}, sc.Groups[0].Advantages)
	require.Equal(t, []bool{true, true, false, true}, sc.Groups[0].Valid)
	require.Equal(t, 0.5, sc.Groups[0].Tau)
	require.True(t, sc.Groups[0].Kept)
	require.False(t, sc.Groups[1].Kept)
	require.Equal(t, []float64{0, 0}, sc.Groups[1].Advantages)
	require.Equal(t, RolloutReport{Groups: 2, Kept: 1, Flat: 1, Invalid: 3, MeanReward: -3, MeanGain: 1.5, // (1 + 2 − 6 − 3 − 6 − 6)/6
		Share: sc.Report.Share}, sc.Report)
	require.Equal(t, 2, l.Status().Candidates)

	// Synthetic state expansion: the two predicted samples, once.
	before := l.Status().Pool.Len()
	require.NoError(t, l.Expand(time.Time{}))
	require.NoError(t, l.Expand(time.Time{}))
	require.Equal(t, before+2, l.Status().Pool.Len())

	// Nothing is due at step 0; at step 1 point u = 0 takes the top-rated
	// candidate (b, rated 2).
	l.Observe(0)
	require.Equal(t, NoRuns, l.Ready().Kind)
	l.Observe(1)
	l.Observe(0) // the step never goes back
	rd = l.Ready()
	require.Equal(t, 1, rd.Step)
	require.Equal(t, CalibrationRuns, rd.Kind)
	require.Equal(t, rd, l.Ready(), "Ready changes nothing")
	require.Len(t, rd.Execute, 1)
	require.Equal(t, "b", rd.Execute[0].Change.Proposal.Mechanism)
	require.Zero(t, l.Status().Candidates, "the candidates went to the calibration")
	require.True(t, l.Status().Calibrating)

	_, err = l.Absorb(nil)
	require.ErrorContains(t, err, "0 runs for 1 jobs")
	require.True(t, l.Status().Calibrating, "a wrong number of runs changes nothing")
	rec := records.Record{Task: coreTask, Proposal: prop("b"), Gain: 0.2, Loss: 2.8, Source: records.Real}
	ab, err := l.Absorb([]RealRun{{Record: rec, Measured: true, Ran: true, Cost: records.Cost{DeviceSeconds: 3}}})
	require.NoError(t, err)
	// Predicted r = 2 (b under M_0); real clip(0.2/0.5) = 0.4.
	require.Equal(t, 1, ab.Calibration.Executed)
	require.Equal(t, [][]float64{{2}}, ab.Calibration.Predicted)
	require.InDelta(t, 0.4, ab.Calibration.Real[0][0], 1e-12)
	require.InDelta(t, 2-0.4, ab.Calibration.Monitors.Bias.Gap(), 1e-12)
	s := l.Status()
	require.Equal(t, 2, s.Evidence.Len())
	require.Equal(t, 1, s.Calibrations)
	require.False(t, s.Calibrating)
	require.Equal(t, 3.0, s.Cost.DeviceSeconds)
	require.Equal(t, 1, s.Runs)
	require.Zero(t, s.Reused)

	// The batch is asked again under M_1; at one step one calibration.
	require.Equal(t, 2, l.Ready(gs...).Predict[0].Query.Evidence.Len())
	l.Observe(1)
	require.Equal(t, NoRuns, l.Ready().Kind)
	_, err = l.Absorb(nil)
	require.ErrorContains(t, err, "no runs pending")
}

func TestLoopCandidatesAreTheNewest(t *testing.T) {
	// Config.Candidates bounds the candidates, the oldest dropped: with 2,
	// a third group scored leaves the last two, and the calibration's pick
	// is among them (c, rated 1.5, over a and b of the first group).
	cfg := loopConfig()
	l := newTestLoop(t, cfg)
	st := records.State{Task: coreTask}
	score := func(mech string) {
		gs := []Group{{State: st, Samples: []proposer.Sample{{Proposal: prop(mech)}, {Invalid: true}}}}
		_, err := l.Score(gs, fixedGains(l.Ready(gs...).Predict))
		require.NoError(t, err)
	}
	score("b")
	score("a")
	score("c")
	require.Equal(t, 2, l.Status().Candidates)
	share := l.Share()
	require.Len(t, share, 3) // a, c and the unparseable samples
	l.Observe(1)
	require.Equal(t, "c", l.Ready().Execute[0].Change.Proposal.Mechanism)
}

func TestLoopDeferredCalibration(t *testing.T) {
	// A driver steps on while a calibration's runs go: groups scored
	// meanwhile (under M_u) become the next point's candidates, the report
	// keeps the step the point was picked at, and a checkpoint past a
	// point whose records are not yet in M restores.
	cfg := loopConfig()
	cfg.Schedule = calibrate.Schedule{Steps: []int{1, 3}, Budgets: []int{1, 1}}
	l := newTestLoop(t, cfg)
	gs := []Group{{State: records.State{Task: coreTask}, Samples: fourSamples()}}
	score := func() {
		t.Helper()
		_, err := l.Score(gs, fixedGains(l.Ready(gs...).Predict))
		require.NoError(t, err)
	}
	score()
	l.Observe(1)
	runs := l.Ready().Execute
	require.Len(t, runs, 1)
	l.Observe(cfg.Schedule.Steps[1] + 3) // past the next point too
	score()
	require.Equal(t, 1, l.Status().Candidates)
	cp, err := l.Checkpoint(nil)
	require.NoError(t, err)
	r := newTestLoop(t, cfg)
	require.NoError(t, r.Restore(cp, nil))
	require.Equal(t, l.Ready(), r.Ready())
	for _, x := range []*Loop{l, r} {
		ab, err := x.Absorb(realRuns(runs))
		require.NoError(t, err)
		require.Equal(t, 1, ab.Calibration.Step, "the step it was picked at")
		require.Equal(t, 1, x.Status().Candidates, "the group scored during the runs waits for the next point")
		// The next point is due at the loop's step, 6 ≥ 3.
		x.Observe(6)
		require.Equal(t, CalibrationRuns, x.Ready().Kind)
	}
	a, err := l.Checkpoint(nil)
	require.NoError(t, err)
	b, err := r.Checkpoint(nil)
	require.NoError(t, err)
	require.Equal(t, string(a), string(b))
}

// driver is a third driver of the loop, as the package documentation
// describes one: rollouts of n states drawn from the loop, sampled from
// the loop's sources by a fixed random policy, scored by fixedGains, run
// by realRuns, one rollout per two steps.
type driver struct {
	l    *Loop
	n    int
	step int
	log  []string
}

func (d *driver) sample(st records.State, src [2]uint64) []proposer.Sample {
	rng := rand.New(rand.NewPCG(src[0], src[1]))
	mechs := []string{"a", "b", "c", "x", records.NoChange}
	var g []proposer.Sample
	for range 4 {
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
	return g
}

// show prints a value with the anchor report it points to.
func show(sc Scored) string {
	a := sc.Report.Anchors
	sc.Report.Anchors = nil
	if a != nil {
		return fmt.Sprintf("%+v %+v", sc, *a)
	}
	return fmt.Sprintf("%+v", sc)
}

// rollout runs one rollout to its end and observes the next step.
func (d *driver) rollout(t *testing.T) {
	states := d.l.Draw(d.n)
	srcs := d.l.Sources(len(states))
	gs := make([]Group, len(states))
	for i, s := range states {
		gs[i] = Group{State: s, Samples: d.sample(s, srcs[i])}
	}
	score := func() Scored {
		sc, err := d.l.Score(gs, fixedGains(d.l.Ready(gs...).Predict))
		require.NoError(t, err)
		d.l.Observe(d.step)
		return sc
	}
	sc := score()
	if rd := d.l.Ready(); rd.Kind == CalibrationRuns {
		ab, err := d.l.Absorb(realRuns(rd.Execute))
		require.NoError(t, err)
		d.log = append(d.log, fmt.Sprintf("%+v", *ab.Calibration))
		sc = score()
	}
	if rd := d.l.Ready(); rd.Kind == AnchorRuns {
		ab, err := d.l.Absorb(realRuns(rd.Execute))
		require.NoError(t, err)
		sc = *ab.Scored
	}
	require.NoError(t, d.l.Expand(time.Time{}))
	d.log = append(d.log, show(sc))
	d.step += 2
	d.l.Observe(d.step)
}

func TestLoopCheckpointAnywhere(t *testing.T) {
	// A checkpoint taken between rollouts, restored into a new loop, goes
	// on exactly as the loop it was taken of: same reports, same final
	// state, bit for bit. With and without WMRL and the trigger.
	for _, name := range []string{"fixed", "wmrl", "trigger"} {
		t.Run(name, func(t *testing.T) {
			cfg := loopConfig()
			cfg.Quota, cfg.Candidates = 3, 6
			cfg.Schedule = calibrate.Schedule{Steps: []int{2, 4}, Budgets: []int{2, 2}}
			switch name {
			case "wmrl":
				w := DefaultWMRLConfig()
				w.AnchorFraction = 0.5
				cfg.WMRL = &w
			case "trigger":
				trig := DefaultTriggerConfig()
				trig.Rule.MinInterval, trig.Rule.MinPairs, trig.Horizon = 2, 1, 2
				cfg.Trigger = &trig
			}
			const rollouts = 4
			want := &driver{l: newTestLoop(t, cfg), n: 6}
			var cps [][]byte
			var logs [][]string
			var steps []int
			for range rollouts {
				cp, err := want.l.Checkpoint(json.RawMessage(`{"note":"driver"}`))
				require.NoError(t, err)
				cps, logs, steps = append(cps, cp), append(logs, append([]string(nil), want.log...)), append(steps, want.step)
				want.rollout(t)
			}
			final, err := want.l.Checkpoint(nil)
			require.NoError(t, err)
			calibrated := 0
			for _, line := range want.log {
				if strings.HasPrefix(line, "{Step:") {
					calibrated++
				}
			}
			require.Equal(t, 2, calibrated, "both points ran")
			for k, cp := range cps {
				r := &driver{l: newTestLoop(t, cfg), n: 6, log: logs[k], step: steps[k]}
				var part json.RawMessage
				require.NoError(t, r.l.Restore(cp, func(d json.RawMessage, _ Status) error { part = d; return nil }))
				require.JSONEq(t, `{"note":"driver"}`, string(part))
				for len(r.log) < len(want.log) {
					r.rollout(t)
				}
				require.Equal(t, want.log, r.log, "checkpoint %d", k)
				got, err := r.l.Checkpoint(nil)
				require.NoError(t, err)
				require.Equal(t, string(final), string(got), "checkpoint %d: final state", k)
			}
		})
	}
}

func TestLoopRestoresAnEarlierCheckpoint(t *testing.T) {
	// testdata holds the environment service's loop checkpoint as an
	// earlier version wrote it (format lm2lm/Trainer/v3): a calibration
	// picked at step 1 with its runs in flight, and a group scored at step
	// 2. It restores with the same run pending and the group a candidate;
	// absorbing the run reports b's predicted r = 2 under M_0 against its
	// real clip(0.2/0.5) = 0.4 (METHOD.md §1 On-policy calibration).
	data, err := os.ReadFile("testdata/service-loop-v3-calibrating.json")
	require.NoError(t, err)
	l := newTestLoop(t, loopConfig())
	var part json.RawMessage
	require.NoError(t, l.Restore(data, func(d json.RawMessage, st Status) error {
		part = d
		require.True(t, st.Calibrating)
		return nil
	}))
	require.JSONEq(t, `{"step": 2, "batches": null, "policy": null}`, string(part), "an earlier layout's trainer part: no mini-batches, no policy")
	st := l.Status()
	require.Equal(t, 2, st.Step)
	require.Equal(t, 1, st.Candidates)
	rd := l.Ready()
	require.Equal(t, CalibrationRuns, rd.Kind)
	require.Len(t, rd.Execute, 1)
	require.Equal(t, "b", rd.Execute[0].Change.Proposal.Mechanism)
	rec := records.Record{Task: coreTask, Proposal: prop("b"), Gain: 0.2, Loss: 2.8, Source: records.Real}
	ab, err := l.Absorb([]RealRun{{Record: rec, Measured: true, Ran: true}})
	require.NoError(t, err)
	require.Equal(t, 1, ab.Calibration.Step)
	require.Equal(t, [][]float64{{2}}, ab.Calibration.Predicted)
	require.InDelta(t, 0.4, ab.Calibration.Real[0][0], 1e-12)
	require.Equal(t, 2, l.Status().Evidence.Len())

	// A step in flight of a phase this version no longer has is refused
	// with a message that says so, and the loop is unchanged.
	var env map[string]any
	require.NoError(t, json.Unmarshal(data, &env))
	body := env["body"].(map[string]any)
	body["in_flight"].(map[string]any)["phase"] = 2
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	env["body"], env["sha256"] = json.RawMessage(raw), hex.EncodeToString(sum[:])
	old, err := json.Marshal(env)
	require.NoError(t, err)
	fresh := newTestLoop(t, loopConfig())
	err = fresh.Restore(old, nil)
	require.ErrorIs(t, err, ErrCheckpoint)
	require.ErrorContains(t, err, "phase 2, which this version no longer has")
	require.Zero(t, fresh.Status().Step)
}

func TestLoopProperties(t *testing.T) {
	// Over random seeds, candidate bounds and schedules: the candidates
	// never exceed Config.Candidates; a calibration runs at most B_u
	// changes, none already in M, and adds exactly its executed records to
	// M; the points run in order, at most one per step; a kept group's
	// mean-centred advantages sum to zero and a dropped group's are zero
	// (METHOD.md §1 Policy optimisation and On-policy calibration).
	rng := rand.New(rand.NewPCG(7, 8))
	points := 0
	for trial := range 40 {
		cfg := loopConfig()
		cfg.Seed = uint64(trial + 1)
		cfg.Quota, cfg.Candidates = rng.IntN(4), 1+rng.IntN(8)
		cfg.Schedule = calibrate.Schedule{Steps: []int{2, 4, 6}, Budgets: []int{1 + rng.IntN(3), 1 + rng.IntN(3), 1 + rng.IntN(3)}}
		if trial%2 == 1 {
			cfg.Calibration = RandomCalibration
		}
		l := newTestLoop(t, cfg)
		d := &driver{l: l, n: 1 + rng.IntN(5)}
		lastPoint, lastStep := 0, -1
		for range 4 {
			states := l.Draw(d.n)
			srcs := l.Sources(len(states))
			gs := make([]Group, len(states))
			for i, s := range states {
				gs[i] = Group{State: s, Samples: d.sample(s, srcs[i])}
			}
			sc, err := l.Score(gs, fixedGains(l.Ready(gs...).Predict))
			require.NoError(t, err)
			require.LessOrEqual(t, l.Status().Candidates, cfg.Candidates)
			for _, g := range sc.Groups {
				var sum float64
				for _, a := range g.Advantages {
					sum += a
				}
				if g.Kept {
					require.InDelta(t, 0, sum, 1e-9)
				} else {
					require.Zero(t, sum)
				}
			}
			l.Observe(d.step)
			if rd := l.Ready(); rd.Kind == CalibrationRuns {
				u := l.Status().Calibrations
				require.Equal(t, lastPoint, u, "points in order")
				require.Greater(t, d.step, lastStep, "one per step")
				require.LessOrEqual(t, len(rd.Execute), cfg.Schedule.Budgets[u])
				before := l.Status().Evidence
				for _, j := range rd.Execute {
					for i := 0; i < before.Len(); i++ {
						r := before.At(i)
						require.NotEqual(t, records.TaskChange{Task: r.Task, Proposal: r.Proposal}.Key(), j.Change.Key(), "a change in M is not run again")
					}
				}
				ab, err := l.Absorb(realRuns(rd.Execute))
				require.NoError(t, err)
				require.Equal(t, before.Len()+ab.Calibration.Executed, l.Status().Evidence.Len())
				lastPoint, lastStep = u+1, d.step
				points++
			}
			require.NoError(t, l.Expand(time.Time{}))
			d.step += 2
		}
	}
	require.Equal(t, 40*3, points, "every point of every trial ran")
}
