package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/environment/yamlenv"
	"github.com/lm2lm/lm2lm/records"
)

// planOf runs `plan -json` and returns the plan by stage.
func planOf(t *testing.T, cfg string) (Plan, map[string]yamlenv.StagePlan) {
	t.Helper()
	out, errs, err := lm2lmRun(t, cfg, "plan", "-json")
	require.NoError(t, err, errs)
	var pl Plan
	require.NoError(t, json.Unmarshal([]byte(out), &pl), out)
	by := map[string]yamlenv.StagePlan{}
	for _, s := range pl.Stages {
		by[s.Stage] = s
	}
	require.Len(t, by, 4)
	return pl, by
}

// TestPlanMatchesTheRuns plans, then runs every paying verb on
// trainscript: each verb pays exactly the runs the plan said it would
// and reuses the others; the estimate, once runs are measured, is the
// runs to pay times their tasks' mean measured device-seconds.
func TestPlanMatchesTheRuns(t *testing.T) {
	cfg := config(t)
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfg, append(b, "price_per_device_hour: 3\n"...), 0o600))

	pl, by := planOf(t, cfg)
	ref, m0, cal, ev := by["reference"], by["M_0"], by["calibration"], by["evaluation"]
	require.Equal(t, [3]int{8, 8, 0}, [3]int{len(ref.Runs), ref.ToPay, ref.Reused}) // 3 + 2 + 3 seeds
	require.Equal(t, [2]int{6, 6}, [2]int{len(m0.Runs), m0.ToPay})                  // m0.size
	require.Equal(t, [2]int{2, 2}, [2]int{cal.AtMost, cal.ToPay})                   // calibration.budgets [2]
	require.Len(t, ev.Runs, 16)                                                     // 4 states × k 4 on prose-held
	require.Equal(t, 16, ev.ToPay+ev.Reused)
	require.LessOrEqual(t, ev.ToPay, 5, "the catalogue holds 5 changes")
	// Nothing measured and no training.timeout: no estimate.
	require.Equal(t, yamlenv.Unknown, pl.Estimate.Basis)
	require.Equal(t, 8+6+2+ev.ToPay, pl.ToPay)
	require.True(t, pl.AtMost)
	text, _, err := lm2lmRun(t, cfg, "plan")
	require.NoError(t, err)
	require.Regexp(t, `\nreference +reference, m0, serve, evaluate +8 +0 +0 +8 +– +– +no run measured yet\n`, text)
	require.Regexp(t, `\ncalibration +serve +≤ 2 +0 +0 +≤ 2 +– +– `, text)
	_, statErr := os.Stat(filepath.Join(filepath.Dir(cfg), "lm2lm-out", "records.jsonl"))
	require.ErrorIs(t, statErr, os.ErrNotExist, "plan writes nothing")

	out, errs, err := lm2lmRun(t, cfg, "reference")
	require.NoError(t, err, errs)
	require.Contains(t, out, fmt.Sprintf("reference: %d runs paid now, 0 reused", ref.ToPay))

	pl, by = planOf(t, cfg)
	ref, m0 = by["reference"], by["M_0"]
	require.Equal(t, [3]int{0, 8, 0}, [3]int{ref.ToPay, ref.Reused, ref.FailedBefore})
	require.Equal(t, yamlenv.Nothing, ref.Estimate.Basis)
	require.Equal(t, 6, m0.ToPay)
	// M_0's estimate: each run at the mean device-seconds of its task's
	// reference runs, as stored.
	sum, n := map[string]float64{}, map[string]float64{}
	for _, r := range storeRecords(t, cfg) {
		require.Equal(t, records.Reference, r.Source)
		require.Positive(t, r.Cost.DeviceSeconds)
		sum[r.Task.ID] += r.Cost.DeviceSeconds
		n[r.Task.ID]++
	}
	want := 0.0
	for _, r := range m0.Runs {
		want += sum[r.Task] / n[r.Task] / 3600
	}
	require.Equal(t, yamlenv.Measured, m0.Estimate.Basis)
	require.InDelta(t, want, m0.Estimate.DeviceHours, 1e-12)
	require.InDelta(t, 3*want, m0.Estimate.Money, 1e-12)

	out, errs, err = lm2lmRun(t, cfg, "m0")
	require.NoError(t, err, errs)
	require.Contains(t, out, fmt.Sprintf("M_0: 6 records (0 infeasible, 0 failed): %d runs paid now, 0 reused", m0.ToPay))
	out, errs, err = lm2lmRun(t, cfg, "evaluate")
	require.NoError(t, err, errs)
	require.Contains(t, out, fmt.Sprintf("evaluate: %d runs paid now, %d reused", ev.ToPay, ev.Reused))

	// Everything is stored: only the service's calibrations are left.
	pl, by = planOf(t, cfg)
	for _, s := range []string{"reference", "M_0", "evaluation"} {
		require.Zero(t, by[s].ToPay, s)
		require.Equal(t, yamlenv.Nothing, by[s].Estimate.Basis, s)
	}
	require.Equal(t, [2]int{8, 6}, [2]int{by["reference"].Reused, by["M_0"].Reused})
	require.Equal(t, 16, by["evaluation"].Reused)
	require.Equal(t, 2, pl.ToPay)
	require.Equal(t, yamlenv.Measured, pl.Estimate.Basis)
	text, _, err = lm2lmRun(t, cfg, "plan")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`\ntotal +≤ 2 +≤ [0-9.e-]+ +≤ [0-9.e-]+ +measured on the same tasks\n`), text)
}
