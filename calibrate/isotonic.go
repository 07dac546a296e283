package calibrate

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Isotonic is a non-decreasing piecewise-linear map given by its knots
// (METHOD.md §2 Online Debiasing). X is strictly increasing and Y
// non-decreasing, of equal length. Apply interpolates linearly between
// knots and is flat outside them. The zero value (no knots) is the
// identity; one knot is a constant.
type Isotonic struct{ X, Y []float64 }

// Identity reports whether f is the identity map (no knots).
func (f Isotonic) Identity() bool { return len(f.X) == 0 }

// Apply maps x through f. NaN maps to NaN. Knots of unequal length panic.
func (f Isotonic) Apply(x float64) float64 {
	n := len(f.X)
	if n != len(f.Y) {
		panic("calibrate: Isotonic: len(X) != len(Y)")
	}
	switch {
	case n == 0 || math.IsNaN(x):
		return x
	case x <= f.X[0]:
		return f.Y[0]
	case x >= f.X[n-1]:
		return f.Y[n-1]
	}
	// j: last knot with X[j] ≤ x; 0 ≤ j < n−1.
	j := sort.SearchFloat64s(f.X, x)
	if j < n && f.X[j] == x {
		return f.Y[j]
	}
	j--
	slope := (f.Y[j+1] - f.Y[j]) / (f.X[j+1] - f.X[j])
	// Clamping to the segment only matters for overflowing extremes.
	return math.Min(f.Y[j+1], math.Max(f.Y[j], slope*(x-f.X[j])+f.Y[j]))
}

// FitIsotonic fits the weighted least-squares non-decreasing map from x to
// y by pool-adjacent-violators (METHOD.md §2 Online Debiasing). w nil
// means equal weights. Pairs with a non-finite x, y or w, or with w ≤ 0,
// are ignored. Pairs with equal x are first pooled into their weighted
// mean; then adjacent blocks are merged (weighted by total weight) while
// a block's value is strictly above the next one's. The result has one
// knot per distinct x, holding its block's value. No usable pair gives the
// identity. Mismatched lengths panic.
func FitIsotonic(x, y, w []float64) Isotonic {
	if len(x) != len(y) || (w != nil && len(w) != len(x)) {
		panic("calibrate: FitIsotonic: x, y and w differ in length")
	}
	type point struct {
		x, y, w float64
		i       int
	}
	pts := make([]point, 0, len(x))
	for i := range x {
		wi := 1.0
		if w != nil {
			wi = w[i]
		}
		if !stat.Finite(x[i]) || !stat.Finite(y[i]) || !stat.Finite(wi) || wi <= 0 {
			continue
		}
		pts = append(pts, point{x[i], y[i], wi, i})
	}
	if len(pts) == 0 {
		return Isotonic{}
	}
	// Ties by input index, so pooled ties sum in input order.
	slices.SortFunc(pts, func(a, b point) int {
		if a.x != b.x {
			if a.x < b.x {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.i, b.i)
	})
	// Pool equal x.
	ux := make([]float64, 0, len(pts))
	uy := make([]float64, 0, len(pts))
	uw := make([]float64, 0, len(pts))
	for k := 0; k < len(pts); {
		xi := pts[k].x
		var sw, swy float64
		for ; k < len(pts) && pts[k].x == xi; k++ {
			sw += pts[k].w
			swy += pts[k].w * pts[k].y
		}
		ux = append(ux, xi)
		uy = append(uy, swy/sw)
		uw = append(uw, sw)
	}
	return Isotonic{X: ux, Y: pava(uy, uw)}
}

// pava returns the pool-adjacent-violators fit of values v with weights w
// (one output per input), merging only on strict violation.
func pava(v, w []float64) []float64 {
	type block struct {
		val, wt float64
		cnt     int
	}
	st := make([]block, 0, len(v))
	for i := range v {
		st = append(st, block{v[i], w[i], 1})
		for len(st) > 1 && st[len(st)-2].val > st[len(st)-1].val {
			b2, b1 := st[len(st)-1], st[len(st)-2]
			nw := b1.wt + b2.wt
			st = st[:len(st)-2]
			st = append(st, block{(b1.val*b1.wt + b2.val*b2.wt) / nw, nw, b1.cnt + b2.cnt})
		}
	}
	out := make([]float64, 0, len(v))
	for _, b := range st {
		for range b.cnt {
			out = append(out, b.val)
		}
	}
	return out
}

// FitBinned is WMRL's binned isotonic fit (METHOD.md §2 Online Debiasing
// asks for an isotonic regression; the binning is library choice following
// WMRL's code):
// bins equal-width bins over [0, 1] with edges i·(1/bins), left-closed
// (x in [edge_i, edge_{i+1}) falls in bin i; x = 1 falls in the last bin);
// x below 0 or above 1 is clamped to 0 or 1, so it falls in an end bin
// and enters that bin's mean x as 0 or 1: one wild score cannot drag a
// knot far outside [0, 1] and flatten the map inside it. Each populated
// bin contributes
// the mean x and mean y of its pairs and its count; pool-adjacent-violators
// over the bin means, weighted by count, merges only on strict violation.
// The knots are the bins' mean x with their pooled values. Non-finite
// pairs are ignored. Fewer than 2 populated bins give the identity (see
// TryFitBinned to tell that apart). bins < 1 or mismatched lengths panic.
func FitBinned(x, y []float64, bins int) Isotonic {
	f, _ := TryFitBinned(x, y, bins)
	return f
}

// TryFitBinned is FitBinned that also reports whether a map was fitted
// (false: fewer than 2 populated bins, and f is the identity).
func TryFitBinned(x, y []float64, bins int) (f Isotonic, ok bool) {
	if len(x) != len(y) {
		panic("calibrate: FitBinned: len(x) != len(y)")
	}
	if bins < 1 {
		panic("calibrate: FitBinned: bins < 1")
	}
	sx := make([]float64, bins)
	sy := make([]float64, bins)
	cnt := make([]float64, bins)
	width := 1 / float64(bins)
	for i := range x {
		if !stat.Finite(x[i]) || !stat.Finite(y[i]) {
			continue
		}
		xi := math.Min(1, math.Max(0, x[i]))
		b := binOf(xi, bins, width)
		sx[b] += xi
		sy[b] += y[i]
		cnt[b]++
	}
	var cx, cy, cw []float64
	for b := range bins {
		if cnt[b] == 0 {
			continue
		}
		cx = append(cx, sx[b]/cnt[b])
		cy = append(cy, sy[b]/cnt[b])
		cw = append(cw, cnt[b])
	}
	if len(cx) < 2 {
		return Isotonic{}, false
	}
	return Isotonic{X: cx, Y: pava(cy, cw)}, true
}

// binOf returns the largest i in [0, bins) with x ≥ i·width, 0 for x < width.
func binOf(x float64, bins int, width float64) int {
	if !(x >= width) { // also x < 0
		return 0
	}
	if x >= 1 {
		return bins - 1
	}
	b := int(x * float64(bins))
	if b > bins-1 {
		b = bins - 1
	}
	// Correct the floor of x·bins against the exact edges i·width.
	for b > 0 && x < float64(b)*width {
		b--
	}
	for b < bins-1 && x >= float64(b+1)*width {
		b++
	}
	return b
}
