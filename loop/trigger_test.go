package loop

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/calibrate"
)

// The calibration decision is tested on plain values (METHOD.md §1
// On-policy calibration; the trigger is beyond the paper, METHOD.md §1
// Known weaknesses).

func TestCalibrationDue(t *testing.T) {
	sched := calibrate.DefaultSchedule() // steps 16, 40, 64; budgets 31, 38, 31
	trig := DefaultTriggerConfig()       // gap 1, cosine 0.3, accuracy 0.55, MinPairs 16, MinInterval 8
	late := DefaultTriggerConfig()
	late.Horizon = 8
	mon := func(gap, cos, acc float64, n int) *calibrate.Monitors {
		return &calibrate.Monitors{Bias: calibrate.Bias{JHat: 1 + gap, JBar: 1, Delta: -gap, N: n}, Cosine: cos, Accuracy: acc}
	}
	good := mon(0.2, 0.6, 0.65, 20)
	for _, c := range []struct {
		name             string
		trig             *TriggerConfig
		step, done, last int
		m                *calibrate.Monitors
		u, budget        int
		reason           string
		ok               bool
	}{
		{"fixed: point 0 at its step", nil, 16, 0, -1, nil, 0, 31, "", true},
		{"fixed: nothing between points", nil, 24, 1, 16, mon(3, 0, 0, 99), 0, 0, "", false},
		{"fixed: point 1 at its step", nil, 40, 1, 16, nil, 1, 38, "", true},
		{"fixed: a done point is not repeated", nil, 16, 1, 16, nil, 0, 0, "", false},
		{"fixed: a point jumped over runs at the next step", nil, 20, 0, -1, nil, 0, 31, "", true},
		{"fixed: the schedule spent", nil, 80, 3, 64, nil, 0, 0, "", false},
		{"trigger: no residuals before point 0", &trig, 8, 0, -1, nil, 0, 0, "", false},
		{"trigger: point 0 at its deadline", &trig, 16, 0, -1, nil, 0, 31, "deadline step 16", true},
		{"trigger: gap fires after the interval", &trig, 24, 1, 16, mon(2, 0.6, 0.65, 20), 1, 38, "gap 2 > 1", true},
		{"trigger: not within the interval", &trig, 16, 1, 16, mon(2, 0.6, 0.65, 20), 0, 0, "", false},
		{"trigger: too few pairs", &trig, 24, 1, 16, mon(2, 0.6, 0.65, 15), 0, 0, "", false},
		{"trigger: cosine fires", &trig, 24, 1, 16, mon(0.2, 0.1, 0.65, 20), 1, 38, "advantage cosine 0.1 < 0.3", true},
		{"trigger: accuracy fires", &trig, 32, 1, 16, mon(0.2, 0.6, 0.5, 20), 1, 38, "pairwise accuracy 0.5 < 0.55", true},
		{"trigger: reliable, waits", &trig, 32, 1, 16, good, 0, 0, "", false},
		{"trigger: reliable, deadline", &trig, 40, 1, 16, good, 1, 38, "deadline step 40", true},
		{"trigger: horizon delays the deadline", &late, 40, 1, 16, good, 0, 0, "", false},
		{"trigger: horizon's deadline", &late, 48, 1, 16, good, 1, 38, "deadline step 48", true},
		{"trigger: last point spent early", &trig, 32, 2, 24, mon(2, 0.6, 0.65, 20), 2, 31, "gap 2 > 1", true},
		{"trigger: budget spent", &trig, 72, 3, 32, mon(5, -1, 0, 99), 0, 0, "", false},
	} {
		u, b, why, ok := calibrationDue(sched, c.trig, c.step, c.done, c.last, c.m)
		require.Equal(t, c.ok, ok, c.name)
		require.Equal(t, c.u, u, c.name)
		require.Equal(t, c.budget, b, c.name)
		require.Equal(t, c.reason, why, c.name)
	}
}

func TestCalibrationDueSpendsTheScheduleInOrder(t *testing.T) {
	// Property: whatever the monitors, the triggered points are the
	// schedule's in order with its budgets, at rollout boundaries at least
	// MinInterval apart unless at a deadline, never more than Σ B_u, point u
	// never after Steps[u] + Horizon; and every point is spent when the run
	// reaches the last deadline.
	sched := calibrate.Schedule{Steps: []int{8, 24, 32, 56}, Budgets: []int{5, 7, 3, 9}}
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 500; trial++ {
		trig := DefaultTriggerConfig()
		trig.Rule.MinInterval = 8 * rng.IntN(3)
		trig.Horizon = 8 * rng.IntN(3)
		done, last, spent := 0, -1, 0
		var m *calibrate.Monitors
		for step := 0; step <= 56+trig.Horizon; step += 8 {
			u, b, why, ok := calibrationDue(sched, &trig, step, done, last, m)
			if !ok {
				continue
			}
			require.Equal(t, done, u)
			require.Equal(t, sched.Budgets[u], b)
			require.LessOrEqual(t, step, sched.Steps[u]+trig.Horizon)
			if last >= 0 && step-last < trig.Rule.MinInterval {
				require.Contains(t, why, "deadline")
			}
			spent += b
			done, last = u+1, step
			m = &calibrate.Monitors{Bias: calibrate.Bias{Delta: 2 * rng.Float64(), N: 16 + rng.IntN(2) - 1},
				Cosine: rng.Float64(), Accuracy: rng.Float64()}
		}
		require.Equal(t, len(sched.Steps), done)
		require.Equal(t, sched.Total(), spent)
	}
}
