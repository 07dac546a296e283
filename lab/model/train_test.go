package model

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

// randomData is a text over vocab symbols with a learnable pattern: each
// symbol is usually the previous one plus one.
func randomData(vocab, n int, seed uint64) Data {
	rng := rand.New(rand.NewPCG(seed, 7))
	gen := func(n int) []byte {
		b := make([]byte, n)
		for i := 1; i < n; i++ {
			if rng.Float64() < 0.8 {
				b[i] = byte((int(b[i-1]) + 1) % vocab)
			} else {
				b[i] = byte(rng.IntN(vocab))
			}
		}
		return b
	}
	return Data{Train: gen(n), Val: gen(n / 4)}
}

func quickConfig(obj Objective) Config {
	c := DefaultConfig()
	c.Objective = obj
	c.Vocab, c.Hidden, c.Steps, c.EvalWindows = 16, 32, 60, 256
	return c
}

func TestDeterministic(t *testing.T) {
	// The same configuration and seed give the same loss bit for
	// bit; a different seed gives a different one.
	for _, obj := range []Objective{Autoregressive, CentreMasked, MaskedDiffusion} {
		t.Run(string(obj), func(t *testing.T) {
			cfg := quickConfig(obj)
			cfg.Dropout, cfg.Norm, cfg.Layers, cfg.Residual = 0.1, "layernorm", 2, true
			d := randomData(cfg.Vocab, 5000, 1)
			r1, err := Train(context.Background(), cfg, d, 42)
			require.NoError(t, err)
			r2, err := Train(context.Background(), cfg, d, 42)
			require.NoError(t, err)
			if diff := cmp.Diff(r1, r2); diff != "" {
				t.Fatalf("two runs differ (-first +second):\n%s", diff)
			}
			require.Equal(t, math.Float64bits(r1.Loss), math.Float64bits(r2.Loss))
			r3, err := Train(context.Background(), cfg, d, 43)
			require.NoError(t, err)
			require.NotEqual(t, r1.Loss, r3.Loss)
			require.False(t, r1.Diverged)
			require.Equal(t, cfg.Steps, r1.StepsRun)
			require.Len(t, r1.TrainLoss, cfg.Steps)
		})
	}
}

func TestLearns(t *testing.T) {
	// A run on a learnable text ends well below the uniform model's loss
	// (log2 V bits for AR, ln V nats for the masked objectives).
	for _, obj := range []Objective{Autoregressive, CentreMasked, MaskedDiffusion} {
		t.Run(string(obj), func(t *testing.T) {
			cfg := quickConfig(obj)
			cfg.Steps = 150
			cfg.LR = 1e-2
			r, err := Train(context.Background(), cfg, randomData(cfg.Vocab, 5000, 2), 1)
			require.NoError(t, err)
			uniform := math.Log(float64(cfg.Vocab))
			if obj == Autoregressive {
				uniform /= math.Ln2
			}
			require.Less(t, r.Loss, 0.75*uniform)
			require.Less(t, r.TrainLoss[len(r.TrainLoss)-1], r.TrainLoss[0])
		})
	}
}

func TestDivergedIsData(t *testing.T) {
	// A diverged run is an outcome (Diverged, Reason), not
	// an error.
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"sgd lr 10", func(c *Config) { c.Optimizer, c.LR, c.InitScale = "sgd", 10, 3 }},
		{"huge init", func(c *Config) { c.InitScale = 100 }},
		{"adam lr 50", func(c *Config) { c.LR = 50 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := quickConfig(Autoregressive)
			tt.edit(&cfg)
			r, err := Train(context.Background(), cfg, randomData(cfg.Vocab, 3000, 3), 1)
			require.NoError(t, err)
			require.True(t, r.Diverged, "loss %g", r.Loss)
			require.NotEmpty(t, r.Reason)
		})
	}
}

