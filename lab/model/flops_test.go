package model

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStepFLOPsHandCount checks the compute-budget formula against counts
// done by hand from the shapes.
func TestStepFLOPsHandCount(t *testing.T) {
	base := DefaultConfig() // AR, V 96, context 8, embed 16, one layer of 128, batch 64
	linear := base
	linear.Layers, linear.Context, linear.Embed, linear.Batch = 0, 4, 8, 10
	mdm := base
	mdm.Objective, mdm.Hidden, mdm.Layers, mdm.Batch = MaskedDiffusion, 64, 2, 32
	centre := base
	centre.Objective = CentreMasked
	for _, tc := range []struct {
		name   string
		cfg    Config
		step   float64
		eval   float64
		params int
	}{
		// 3·2·64·(128·128 + 128·96) = 3·2·64·28672; eval 2·4096·28672;
		// params 96·16 + (128·128+128) + (128·96+96).
		{"default AR", base, 11_010_048, 234_881_024, 30_432},
		// no hidden layer: W = 4·8 = 32; 3·2·10·32·96; eval 2·4096·3072;
		// params 96·8 + 32·96 + 96.
		{"linear AR", linear, 184_320, 25_165_824, 3_936},
		// Σ in·out = 128·64 + 64·64 = 12288, rows 8/2 = 4, out 64·96 = 6144:
		// 3·2·32·(12288 + 4·6144); eval 2·4096·(8·12288 + 36·6144);
		// params 97·16 + (128·64+64) + (64·64+64) + 8·(64·96+96).
		{"masked diffusion", mdm, 7_077_888, 2_617_245_696, 1552 + 8256 + 4160 + 49920},
		// as AR with the mask symbol in the embedding.
		{"centre masked", centre, 11_010_048, 234_881_024, 30_432 + 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.step, StepFLOPs(tc.cfg))
			require.Equal(t, tc.eval, EvalFLOPs(tc.cfg))
			require.Equal(t, tc.params, Params(tc.cfg))
			require.Equal(t, tc.step*float64(tc.cfg.Steps), TrainFLOPs(tc.cfg))
		})
	}
}

// TestFLOPsMatchCounter: the formula equals the model's own matrix-multiply
// counter (Result.FLOPs = training + evaluation) exactly for the
// deterministic objectives and within 3% for masked diffusion, whose
// training rows are random with expectation Context/2.
func TestFLOPsMatchCounter(t *testing.T) {
	d := randomData(16, 4000, 1)
	for _, obj := range []Objective{Autoregressive, CentreMasked, MaskedDiffusion} {
		for _, layers := range []int{0, 2} {
			c := quickConfig(obj)
			c.Layers, c.Norm, c.Residual = layers, "layernorm", true
			c.Steps = 200
			r, err := Train(context.Background(), c, d, 3)
			require.NoError(t, err)
			want := TrainFLOPs(c) + EvalFLOPs(c)
			if obj == MaskedDiffusion {
				require.InEpsilon(t, want, r.FLOPs, 0.03, "%s layers %d", obj, layers)
				continue
			}
			require.Equal(t, want, r.FLOPs, "%s layers %d", obj, layers)
		}
	}
}

// Params equals the length of the model's parameter vector.
func TestParamsMatchesNet(t *testing.T) {
	for _, obj := range []Objective{Autoregressive, CentreMasked, MaskedDiffusion} {
		for _, norm := range []string{"none", "layernorm", "rmsnorm"} {
			c := quickConfig(obj)
			c.Norm, c.Layers = norm, 2
			m := newNet(c, nil, 4, rand.New(rand.NewPCG(1, 1)))
			require.Equal(t, len(m.params), Params(c), "%s %s", obj, norm)
		}
	}
}

func TestBudgetSteps(t *testing.T) {
	c := DefaultConfig()
	per := StepFLOPs(c) // 11_010_048
	for _, tc := range []struct {
		budget float64
		want   int
	}{
		{300 * per, 300}, // exact multiples survive float rounding
		{300*per - per/2, 299},
		{300 * per * (1 - 1e-12), 300}, // within the tolerance
		{1, 1},                         // at least one step
		{0, 1},                         // no budget
		{1e30, maxSteps},
	} {
		require.Equal(t, tc.want, BudgetSteps(c, tc.budget), "budget %g", tc.budget)
	}
	// Doubling the batch or the hidden width halves/changes the steps.
	wide := c
	wide.Batch = 128
	require.Equal(t, 150, BudgetSteps(wide, 300*per))
	// WithBudget keeps the warm-up fraction.
	c.Steps, c.Warmup = 300, 30
	w := WithBudget(wide, 300*per)
	require.Equal(t, 150, w.Steps)
	wide.Steps, wide.Warmup = 300, 30
	w = WithBudget(wide, 300*per)
	require.Equal(t, 150, w.Steps)
	require.Equal(t, 15, w.Warmup)
	// A configuration already at its budget is unchanged.
	require.Equal(t, c, WithBudget(c, 300*per))
}
