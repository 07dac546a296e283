package calibrate

import (
	"math/rand/v2"
	"testing"
)

func benchPairs(n int) (x, y []float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, y = make([]float64, n), make([]float64, n)
	for i := range x {
		r := rng.Float64()
		y[i] = r
		x[i] = min(1, max(0, 0.25+0.55*r+0.2*r*r+0.05*rng.NormFloat64()))
	}
	return x, y
}

// BenchmarkFitIsotonic fits 10⁵ pairs by weighted PAVA (METHOD.md §2).
func BenchmarkFitIsotonic(b *testing.B) {
	x, y := benchPairs(100_000)
	b.ReportAllocs()
	for b.Loop() {
		FitIsotonic(x, y, nil)
	}
}

// BenchmarkFitBinned fits 10⁵ pairs with WMRL's 10-bin variant.
func BenchmarkFitBinned(b *testing.B) {
	x, y := benchPairs(100_000)
	b.ReportAllocs()
	for b.Loop() {
		FitBinned(x, y, 10)
	}
}

// BenchmarkTopB selects 38 of 2048 candidates (one rollout's proposals).
func BenchmarkTopB(b *testing.B) {
	x, _ := benchPairs(2048)
	b.ReportAllocs()
	for b.Loop() {
		TopB(x, 38)
	}
}
