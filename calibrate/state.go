package calibrate

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// ErrState marks a debiaser or weighter state that cannot be restored.
var ErrState = errors.New("calibrate: invalid state")

// Formats of the serialised states; UnmarshalBinary refuses others.
const (
	debiaserFormat = "lm2lm/calibrate.OnlineDebiaser/v1"
	weighterFormat = "lm2lm/calibrate.Weighter/v1"
)

type debiaserState struct {
	Format     string    `json:"format"`
	MinPairs   int       `json:"min_pairs"`
	RefitEvery int       `json:"refit_every"`
	Bins       int       `json:"bins"`
	Capacity   int       `json:"capacity"`
	X          []float64 `json:"x"` // buffered pairs, oldest first
	Y          []float64 `json:"y"`
	Since      int       `json:"since"`
	Map        Isotonic  `json:"map"`
	Fits       int       `json:"fits"`
	Rejected   int       `json:"rejected"`
}

// MarshalBinary returns the debiaser's whole state as JSON: its parameters,
// the buffered pairs oldest first, the arrival count, the current map and
// the counters. Go's JSON encoding of float64 round-trips exactly, so a
// restored debiaser maps and refits bit for bit as the original would.
func (d *OnlineDebiaser) MarshalBinary() ([]byte, error) {
	x, y := d.Pairs()
	return json.Marshal(debiaserState{Format: debiaserFormat, MinPairs: d.minPairs, RefitEvery: d.refitEvery,
		Bins: d.bins, Capacity: d.capacity, X: x, Y: y, Since: d.since, Map: d.f, Fits: d.fits, Rejected: d.rejected})
}

// UnmarshalBinary restores a state written by MarshalBinary into a
// debiaser made with the same parameters (NewOnlineDebiaser). A state of
// another format or other parameters, with non-finite or mismatched pairs,
// more pairs than the capacity, negative counters, or a map that is not
// non-decreasing with strictly increasing finite knots fails with an error
// wrapping ErrState and leaves d unchanged.
func (d *OnlineDebiaser) UnmarshalBinary(data []byte) error {
	var s debiaserState
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: debiaser: %w", ErrState, err)
	}
	switch {
	case s.Format != debiaserFormat:
		return fmt.Errorf("%w: debiaser format %q, want %q", ErrState, s.Format, debiaserFormat)
	case s.MinPairs != d.minPairs || s.RefitEvery != d.refitEvery || s.Bins != d.bins || s.Capacity != d.capacity:
		return fmt.Errorf("%w: debiaser parameters %d/%d/%d/%d, this one has %d/%d/%d/%d", ErrState,
			s.MinPairs, s.RefitEvery, s.Bins, s.Capacity, d.minPairs, d.refitEvery, d.bins, d.capacity)
	case len(s.X) != len(s.Y):
		return fmt.Errorf("%w: debiaser has %d x and %d y", ErrState, len(s.X), len(s.Y))
	case d.capacity > 0 && len(s.X) > d.capacity:
		return fmt.Errorf("%w: debiaser holds %d pairs, capacity %d", ErrState, len(s.X), d.capacity)
	case s.Since < 0 || s.Fits < 0 || s.Rejected < 0:
		return fmt.Errorf("%w: debiaser counters since %d, fits %d, rejected %d", ErrState, s.Since, s.Fits, s.Rejected)
	case s.Fits == 0 && !s.Map.Identity():
		return fmt.Errorf("%w: debiaser map has %d knots after %d fits", ErrState, len(s.Map.X), s.Fits)
	}
	for i := range s.X {
		if !stat.Finite(s.X[i]) || !stat.Finite(s.Y[i]) {
			return fmt.Errorf("%w: debiaser pair %d (%g, %g) is not finite", ErrState, i, s.X[i], s.Y[i])
		}
	}
	if err := s.Map.validate(); err != nil {
		return fmt.Errorf("%w: debiaser map: %w", ErrState, err)
	}
	d.xs, d.ys, d.start = s.X, s.Y, 0
	d.since, d.f, d.fits, d.rejected = s.Since, s.Map, s.Fits, s.Rejected
	return nil
}

// validate reports whether f is a valid map: equal lengths, finite knots,
// X strictly increasing, Y non-decreasing.
func (f Isotonic) validate() error {
	if len(f.X) != len(f.Y) {
		return fmt.Errorf("%d x knots and %d y knots", len(f.X), len(f.Y))
	}
	for i := range f.X {
		if !stat.Finite(f.X[i]) || !stat.Finite(f.Y[i]) {
			return fmt.Errorf("knot %d (%g, %g) is not finite", i, f.X[i], f.Y[i])
		}
		if i > 0 && (f.X[i] <= f.X[i-1] || f.Y[i] < f.Y[i-1]) {
			return fmt.Errorf("knot %d (%g, %g) does not follow (%g, %g)", i, f.X[i], f.Y[i], f.X[i-1], f.Y[i-1])
		}
	}
	return nil
}

type weighterState struct {
	Format    string  `json:"format"`
	Alpha     float64 `json:"alpha"`
	Warmup    int     `json:"warmup"`
	MaxWeight float64 `json:"max_weight"`
	Target    float64 `json:"target"`
	D         float64 `json:"d"`
	C         float64 `json:"c"`
	N         int     `json:"n"`
	Frozen    bool    `json:"frozen"`
}

// MarshalBinary returns the weighter's whole state as JSON: its
// parameters, the EWMA disagreement, the frozen scale and the count.
func (w *Weighter) MarshalBinary() ([]byte, error) {
	return json.Marshal(weighterState{Format: weighterFormat, Alpha: w.alpha, Warmup: w.warmup,
		MaxWeight: w.maxWeight, Target: w.target, D: w.d, C: w.c, N: w.n, Frozen: w.frozen})
}

// UnmarshalBinary restores a state written by MarshalBinary into a
// weighter made with the same parameters (NewWeighter). A state of another
// format or other parameters, with a negative or non-finite disagreement
// or scale, a negative count, or a scale without freezing fails with an
// error wrapping ErrState and leaves w unchanged.
func (w *Weighter) UnmarshalBinary(data []byte) error {
	var s weighterState
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: weighter: %w", ErrState, err)
	}
	switch {
	case s.Format != weighterFormat:
		return fmt.Errorf("%w: weighter format %q, want %q", ErrState, s.Format, weighterFormat)
	case s.Alpha != w.alpha || s.Warmup != w.warmup || s.MaxWeight != w.maxWeight || s.Target != w.target:
		return fmt.Errorf("%w: weighter parameters differ from this one's", ErrState)
	case !stat.Finite(s.D) || s.D < 0 || !stat.Finite(s.C) || s.C < 0 || s.N < 0:
		return fmt.Errorf("%w: weighter D %g, c %g, n %d", ErrState, s.D, s.C, s.N)
	case (s.N == 0 && (s.D != 0 || s.Frozen)) || (!s.Frozen && s.C != 0):
		return fmt.Errorf("%w: weighter n %d, D %g, c %g, frozen %v are inconsistent", ErrState, s.N, s.D, s.C, s.Frozen)
	}
	w.d, w.c, w.n, w.frozen = s.D, s.C, s.N, s.Frozen
	return nil
}
