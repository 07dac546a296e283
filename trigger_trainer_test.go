package lm2lm_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// shifted is a fixed world model that predicts every card at its true gain
// plus offset (σ_e units): offset 0 is a perfect world model, a large
// offset ranks proposals right but overrates them all.
func shifted(offset float64) *rwmtest.Fixed {
	w := &rwmtest.Fixed{ByKey: map[string]rwm.Prediction{}}
	for m, levels := range truth {
		for l, g := range levels {
			w.ByKey[prop(m, l).Key()] = rwm.Prediction{Gain: (g + offset) * tasks()[0].SeedNoise, Valid: true}
		}
	}
	return w
}

// triggerConfig calibrates at steps 8 and 24 with 6 runs each, timed by
// the default trigger with MinPairs 4 (one calibration's 6 pairs suffice).
func triggerConfig() lm2lm.Config {
	cfg := smallConfig()
	cfg.Steps = 32
	cfg.Schedule = calibrate.Schedule{Steps: []int{8, 24}, Budgets: []int{6, 6}}
	trig := lm2lm.DefaultTriggerConfig()
	trig.Rule.MinPairs = 4
	cfg.Trigger = &trig
	return cfg
}

func calibrations(reps []lm2lm.StepReport) []*lm2lm.CalibrationReport {
	var out []*lm2lm.CalibrationReport
	for _, r := range reps {
		if r.Calibration != nil {
			out = append(out, r.Calibration)
		}
	}
	return out
}

func TestTriggerFiresOnLargeResiduals(t *testing.T) {
	// Every state proposes wider/2, wider/1, decay/2, deeper/1, decay/1
	// (true gains 3, 1, 0.5, 0.5, 0 σ_e). A world model that overrates every
	// change by 4σ_e predicts 7, 5, 4.5, 4.5, 4: the MAD of a task's
	// predictions is 0.5σ_e, so
	// τ_e = max(σ_e, 1.4826·0.5σ_e) = σ_e. The first calibration (its
	// deadline, step 8) executes the six top-rated changes not yet in M
	// (M_0 holds wider/1 and decay/1 on t0): wider/2 on the three tasks
	// (predicted clip(7) = 6, real 3), wider/1 on t1 and t2 (5, real 1) and
	// one decay/2 or deeper/1 (4.5, real 0.5), so the gap Ĵ_M − J̄ = (3·3 + 2·4 + 4)/6 =
	// 3.5 > 1 and the trigger brings the second calibration forward from
	// step 24 to step 16, the first boundary MinInterval = 8 steps later.
	// The perfect world model picks the same six with gap 0 and pairwise
	// accuracy 1 (τ_e = σ_e again): the second point waits for its
	// scheduled step. Both spend the schedule's 12 runs.
	group := []records.Proposal{prop("wider", "2"), prop("wider", "1"), prop("decay", "2"), prop("deeper", "1"), prop("decay", "1")}
	for _, c := range []struct {
		offset    float64
		steps     []int
		reasons   []string
		gap, jbar float64
	}{
		{4, []int{8, 16}, []string{"deadline step 8", "gap 3.5 > 1"}, 3.5, (3*3 + 2*1 + 0.5) / 6.0},
		{0, []int{8, 24}, []string{"deadline step 8", "deadline step 24"}, 0, (3*3 + 2*1 + 0.5) / 6.0},
	} {
		cfg := triggerConfig()
		cfg.DAPO.GroupSize = len(group)
		tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: &cycle{groups: [][]records.Proposal{group}},
			World: shifted(c.offset), Builder: oracle{}, Executor: oracle{},
			Tasks: tasks(), Evidence: m0(t, "wider", "lr", "decay")})
		require.NoError(t, err)
		reps, err := tr.Run(context.Background(), nil)
		require.NoError(t, err)
		cals := calibrations(reps)
		require.Len(t, cals, 2, "offset %g", c.offset)
		for k, cal := range cals {
			require.Equal(t, c.steps[k], cal.Step, "offset %g calibration %d", c.offset, k)
			require.Equal(t, c.reasons[k], cal.Trigger, "offset %g calibration %d", c.offset, k)
			require.Equal(t, 6, cal.Executed)
		}
		require.InDelta(t, c.gap, cals[0].Monitors.Bias.Gap(), 1e-12, "offset %g", c.offset)
		require.InDelta(t, c.jbar, cals[0].Monitors.Bias.JBar, 1e-12, "offset %g", c.offset)
		if c.offset == 0 {
			require.Equal(t, 1.0, cals[0].Monitors.Accuracy)
		}
		_, runs := tr.Cost()
		require.Equal(t, 12, runs, "offset %g: the schedule's budget", c.offset)
	}
}

