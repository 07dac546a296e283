package calibrate

import (
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// ErrConfig is wrapped by every Validate of the package.
var ErrConfig = errors.New("calibrate: invalid config")

// WMRLConfig parameterises WMRL's corrections (METHOD.md §2): anchor
// groups, the online isotonic debiaser and the inverse-variance weighter.
// It is the one WMRL configuration of the library: the trainer's
// lm2lm.WMRLConfig is this type.
type WMRLConfig struct {
	// AnchorFraction is the fraction of kept groups that are anchor groups;
	// default 0.10 (METHOD.md §2: about 10%). AnchorMin and AnchorMax bound
	// the count: defaults 1 (library choice, as WMRL's code: a step never
	// goes without ground truth) and 0 = no cap; see AnchorCount.
	AnchorFraction       float64
	AnchorMin, AnchorMax int
	// Debias applies the online isotonic map; default true (METHOD.md §2
	// Online Debiasing). MinPairs, RefitEvery, Bins and Capacity are
	// NewOnlineDebiaser's; defaults 200, 64, 10, 5000 (library choice,
	// taken from WMRL's code: METHOD.md §2 gives no numbers). Bins 0
	// selects the exact (unbinned) isotonic fit; Capacity 0 keeps every
	// pair.
	Debias                               bool
	MinPairs, RefitEvery, Bins, Capacity int
	// Weight up-weights anchor groups' advantages; default true (METHOD.md
	// §2 Inverse-Variance Denoising). HalfLife, Warmup, MaxWeight and Target
	// are NewWeighter's; defaults 64, 32, 4, 2 (library choice, taken from
	// WMRL's code: METHOD.md §2 gives no numbers).
	Weight            bool
	HalfLife, Warmup  int
	MaxWeight, Target float64
}

// DefaultWMRLConfig returns the defaults documented on WMRLConfig's fields.
func DefaultWMRLConfig() WMRLConfig {
	return WMRLConfig{
		AnchorFraction: 0.10, AnchorMin: 1,
		Debias: true, MinPairs: 200, RefitEvery: 64, Bins: 10, Capacity: 5000,
		Weight: true, HalfLife: 64, Warmup: 32, MaxWeight: 4, Target: 2,
	}
}

// Validate reports the first invalid field, wrapping ErrConfig. The
// debiaser's fields are checked only when Debias is set and the weighter's
// only when Weight is set (a part that is off is never built).
func (c WMRLConfig) Validate() error {
	switch {
	case !(c.AnchorFraction >= 0 && c.AnchorFraction <= 1):
		return fmt.Errorf("%w: WMRL AnchorFraction = %g, want in [0, 1]", ErrConfig, c.AnchorFraction)
	case c.AnchorMin < 0 || c.AnchorMax < 0 || (c.AnchorMax > 0 && c.AnchorMax < c.AnchorMin):
		return fmt.Errorf("%w: WMRL AnchorMin %d / AnchorMax %d: want 0 ≤ min ≤ max or max = 0", ErrConfig, c.AnchorMin, c.AnchorMax)
	case c.Debias && (c.MinPairs < 2 || c.RefitEvery < 1 || (c.Bins != 0 && c.Bins < 2) || c.Capacity < 0 ||
		(c.Capacity > 0 && c.Capacity < c.MinPairs)):
		return fmt.Errorf("%w: WMRL debiaser min pairs %d (≥ 2), refit every %d (≥ 1), bins %d (0 or ≥ 2), capacity %d (0 or ≥ min pairs)",
			ErrConfig, c.MinPairs, c.RefitEvery, c.Bins, c.Capacity)
	case c.Weight && (c.HalfLife < 1 || c.Warmup < 1):
		return fmt.Errorf("%w: WMRL HalfLife %d and Warmup %d must be ≥ 1", ErrConfig, c.HalfLife, c.Warmup)
	case c.Weight && (!stat.Finite(c.Target) || c.Target <= 1 || !stat.Finite(c.MaxWeight) || c.MaxWeight < c.Target):
		return fmt.Errorf("%w: WMRL Target %g and MaxWeight %g: want 1 < target ≤ max", ErrConfig, c.Target, c.MaxWeight)
	}
	return nil
}

// NewOnlineDebiaser returns a debiaser with c's parameters, or an error
// wrapping ErrConfig for a negative Bins.
func (c WMRLConfig) NewOnlineDebiaser() (*OnlineDebiaser, error) {
	return NewOnlineDebiaser(c.MinPairs, c.RefitEvery, c.Bins, c.Capacity)
}

// NewWeighter returns a weighter with c's parameters.
func (c WMRLConfig) NewWeighter() *Weighter {
	return NewWeighter(c.HalfLife, c.Warmup, c.MaxWeight, c.Target)
}

// AnchorCount returns the anchor-group count for groups with c's
// fraction, floor and cap.
func (c WMRLConfig) AnchorCount(groups int) int {
	return AnchorCount(groups, c.AnchorFraction, c.AnchorMin, c.AnchorMax)
}
