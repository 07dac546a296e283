package evalstat

import (
	"fmt"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Scale re-expresses gains given in σ_e units (METHOD.md §1 Headline
// results: seed-normalised gains) on a robust scale. A gain g in σ_e units
// on a task of seed noise σ_e and family f becomes
//
//	clip(g · σ_e / τ_e, −Clip, +Clip),  τ_e = max(σ_e, floor(f)),
//
// that is the raw gain divided by a floored noise and clipped at the
// reward clip c (METHOD.md §1 Reward 2). Where σ_e is tiny, the raw σ_e
// units explode (one bad proposal on a task of σ_e = 0.0015 scores −1000)
// and a few such values carry a mean; the floor caps the weight of a task
// at its family's typical noise and the clip bounds every proposal's
// contribution, as the reward does during training.
//
// Properties: the transform is non-decreasing in g; it is the identity
// when σ_e ≥ floor(f) and |g| ≤ Clip; its value lies in [−Clip, +Clip].
// An infeasible run that the caller scores −c in σ_e units is a decision
// of the caller's, not a measured gain: keep it at −c rather than
// re-expressing it (Apply would shrink it towards 0 where σ_e < floor).
type Scale struct {
	// Floors maps a task family to its σ floor (finite, > 0), e.g. the
	// median σ_e of the family's training tasks (NewScale).
	Floors map[string]float64
	// Fallback is the floor of a family that Floors lacks (finite, > 0).
	// NewScale sets it to the median σ_e over all its inputs (library
	// choice: a family never seen in training is floored at the typical
	// noise of all tasks, not left unfloored).
	Fallback float64
	// Clip is the bound c of the robust gains (finite, > 0); the reward
	// rule's default is 6.
	Clip float64
}

// Noise is one task's seed noise σ_e (the standard deviation of its
// reference loss over seeds) and its family: the input of NewScale.
type Noise struct {
	Family string
	Sigma  float64
}

// NewScale returns the Scale whose floor of each family is the median σ_e
// of that family's entries in noise, whose Fallback is the median σ_e of
// all entries, and whose clip is clip. The floors should come from tasks
// known before any evaluation (the training split's), so they are the same
// for every method compared. It returns an error wrapping ErrConfig for
// no entries, a σ_e that is not finite and > 0, or a bad clip.
func NewScale(noise []Noise, clip float64) (Scale, error) {
	if len(noise) == 0 {
		return Scale{}, fmt.Errorf("%w: no seed noise to take the floors from", ErrConfig)
	}
	by := map[string][]float64{}
	all := make([]float64, 0, len(noise))
	for _, n := range noise {
		if !(n.Sigma > 0) || math.IsInf(n.Sigma, 0) {
			return Scale{}, fmt.Errorf("%w: family %q has seed noise %g, want finite and > 0", ErrConfig, n.Family, n.Sigma)
		}
		by[n.Family] = append(by[n.Family], n.Sigma)
		all = append(all, n.Sigma)
	}
	s := Scale{Floors: make(map[string]float64, len(by)), Fallback: stat.Median(all), Clip: clip}
	for f, xs := range by {
		s.Floors[f] = stat.Median(xs)
	}
	return s, s.Validate()
}

// Validate reports the first problem with s, wrapping ErrConfig.
func (s Scale) Validate() error {
	good := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	if !good(s.Clip) {
		return fmt.Errorf("%w: scale Clip = %g, want finite and > 0", ErrConfig, s.Clip)
	}
	if !good(s.Fallback) {
		return fmt.Errorf("%w: scale Fallback = %g, want finite and > 0", ErrConfig, s.Fallback)
	}
	fams := make([]string, 0, len(s.Floors))
	for f := range s.Floors {
		fams = append(fams, f)
	}
	slices.Sort(fams) // the first bad family, deterministically
	for _, f := range fams {
		if !good(s.Floors[f]) {
			return fmt.Errorf("%w: scale floor of family %q = %g, want finite and > 0", ErrConfig, f, s.Floors[f])
		}
	}
	return nil
}

// Floor returns the σ floor of family: Floors[family], or Fallback when
// Floors has no entry for it.
func (s Scale) Floor(family string) float64 {
	if f, ok := s.Floors[family]; ok {
		return f
	}
	return s.Fallback
}

// Apply re-expresses g, a gain in σ_e units on a task of family with seed
// noise sigma, on the robust scale: clip(g·σ_e/τ_e, −Clip, +Clip) with
// τ_e = max(σ_e, Floor(family)). When σ_e ≥ the floor the factor σ_e/τ_e
// is exactly 1, so g within the clip comes back bit for bit. It returns
// NaN for a NaN g or a sigma that is not finite and > 0; s should be valid
// (Validate).
func (s Scale) Apply(family string, sigma, g float64) float64 {
	if math.IsNaN(g) || !(sigma > 0) || math.IsInf(sigma, 0) {
		return math.NaN()
	}
	tau := max(sigma, s.Floor(family))
	return min(max(g*(sigma/tau), -s.Clip), s.Clip)
}
