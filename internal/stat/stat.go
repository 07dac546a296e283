// Package stat holds the small descriptive statistics that the library's
// packages and example programs share: finiteness (and a finite number's
// address for JSON), mean and sample standard deviation, median,
// fractional ranks and the Pearson and Spearman correlations. Every function is pure and leaves its arguments unmodified.
package stat

import (
	"math"
	"slices"
	"sort"
)

// Finite reports whether x is a number other than ±Inf (not NaN, not
// infinite).
func Finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Mean returns the arithmetic mean of xs: NaN when xs is empty.
func Mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// MeanStd returns the mean of xs and its sample standard deviation
// sqrt(Σ(x − mean)² / (n − 1)). With fewer than two values std is 0; with
// none mean is NaN.
func MeanStd(xs []float64) (mean, std float64) {
	mean = Mean(xs)
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// Median returns the median of xs, the mean of the two middle values for an
// even count: NaN when xs is empty. xs is not modified. NaN values sort
// first (sort.Float64s), so a caller that means to ignore them filters them
// out first.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Ranks returns the 1-based ranks of xs in increasing order, tied values
// sharing the mean of the ranks they span (fractional ranking): Ranks of
// (5, 1, 5, 9) is (2.5, 1, 2.5, 4). −Inf ranks lowest and +Inf highest; xs
// must hold no NaN (its order is undefined).
func Ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	r := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && xs[idx[j+1]] == xs[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

// Pearson returns Pearson's correlation of a and b,
// Σ(a−ā)(b−b̄) / sqrt(Σ(a−ā)² Σ(b−b̄)²). ok is false, and r 0, when a side
// is constant (which covers fewer than two values). It panics if a and b
// differ in length (a programmer error).
func Pearson(a, b []float64) (r float64, ok bool) {
	if len(a) != len(b) {
		panic("stat: Pearson: a and b differ in length")
	}
	if len(a) == 0 {
		return 0, false
	}
	ma, mb := Mean(a), Mean(b)
	var sab, saa, sbb float64
	for i := range a {
		sab += (a[i] - ma) * (b[i] - mb)
		saa += (a[i] - ma) * (a[i] - ma)
		sbb += (b[i] - mb) * (b[i] - mb)
	}
	if saa == 0 || sbb == 0 {
		return 0, false
	}
	return sab / math.Sqrt(saa*sbb), true
}

// Spearman returns Spearman's rank correlation of a and b: Pearson's
// correlation of their Ranks, ties at their mean rank. ok is false, and rho
// 0, when a side is constant. Neither side may hold NaN (see Ranks). It
// panics if a and b differ in length (a programmer error).
func Spearman(a, b []float64) (rho float64, ok bool) {
	if len(a) != len(b) {
		panic("stat: Spearman: a and b differ in length")
	}
	return Pearson(Ranks(a), Ranks(b))
}

// OrNil returns x's address, or nil for a NaN or infinite x: a number that
// JSON can hold, an undefined one written as null.
func OrNil(x float64) *float64 {
	if !Finite(x) {
		return nil
	}
	return &x
}
