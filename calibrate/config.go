package calibrate

import (
	"errors"
	"fmt"
)

// ErrConfig is wrapped by every Validate of the package.
var ErrConfig = errors.New("calibrate: invalid config")

// Config gathers the package's parameters with the papers' defaults.
type Config struct {
	// Schedule is the fixed calibration schedule: steps 16, 40, 64 with
	// B_u 31, 38, 31 (METHOD.md §1 On-policy calibration).
	Schedule Schedule
	// Adaptive enables Trigger in addition to Schedule. Default false
	// (library choice: the paper's schedule is fixed).
	Adaptive bool
	// Trigger is the adaptive rule (beyond the paper); DefaultTrigger().
	Trigger Trigger
	// PerTask is k of TopBWith, the most calibration runs per task in one
	// calibration; 0 = no limit. Default 0 (METHOD.md §1: plain top-B_u).
	PerTask int
	// UniqueKeys makes TopBWith pick at most one candidate per canonical
	// key. Default true (library choice: a second run of the same change
	// in one calibration buys noise, not new knowledge).
	UniqueKeys bool

	// AnchorFraction is the share of groups that are anchor groups.
	// Default 0.10 (METHOD.md §2).
	AnchorFraction float64
	// AnchorMin is the floor of AnchorCount. Default 1 (WMRL: a step never
	// goes without ground truth).
	AnchorMin int
	// AnchorMax caps AnchorCount; 0 = no cap. Default 0 (WMRL: no cap).
	AnchorMax int

	// DebiasMinPairs, DebiasRefitEvery, DebiasBins and DebiasCapacity are
	// the OnlineDebiaser's parameters. Defaults 200, 64, 10, 5000 (WMRL);
	// DebiasBins 0 selects the exact (unbinned) isotonic fit.
	DebiasMinPairs, DebiasRefitEvery, DebiasBins, DebiasCapacity int

	// HalfLife, Warmup, MaxWeight and TargetWeight are the Weighter's
	// parameters. Defaults 64, 32, 4, 2 (WMRL).
	HalfLife, Warmup        int
	MaxWeight, TargetWeight float64
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Schedule:       DefaultSchedule(),
		Trigger:        DefaultTrigger(),
		UniqueKeys:     true,
		AnchorFraction: 0.10, AnchorMin: 1,
		DebiasMinPairs: 200, DebiasRefitEvery: 64, DebiasBins: 10, DebiasCapacity: 5000,
		HalfLife: 64, Warmup: 32, MaxWeight: 4, TargetWeight: 2,
	}
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c Config) Validate() error {
	if err := c.Schedule.Validate(); err != nil {
		return err
	}
	if err := c.Trigger.Validate(); c.Adaptive && err != nil {
		return err
	}
	switch {
	case c.PerTask < 0:
		return fmt.Errorf("%w: PerTask = %d, want ≥ 0", ErrConfig, c.PerTask)
	case !(c.AnchorFraction >= 0 && c.AnchorFraction <= 1):
		return fmt.Errorf("%w: AnchorFraction = %g, want in [0, 1]", ErrConfig, c.AnchorFraction)
	case c.AnchorMin < 0 || c.AnchorMax < 0 || (c.AnchorMax > 0 && c.AnchorMax < c.AnchorMin):
		return fmt.Errorf("%w: AnchorMin %d / AnchorMax %d: want 0 ≤ min ≤ max or max = 0", ErrConfig, c.AnchorMin, c.AnchorMax)
	case c.DebiasMinPairs < 2 || c.DebiasRefitEvery < 1 || (c.DebiasBins != 0 && c.DebiasBins < 2) || c.DebiasCapacity < 0 ||
		(c.DebiasCapacity > 0 && c.DebiasCapacity < c.DebiasMinPairs):
		return fmt.Errorf("%w: debiaser min pairs %d, refit every %d, bins %d, capacity %d", ErrConfig,
			c.DebiasMinPairs, c.DebiasRefitEvery, c.DebiasBins, c.DebiasCapacity)
	case c.HalfLife < 1 || c.Warmup < 1:
		return fmt.Errorf("%w: HalfLife %d and Warmup %d must be ≥ 1", ErrConfig, c.HalfLife, c.Warmup)
	case !finite(c.TargetWeight) || c.TargetWeight <= 1 || !finite(c.MaxWeight) || c.MaxWeight < c.TargetWeight:
		return fmt.Errorf("%w: TargetWeight %g and MaxWeight %g: want 1 < target ≤ max", ErrConfig, c.TargetWeight, c.MaxWeight)
	}
	return nil
}

// Select picks the candidates of one calibration: TopBWith(scores, b)
// with c's PerTask and UniqueKeys and the given tasks and keys (either may
// be nil).
func (c Config) Select(scores []float64, b int, task, key []string) []int {
	return TopBWith(scores, b, Options{Task: task, Key: key, PerTask: c.PerTask, UniqueKeys: c.UniqueKeys})
}

// NewOnlineDebiaser returns a debiaser with c's parameters.
func (c Config) NewOnlineDebiaser() *OnlineDebiaser {
	return NewOnlineDebiaser(c.DebiasMinPairs, c.DebiasRefitEvery, c.DebiasBins, c.DebiasCapacity)
}

// NewWeighter returns a weighter with c's parameters.
func (c Config) NewWeighter() *Weighter {
	return NewWeighter(c.HalfLife, c.Warmup, c.MaxWeight, c.TargetWeight)
}

// AnchorCount returns the anchor-group count for groups with c's
// fraction, floor and cap.
func (c Config) AnchorCount(groups int) int {
	return AnchorCount(groups, c.AnchorFraction, c.AnchorMin, c.AnchorMax)
}
