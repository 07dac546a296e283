package calibrate

import (
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Schedule is LM2LM's fixed calibration schedule (METHOD.md §1 On-policy
// calibration): at training step Steps[u], execute the Budgets[u]
// top-rated candidates of the current policy.
type Schedule struct {
	Steps   []int // calibration points u; default 16, 40, 64
	Budgets []int // B_u; default 31, 38, 31 (100 calibration runs)
}

// DefaultSchedule returns steps 16, 40, 64 with budgets 31, 38, 31.
func DefaultSchedule() Schedule {
	return Schedule{Steps: []int{16, 40, 64}, Budgets: []int{31, 38, 31}}
}

// Validate reports a mismatch of lengths, steps that are negative or not
// strictly increasing, or budgets below 1, wrapping ErrConfig.
func (s Schedule) Validate() error {
	if len(s.Steps) != len(s.Budgets) {
		return fmt.Errorf("%w: schedule has %d steps and %d budgets", ErrConfig, len(s.Steps), len(s.Budgets))
	}
	for u, st := range s.Steps {
		if st < 0 || (u > 0 && st <= s.Steps[u-1]) {
			return fmt.Errorf("%w: schedule steps %v must be ≥ 0 and strictly increasing", ErrConfig, s.Steps)
		}
		if s.Budgets[u] < 1 {
			return fmt.Errorf("%w: schedule budget B_%d = %d, want ≥ 1", ErrConfig, u, s.Budgets[u])
		}
	}
	return nil
}

// Budget returns B_u when step is a calibration point, and ok false
// otherwise.
func (s Schedule) Budget(step int) (b int, ok bool) {
	for u, st := range s.Steps {
		if st == step {
			return s.Budgets[u], true
		}
	}
	return 0, false
}

// Total returns Σ B_u, the real executions the schedule spends.
func (s Schedule) Total() int {
	var t int
	for _, b := range s.Budgets {
		t += b
	}
	return t
}

// Threshold is one monitor's firing threshold; it is inactive unless On.
type Threshold struct {
	On    bool
	Value float64
}

// Trigger is an adaptive calibration rule, beyond the paper (METHOD.md §1
// Known weaknesses: fixed schedule, no trigger on prediction residuals). It
// fires when a monitor computed on recent groups with real rewards (for
// example anchor groups or a small probe set) crosses its threshold,
// provided enough pairs back the monitors and enough steps have passed
// since the last calibration. It is pure: the caller computes the
// monitors and keeps the step of the last calibration.
type Trigger struct {
	// Gap fires when |Ĵ_M − J̄| > Value. Default on, 1 (library choice: the
	// paper's calibrated world model stays below 1, a static one reaches 2).
	Gap Threshold
	// Cosine fires when AdvantageCosine < Value. Default on, 0.3 (library
	// choice: calibrated 0.50–0.71, static falls to −0.42).
	Cosine Threshold
	// Accuracy fires when PairwiseAccuracy < Value. Default on, 0.55
	// (library choice: chance is 0.5, calibrated 0.61–0.69).
	Accuracy Threshold
	// MinPairs is the fewest finite pairs (Bias.N) the monitors need before
	// the trigger may fire. Default 16 (library choice: two groups of 8).
	MinPairs int
	// MinInterval is the fewest steps between calibrations. Default 8
	// (library choice: one rollout, METHOD.md §1 Policy optimisation).
	MinInterval int
}

// DefaultTrigger returns the defaults documented on Trigger's fields.
func DefaultTrigger() Trigger {
	return Trigger{
		Gap:      Threshold{On: true, Value: 1},
		Cosine:   Threshold{On: true, Value: 0.3},
		Accuracy: Threshold{On: true, Value: 0.55},
		MinPairs: 16, MinInterval: 8,
	}
}

// Validate reports non-finite thresholds that are on or negative counts,
// wrapping ErrConfig.
func (t Trigger) Validate() error {
	for _, th := range []struct {
		name string
		t    Threshold
	}{{"Gap", t.Gap}, {"Cosine", t.Cosine}, {"Accuracy", t.Accuracy}} {
		if th.t.On && !stat.Finite(th.t.Value) {
			return fmt.Errorf("%w: trigger %s threshold %g is not finite", ErrConfig, th.name, th.t.Value)
		}
	}
	if t.MinPairs < 0 || t.MinInterval < 0 {
		return fmt.Errorf("%w: trigger MinPairs %d and MinInterval %d must be ≥ 0", ErrConfig, t.MinPairs, t.MinInterval)
	}
	return nil
}

// Fire reports whether to calibrate at step, given the step of the last
// calibration (negative: none yet) and the current monitors, with the
// reason (e.g. "gap 1.8 > 1"); reason is "" when it does not fire. NaN
// monitors (undefined) never fire. Checks run in the order gap, cosine,
// accuracy; the first crossing is the reason.
func (t Trigger) Fire(step, last int, m Monitors) (bool, string) {
	if last >= 0 && step-last < t.MinInterval {
		return false, ""
	}
	if m.Bias.N < t.MinPairs {
		return false, ""
	}
	if g := math.Abs(m.Bias.Gap()); t.Gap.On && g > t.Gap.Value {
		return true, fmt.Sprintf("gap %.4g > %.4g", g, t.Gap.Value)
	}
	if t.Cosine.On && m.Cosine < t.Cosine.Value {
		return true, fmt.Sprintf("advantage cosine %.4g < %.4g", m.Cosine, t.Cosine.Value)
	}
	if t.Accuracy.On && m.Accuracy < t.Accuracy.Value {
		return true, fmt.Sprintf("pairwise accuracy %.4g < %.4g", m.Accuracy, t.Accuracy.Value)
	}
	return false, ""
}