func TestTriggerCheckpointResumeBitIdentical(t *testing.T) {
	// The trigger reads the last calibration; stopping before the step it
	// fires at (13) and resuming gives the same reports and state.
	ctx := context.Background()
	cfg := triggerConfig()
	cfg.Steps = 20
	straight, _ := newTrainer(t, cfg, shifted(4))
	want, err := straight.Run(ctx, nil)
	require.NoError(t, err)
	wantState, err := straight.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, 16, calibrations(want)[1].Step)
	for _, stopAt := range []int{3, 8, 13} {
		first, _ := newTrainer(t, cfg, shifted(4))
		var got []lm2lm.StepReport
		for first.Step() < stopAt {
			r, err := first.StepOnce(ctx)
			require.NoError(t, err)
			got = append(got, r)
		}
		cp, err := first.MarshalBinary()
		require.NoError(t, err)
		resumed, _ := newTrainer(t, cfg, shifted(4))
		require.NoError(t, resumed.UnmarshalBinary(cp))
		rest, err := resumed.Run(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, want, append(got, rest...), "stop at %d", stopAt)
		gotState, err := resumed.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, string(wantState), string(gotState), "stop at %d", stopAt)
		// The same checkpoint does not restore without the trigger.
		if stopAt == 13 {
			plain := cfg
			plain.Trigger = nil
			other, _ := newTrainer(t, plain, shifted(4))
			require.ErrorIs(t, other.UnmarshalBinary(cp), lm2lm.ErrCheckpoint)
		}
	}
}

func TestTriggerConfigValidate(t *testing.T) {
	for name, edit := range map[string]func(c *lm2lm.Config){
		"static":              func(c *lm2lm.Config) { c.Calibration = lm2lm.Static },
		"negative horizon":    func(c *lm2lm.Config) { c.Trigger.Horizon = -8 },
		"horizon off-rollout": func(c *lm2lm.Config) { c.Trigger.Horizon = 4 },
		"bad rule":            func(c *lm2lm.Config) { c.Trigger.Rule.MinPairs = -1 },
	} {
		cfg := triggerConfig()
		edit(&cfg)
		require.ErrorIs(t, cfg.Validate(), lm2lm.ErrConfig, name)
	}
	require.NoError(t, triggerConfig().Validate())
}

func TestTriggerCheckpointValidation(t *testing.T) {
	// The trigger's state is validated before anything is replaced.
	cfg := triggerConfig()
	cfg.Steps = 20
	tr, _ := newTrainer(t, cfg, shifted(4))
	for tr.Step() < 13 {
		_, err := tr.StepOnce(context.Background())
		require.NoError(t, err)
	}
	cp, err := tr.MarshalBinary()
	require.NoError(t, err)
	for name, edit := range map[string]func(b map[string]any){
		"trigger state missing":  func(b map[string]any) { delete(b, "trigger") },
		"last calibration ahead": func(b map[string]any) { b["trigger"].(map[string]any)["step"] = 16 },
		"groups mismatched": func(b map[string]any) {
			tr := b["trigger"].(map[string]any)
			tr["real"] = tr["real"].([]any)[1:]
		},
		"rewards mismatched": func(b map[string]any) {
			g := b["trigger"].(map[string]any)["predicted"].([]any)
			g[0] = append(g[0].([]any), 1.0)
		},
		"point overdue": func(b map[string]any) { b["calibrations"] = 0 },
	} {
		var env struct{ Body json.RawMessage }
		require.NoError(t, json.Unmarshal(cp, &env))
		var body map[string]any
		require.NoError(t, json.Unmarshal(env.Body, &body))
		edit(body)
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		fresh, _ := newTrainer(t, cfg, shifted(4))
		require.ErrorIs(t, fresh.UnmarshalBinary(seal(raw)), lm2lm.ErrCheckpoint, name)
		require.Zero(t, fresh.Step(), name)
	}
	fresh, _ := newTrainer(t, cfg, shifted(4))
	require.NoError(t, fresh.UnmarshalBinary(cp))
}