func TestBackendsAgree(t *testing.T) {
	// Every kernel backend gives the same loss to 4 decimals.
	// Run with GOEXPERIMENT=simd or -tags openblas to compare that backend
	// with the portable one.
	if kernel.Default() == "go" {
		t.Skip("this build has only the portable backend")
	}
	steps := 1000
	if testing.Short() {
		steps = 100
	}
	d := opticks(t)
	for _, obj := range []Objective{Autoregressive, CentreMasked, MaskedDiffusion} {
		t.Run(string(obj)+"/"+kernel.Default(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Objective, cfg.Steps = obj, steps
			if obj == MaskedDiffusion || testing.Short() {
				cfg.EvalWindows = 512
			}
			ref, err := train(context.Background(), cfg, d, 5, kernel.Generic())
			require.NoError(t, err)
			fast, err := train(context.Background(), cfg, d, 5, kernel.New())
			require.NoError(t, err)
			t.Logf("%s: go %.6f, %s %.6f", obj, ref.Loss, kernel.Default(), fast.Loss)
			require.InDelta(t, ref.Loss, fast.Loss, 5e-5)
			require.Equal(t, ref.FLOPs, fast.FLOPs)
		})
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := quickConfig(Autoregressive)
	r, err := Train(ctx, cfg, randomData(cfg.Vocab, 3000, 4), 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, r.StepsRun)
}

func TestInvalidData(t *testing.T) {
	cfg := quickConfig(Autoregressive)
	good := randomData(cfg.Vocab, 1000, 5)
	tests := []struct {
		name string
		d    Data
		want string
	}{
		{"short train", Data{Train: make([]byte, 8), Val: good.Val}, "model: invalid data: Train has 8 symbols, want at least 9"},
		{"short val", Data{Train: good.Train}, "model: invalid data: Val has 0 symbols, want at least 9"},
		{"symbol out of range", Data{Train: append([]byte{0, 16}, good.Train...), Val: good.Val},
			"model: invalid data: Train[1] = 16, want < Vocab = 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Train(context.Background(), cfg, tt.d, 1)
			require.ErrorIs(t, err, ErrInvalidData)
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"objective", func(c *Config) { c.Objective = "gpt" }, `Objective = "gpt", want "ar", "mdm" or "centre"`},
		{"vocab", func(c *Config) { c.Vocab = 1 }, "Vocab = 1, want 2..256"},
		{"centre context", func(c *Config) { c.Objective, c.Context = CentreMasked, 1 }, "Context = 1, want 2..64"},
		{"embed", func(c *Config) { c.Embed = 0 }, "Embed = 0, want 1..1024"},
		{"layers", func(c *Config) { c.Layers = 9 }, "Layers = 9, want 0..8"},
		{"activation", func(c *Config) { c.Activation = "swish" }, `Activation = "swish", want one of tanh, relu, gelu, silu`},
		{"norm", func(c *Config) { c.Norm = "" }, `Norm = "", want one of none, layernorm, rmsnorm`},
		{"init", func(c *Config) { c.InitScale = 0 }, "InitScale = 0, want in (0, 100]"},
		{"dropout", func(c *Config) { c.Dropout = 1 }, "Dropout = 1, want in [0, 1)"},
		{"lr NaN", func(c *Config) { c.LR = math.NaN() }, "LR = NaN, want in (0, 100]"},
		{"beta2", func(c *Config) { c.Beta2 = 1 }, "Beta2 = 1, want in [0, 1)"},
		{"warmup", func(c *Config) { c.Warmup = 1001 }, "Warmup = 1001, want 0..1000"},
		{"schedule", func(c *Config) { c.Schedule = "step" }, `Schedule = "step", want one of constant, cosine, linear, wsd`},
		{"two fields", func(c *Config) { c.Batch, c.EvalWindows = 0, 0 }, "Batch = 0, want 1..4096; EvalWindows = 0, want 1..1048576"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.EqualError(t, err, "model: invalid config: "+tt.want)
			_, terr := Train(context.Background(), c, Data{}, 1)
			require.True(t, errors.Is(terr, ErrInvalidConfig))
		})
	}
}

