package calibrate

import (
	"fmt"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// OnlineDebiaser keeps a FIFO buffer of anchor pairs (world-model score x,
// real score y) and refits a binned isotonic map from x to y as pairs
// arrive (METHOD.md §2 Online Debiasing), as WMRL does:
//
//   - Until the first successful fit the map is the identity, so a run that
//     never sees enough ground truth trains on raw world-model scores.
//   - A refit is attempted on a Push once the buffer holds at least
//     minPairs pairs and at least refitEvery pairs have arrived since the
//     last successful fit (so the first fit happens at the Push that makes
//     both true).
//   - With bins > 0 the map is FitBinned's (WMRL); with bins = 0 it is the
//     exact FitIsotonic over the buffer (library option).
//   - A fit fails when the buffer's pairs populate fewer than 2 bins
//     (TryFitBinned returns false), or with bins = 0 when they hold fewer
//     than 2 distinct x. A failed fit keeps the old map and the
//     arrival count, so the next Push tries again.
//   - Push rejects pairs with a NaN or infinite side: they are not stored,
//     do not count as arrivals, and are counted by Rejected.
//
// Not safe for concurrent use.
type OnlineDebiaser struct {
	minPairs, refitEvery, bins, capacity int

	xs, ys   []float64 // ring buffer when capacity > 0
	start    int       // index of the oldest pair
	since    int       // pairs accepted since the last successful fit
	f        Isotonic
	fits     int
	rejected int
}

// NewOnlineDebiaser returns a debiaser that fits after minPairs pairs,
// refits every refitEvery new pairs (values < 1 mean 1), uses bins
// equal-width bins (0 = exact isotonic fit; negative is an error wrapping
// ErrConfig) and keeps the newest capacity pairs (≤ 0 means no cap).
// DefaultWMRLConfig gives 200, 64, 10 and 5000: library choice taken from
// WMRL's code (METHOD.md §2 gives no numbers).
func NewOnlineDebiaser(minPairs, refitEvery, bins, capacity int) (*OnlineDebiaser, error) {
	if bins < 0 {
		return nil, fmt.Errorf("%w: debiaser bins = %d, want ≥ 0", ErrConfig, bins)
	}
	return &OnlineDebiaser{minPairs: minPairs, refitEvery: max(refitEvery, 1), bins: bins, capacity: capacity}, nil
}

// Push records one anchor pair and refits when due (see OnlineDebiaser);
// Fits tells whether a refit happened.
func (d *OnlineDebiaser) Push(x, y float64) {
	if !stat.Finite(x) || !stat.Finite(y) {
		d.rejected++
		return
	}
	if d.capacity > 0 && len(d.xs) == d.capacity {
		d.xs[d.start], d.ys[d.start] = x, y
		d.start = (d.start + 1) % d.capacity
	} else {
		d.xs = append(d.xs, x)
		d.ys = append(d.ys, y)
	}
	d.since++
	if len(d.xs) >= d.minPairs && d.since >= d.refitEvery {
		d.Refit()
	}
}

// Refit fits the map now on the buffered pairs, whatever the counters say,
// and reports whether it succeeded (on failure the old map is kept).
func (d *OnlineDebiaser) Refit() bool {
	x, y := d.Pairs()
	var f Isotonic
	if d.bins > 0 {
		var ok bool
		if f, ok = TryFitBinned(x, y, d.bins); !ok {
			return false
		}
	} else if f = FitIsotonic(x, y, nil); len(f.X) < 2 {
		return false
	}
	d.f, d.since = f, 0
	d.fits++
	return true
}

// Pairs returns copies of the buffered pairs, oldest first.
func (d *OnlineDebiaser) Pairs() (x, y []float64) {
	n := len(d.xs)
	x, y = make([]float64, 0, n), make([]float64, 0, n)
	x = append(append(x, d.xs[d.start:]...), d.xs[:d.start]...)
	y = append(append(y, d.ys[d.start:]...), d.ys[:d.start]...)
	return x, y
}

// Map returns the current map (the identity before the first fit). The
// returned value is never modified afterwards and may be kept and shared.
func (d *OnlineDebiaser) Map() Isotonic { return d.f }

// Apply maps a world-model score through the current map.
func (d *OnlineDebiaser) Apply(x float64) float64 { return d.f.Apply(x) }

// Calibrated reports whether a fit has succeeded.
func (d *OnlineDebiaser) Calibrated() bool { return d.fits > 0 }

// Len returns the number of buffered pairs.
func (d *OnlineDebiaser) Len() int { return len(d.xs) }

// Fits returns the number of successful fits.
func (d *OnlineDebiaser) Fits() int { return d.fits }

// Rejected returns the number of non-finite pairs Push refused.
func (d *OnlineDebiaser) Rejected() int { return d.rejected }
