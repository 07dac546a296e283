package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
	"testing/quick"

	"github.com/stretchr/testify/require"
)

func TestTanh32(t *testing.T) {
	// The rational approximation stays within 3e-7 of math.Tanh, is odd and
	// bounded by 1.
	f := func(x float32) bool {
		x = float32(math.Mod(float64(x), 20))
		got := float64(Tanh32(x))
		return math.Abs(got-math.Tanh(float64(x))) <= 3e-7 && Tanh32(-x) == -Tanh32(x) && math.Abs(got) <= 1
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
	for x := float32(-10); x <= 10; x += 1.0 / 64 {
		if d := math.Abs(float64(Tanh32(x)) - math.Tanh(float64(x))); d > 3e-7 {
			t.Fatalf("Tanh32(%g) off by %g", x, d)
		}
	}
	require.True(t, math.IsNaN(float64(Tanh32(float32(math.NaN())))))
}

func TestExp32(t *testing.T) {
	// Exp32 is within 2 float32 ulps (relative 2.4e-7) of math.Exp on the
	// range softmax uses, and 0 below the float32 underflow.
	for x := float32(-87); x <= 0; x += 1.0 / 128 {
		want := math.Exp(float64(x))
		if d := math.Abs(float64(Exp32(x))-want) / want; d > 2.4e-7 {
			t.Fatalf("Exp32(%g) relative error %g", x, d)
		}
	}
	require.Zero(t, Exp32(-200))
	require.Zero(t, Exp32(float32(math.Inf(-1))))
	require.True(t, math.IsNaN(float64(Exp32(float32(math.NaN())))))
}

func TestElementwiseBackendsAgree(t *testing.T) {
	// The fast backend's element-wise kernels equal the scalar ones bit for
	// bit (ExpShift's sum to float32 rounding), including NaN, tails and
	// the special ranges.
	for _, f := range allKernels(t) {
		t.Run(f.Name(), func(t *testing.T) { elementwiseAgree(t, f) })
	}
}

func elementwiseAgree(t *testing.T, f *Kernel) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 15, 16, 17, 100, 1000} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 4)
		}
		if n > 5 {
			src[0], src[1], src[2], src[3] = float32(math.NaN()), 1e-5, -20, -100
		}
		g := Generic()
		want, got := make([]float32, n), make([]float32, n)
		g.Tanh(want, src)
		f.Tanh(got, src)
		requireBitEqual(t, want, got)

		x1, x2 := append([]float32(nil), src...), append([]float32(nil), src...)
		g.AddTo(x1, want)
		f.AddTo(x2, want)
		requireBitEqual(t, x1, x2)

		d1, d2 := append([]float32(nil), src...), append([]float32(nil), src...)
		g.TanhBackward(d1, want)
		f.TanhBackward(d2, want)
		requireBitEqual(t, d1, d2)

		z1, z2 := append([]float32(nil), src...), append([]float32(nil), src...)
		if n > 5 {
			z1[0], z2[0] = 0, 0 // keep the sums finite
		}
		s1, s2 := g.ExpShift(z1, 12), f.ExpShift(z2, 12)
		requireBitEqual(t, z1, z2)
		require.InDelta(t, s1, s2, 1e-6*math.Abs(s1))

		p1, p2 := append([]float32(nil), src...), append([]float32(nil), src...)
		m1, v1 := make([]float32, n), make([]float32, n)
		m2, v2 := make([]float32, n), make([]float32, n)
		for range 3 {
			g.Adam(p1, d1, m1, v1, 1e-2, 1.5, 0.9, 0.999, 1e-8)
			f.Adam(p2, d1, m2, v2, 1e-2, 1.5, 0.9, 0.999, 1e-8)
		}
		requireBitEqual(t, p1, p2)
		requireBitEqual(t, v1, v2)
	}
}

func requireBitEqual(t *testing.T, want, got []float32) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) && !(math.IsNaN(float64(want[i])) && math.IsNaN(float64(got[i]))) {
			t.Fatalf("element %d: want %v, got %v", i, want[i], got[i])
		}
	}
}
