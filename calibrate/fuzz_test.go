package calibrate

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// decodeTriples turns bytes into (x, y, w) triples of bounded magnitude,
// with NaN and ±Inf sprinkled in, for the isotonic fitters.
func decodeTriples(b []byte) (x, y, w []float64) {
	val := func(u uint16) float64 {
		switch u {
		case 0xFFFF:
			return math.NaN()
		case 0xFFFE:
			return math.Inf(1)
		case 0xFFFD:
			return math.Inf(-1)
		}
		return float64(int16(u)) / 4096 // about [−8, 8]
	}
	for len(b) >= 6 {
		x = append(x, val(binary.LittleEndian.Uint16(b)))
		y = append(y, val(binary.LittleEndian.Uint16(b[2:])))
		w = append(w, math.Abs(val(binary.LittleEndian.Uint16(b[4:]))))
		b = b[6:]
	}
	return x, y, w
}

func FuzzIsotonicFits(f *testing.F) {
	f.Add([]byte{0, 0, 0, 16, 0, 16, 0, 16, 0, 0, 0, 16})
	f.Add([]byte{0xFF, 0xFF, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xFE, 0xFF, 0, 0, 0, 1})
	f.Add([]byte("a longer seed of bytes for several pairs of scores"))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, y, w := decodeTriples(b)
		for _, fit := range []Isotonic{FitIsotonic(x, y, w), FitIsotonic(x, y, nil), FitBinned(x, y, 10), FitBinned(x, y, 3)} {
			if len(fit.X) != len(fit.Y) {
				t.Fatalf("knots of unequal length: %v", fit)
			}
			for i := range fit.X {
				if !stat.Finite(fit.X[i]) || !stat.Finite(fit.Y[i]) {
					t.Fatalf("non-finite knot: %v", fit)
				}
				if i > 0 && (fit.X[i-1] >= fit.X[i] || fit.Y[i-1] > fit.Y[i]) {
					t.Fatalf("knots not increasing: %v", fit)
				}
			}
			prev := math.Inf(-1)
			for p := -10.0; p <= 10; p += 0.37 {
				v := fit.Apply(p)
				if v < prev {
					t.Fatalf("Apply not monotone at %g: %g < %g (%v)", p, v, prev, fit)
				}
				prev = v
			}
		}
	})
}
