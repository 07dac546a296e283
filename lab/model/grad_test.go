package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

// smallConfig is a model small enough for finite differences.
func smallConfig(obj Objective) Config {
	c := DefaultConfig()
	c.Objective = obj
	c.Vocab, c.Context, c.Embed, c.Hidden, c.Layers = 7, 4, 3, 6, 1
	c.Batch, c.Steps, c.EvalWindows = 5, 5, 8
	return c
}

// objective is the label-smoothed cross-entropy the backward pass
// differentiates: mean over included rows of −Σ_i q_i·log p_i with
// q = (1−ε)·onehot + ε/V, computed in float64 from the forward pass.
func objective(m *net, B int, target []int32, eps float64, seed uint64) float64 {
	var drop *rand.Rand
	if m.cfg.Dropout > 0 {
		drop = rand.New(rand.NewPCG(seed, 9))
	}
	m.forward(B, drop)
	V := m.cfg.Vocab
	var sum float64
	n := 0
	for r := 0; r < m.nrows; r++ {
		z := m.logits[r*V : (r+1)*V]
		tr := int(m.rowB[r])*m.P + int(m.rowP[r])
		mx := math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, float64(v))
		}
		var se float64
		for _, v := range z {
			se += math.Exp(float64(v) - mx)
		}
		lse := mx + math.Log(se)
		for i, v := range z {
			q := eps / float64(V)
			if i == int(target[tr]) {
				q += 1 - eps
			}
			sum -= q * (float64(v) - lse)
		}
		n++
	}
	return sum / float64(n)
}

func TestGradientsMatchFiniteDifferences(t *testing.T) {
	// Every activation, norm, residual, dropout, label smoothing and each
	// objective has a finite-difference gradient test.
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"ar tanh", func(c *Config) {}},
		{"ar relu", func(c *Config) { c.Activation = "relu" }},
		{"ar gelu", func(c *Config) { c.Activation = "gelu" }},
		{"ar silu", func(c *Config) { c.Activation = "silu" }},
		{"layernorm", func(c *Config) { c.Norm = "layernorm" }},
		{"rmsnorm", func(c *Config) { c.Norm = "rmsnorm" }},
		{"residual depth 3", func(c *Config) { c.Layers, c.Residual = 3, true }},
		{"residual layernorm gelu", func(c *Config) { c.Layers, c.Residual, c.Norm, c.Activation = 2, true, "layernorm", "gelu" }},
		{"no hidden layer", func(c *Config) { c.Layers = 0 }},
		{"label smoothing", func(c *Config) { c.LabelSmoothing = 0.2 }},
		{"dropout", func(c *Config) { c.Dropout = 0.3; c.Layers = 2 }},
		{"init scale", func(c *Config) { c.InitScale = 2 }},
		{"centre masked", func(c *Config) { c.Objective = CentreMasked }},
		{"masked diffusion", func(c *Config) { c.Objective = MaskedDiffusion }},
		{"masked diffusion rmsnorm smoothing", func(c *Config) {
			c.Objective, c.Norm, c.LabelSmoothing, c.Layers, c.Residual = MaskedDiffusion, "rmsnorm", 0.1, 2, true
		}},
	}
	for ti, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := smallConfig(Autoregressive)
			tt.edit(&cfg)
			require.NoError(t, cfg.Validate())
			rng := rand.New(rand.NewPCG(uint64(ti), 3))
			text := make([]byte, 200)
			for i := range text {
				text[i] = byte(rng.IntN(cfg.Vocab))
			}
			m := newNet(cfg, kernel.Generic(), cfg.Batch, rand.New(rand.NewPCG(uint64(ti), 1)))
			B := cfg.Batch
			P := cfg.outPositions()
			target := make([]int32, B*P)
			include := make([]bool, B*P)
			fillBatch(cfg, text, m.sym, target, include, B, rand.New(rand.NewPCG(5, 5)), rand.New(rand.NewPCG(6, 6)))
			var drop *rand.Rand
			if cfg.Dropout > 0 {
				drop = rand.New(rand.NewPCG(11, 9))
			}
			m.setRows(B, include)
			m.forward(B, drop)
			_, ok := m.loss(target, cfg.LabelSmoothing)
			require.True(t, ok)
			clear(m.grads)
			m.backward(B)
			an := append([]float32(nil), m.grads...)

			const h = 1e-2
			checked, bad := 0, 0
			for pi := range m.params {
				if pi%3 != ti%3 && len(m.params) > 300 { // a deterministic subset
					continue
				}
				old := m.params[pi]
				m.params[pi] = old + h
				up := float64(m.params[pi]) - float64(old)
				fp := objective(m, B, target, cfg.LabelSmoothing, 11)
				m.params[pi] = old - h
				dn := float64(old) - float64(m.params[pi])
				fm := objective(m, B, target, cfg.LabelSmoothing, 11)
				m.params[pi] = old
				fd := (fp - fm) / (up + dn)
				g := float64(an[pi])
				checked++
				if math.Abs(fd-g) > 2e-3+3e-2*math.Abs(g) {
					bad++
					if cfg.Activation != "relu" || bad > 2 {
						t.Errorf("param %d: analytic %.6g, finite difference %.6g", pi, g, fd)
					}
				}
			}
			require.Greater(t, checked, 50, fmt.Sprint("params ", len(m.params)))
		})
	}
}
