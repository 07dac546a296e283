package model

import (
	"math"
	"testing"
	"testing/quick"
)

func TestTanh32(t *testing.T) {
	// The rational approximation stays within 3e-7 of math.Tanh, is odd and
	// bounded by 1.
	f := func(x float32) bool {
		x = float32(math.Mod(float64(x), 20))
		got := float64(tanh32(x))
		return math.Abs(got-math.Tanh(float64(x))) <= 3e-7 && tanh32(-x) == -tanh32(x) && math.Abs(got) <= 1
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Error(err)
	}
	for x := float32(-10); x <= 10; x += 1.0 / 64 {
		if d := math.Abs(float64(tanh32(x)) - math.Tanh(float64(x))); d > 3e-7 {
			t.Fatalf("tanh32(%g) off by %g", x, d)
		}
	}
	if !math.IsNaN(float64(tanh32(float32(math.NaN())))) {
		t.Error("tanh32(NaN) is not NaN")
	}
}

func TestExp32(t *testing.T) {
	// exp32 is within 2 float32 ulps (relative 2.4e-7) of math.Exp on the
	// range softmax uses, and 0 below the float32 underflow.
	for x := float32(-87); x <= 0; x += 1.0 / 128 {
		want := math.Exp(float64(x))
		if d := math.Abs(float64(exp32(x))-want) / want; d > 2.4e-7 {
			t.Fatalf("exp32(%g) relative error %g", x, d)
		}
	}
	if exp32(-200) != 0 || exp32(float32(math.Inf(-1))) != 0 {
		t.Error("exp32 does not underflow to 0")
	}
}