func TestLRSchedule(t *testing.T) {
	// Hand-derived: LR 1, 10 steps, MinLRFrac 0.1.
	base := Config{LR: 1, Steps: 10, MinLRFrac: 0.1, DecayFrac: 0.2}
	tests := []struct {
		name     string
		schedule string
		warmup   int
		step     int
		want     float64
	}{
		{"constant", "constant", 0, 7, 1},
		{"warm-up first step", "constant", 4, 0, 0.25},
		{"warm-up last step", "constant", 4, 3, 1},
		{"cosine start", "cosine", 0, 0, 1},
		{"cosine middle", "cosine", 0, 5, 0.1 + 0.9*0.5},
		{"cosine after warm-up", "cosine", 2, 6, 0.1 + 0.9*0.5}, // p = 4/8
		{"linear", "linear", 0, 5, 1 - 0.9*0.5},
		{"wsd stable", "wsd", 0, 7, 1},
		{"wsd decay start", "wsd", 0, 8, 1},
		{"wsd decay", "wsd", 0, 9, 1 - 0.9*0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.Schedule, c.Warmup = tt.schedule, tt.warmup
			require.InDelta(t, tt.want, lrAt(c, tt.step), 1e-12)
		})
	}
}

func TestOptimizerFirstStep(t *testing.T) {
	// One step from p = 1 with g = 0.5, lr 0.1 (hand-derived):
	// adam: m̂ = g, v̂ = g², step lr·g/|g| → 0.9; sgd: 1 − 0.05 = 0.95;
	// momentum: buffer = g → 0.95; lion: sign → 0.9; adamw with λ = 0.5:
	// (1 − 0.1·0.5)·1 − 0.1 = 0.85; adam with L2 λ = 0.5: g = 1 → 0.9;
	// sgd with L2 λ = 0.5: 1 − 0.1 = 0.9.
	tests := []struct {
		opt  string
		wd   float64
		want float64
	}{
		{"adam", 0, 0.9}, {"sgd", 0, 0.95}, {"momentum", 0, 0.95}, {"lion", 0, 0.9},
		{"adamw", 0.5, 0.85}, {"adam", 0.5, 0.9}, {"sgd", 0.5, 0.9}, {"lion", 0.5, 0.85},
	}
	for _, tt := range tests {
		t.Run(tt.opt, func(t *testing.T) {
			c := DefaultConfig()
			c.Optimizer, c.WeightDecay = tt.opt, tt.wd
			ts := []tensor{{off: 0, n: 1, decay: true}}
			o := newOptimizer(c, ts, 1, kernel.Generic())
			p, g := []float32{1}, []float32{0.5}
			o.step(p, g, 0.1)
			require.InDelta(t, tt.want, float64(p[0]), 1e-6)
		})
	}
}

func TestClipGrads(t *testing.T) {
	g := []float32{3, 4}
	require.InDelta(t, 5, clipGrads(g, 1), 1e-12)
	require.InDeltaSlice(t, []float32{0.6, 0.8}, g, 1e-6)
	require.Zero(t, clipGrads(g, 0))
}

func TestEvalStarts(t *testing.T) {
	cfg := DefaultConfig() // AR: windows need Context+1 = 9 symbols
	require.Equal(t, []int{0, 25, 50, 75}, evalStarts(cfg, 109, 4))
	// 20 symbols hold 12 windows (starts 0..11); 100 windows overlap.
	st := evalStarts(cfg, 20, 100)
	require.Len(t, st, 100)
	require.Equal(t, 0, st[0])
	require.Equal(t, 11, st[99])
}

func FuzzTrain(f *testing.F) {
	// Train must never panic on arbitrary folded data: either a result or
	// an ErrInvalidData error.
	f.Add([]byte("abcabcabcabcabcabc"), uint8(0))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, uint8(2))
	f.Add([]byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, obj uint8) {
		cfg := DefaultConfig()
		cfg.Objective = []Objective{Autoregressive, CentreMasked, MaskedDiffusion}[int(obj)%3]
		cfg.Vocab, cfg.Context, cfg.Embed, cfg.Hidden, cfg.Steps, cfg.EvalWindows, cfg.Batch = 128, 4, 2, 4, 2, 3, 2
		r, err := Train(context.Background(), cfg, Data{Train: b, Val: b}, 1)
		if err != nil {
			if !errors.Is(err, ErrInvalidData) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if r.StepsRun != 2 && !r.Diverged {
			t.Fatalf("StepsRun = %d", r.StepsRun)
		}
	})
}
