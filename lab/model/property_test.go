package model

import (
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

func TestSoftmaxNLLProperty(t *testing.T) {
	// softmaxNLL leaves a probability vector (sums to 1, entries in [0,1])
	// and returns −log p_t of it, computed from the logits.
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 300).Draw(t, "n")
		z := make([]float32, n)
		for i := range z {
			z[i] = float32(rapid.Float64Range(-30, 30).Draw(t, "z"))
		}
		tgt := rapid.IntRange(0, n-1).Draw(t, "t")
		for _, k := range []*kernel.Kernel{kernel.Generic(), kernel.New()} {
			zz := append([]float32(nil), z...)
			nll := softmaxNLL(k, zz, tgt)
			var sum float64
			for _, p := range zz {
				if p < 0 || p > 1 {
					t.Fatalf("probability %g outside [0,1]", p)
				}
				sum += float64(p)
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("probabilities sum to %g", sum)
			}
			if nll < -1e-6 {
				t.Fatalf("negative NLL %g", nll)
			}
			if zz[tgt] > 1e-30 && math.Abs(nll+math.Log(float64(zz[tgt]))) > 1e-4*(1+nll) {
				t.Fatalf("NLL %g but −log p_t = %g", nll, -math.Log(float64(zz[tgt])))
			}
		}
	})
}

func TestLRScheduleProperty(t *testing.T) {
	// Every schedule stays within (0, LR] and, after warm-up, never goes
	// below MinLRFrac·LR.
	rapid.Check(t, func(t *rapid.T) {
		c := DefaultConfig()
		c.Schedule = rapid.SampledFrom(schedules).Draw(t, "schedule")
		c.Steps = rapid.IntRange(1, 500).Draw(t, "steps")
		c.Warmup = rapid.IntRange(0, c.Steps).Draw(t, "warmup")
		c.MinLRFrac = rapid.Float64Range(0, 1).Draw(t, "min")
		c.DecayFrac = rapid.Float64Range(0, 1).Draw(t, "decay")
		for s := 0; s < c.Steps; s++ {
			lr := lrAt(c, s)
			if !(lr >= 0 && lr <= c.LR*(1+1e-12)) {
				t.Fatalf("step %d: lr %g outside [0, %g]", s, lr, c.LR)
			}
			if s >= c.Warmup && lr < c.MinLRFrac*c.LR*(1-1e-12) {
				t.Fatalf("step %d: lr %g below the floor %g", s, lr, c.MinLRFrac*c.LR)
			}
		}
	})
}
