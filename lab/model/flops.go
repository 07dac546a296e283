package model

import "math"

// Compute accounting from shapes, for compute budgets. Only matrix
// multiplies are counted, 2·m·k·n each, as Result.FLOPs counts them;
// element-wise work (activations, norms, the optimiser) is not.
//
// One training step of a batch of B windows:
//
//	forward  = 2·B·Σ_l in_l·out_l  +  2·B·rows·W·V
//	step     = 3 · forward          (backward: the weight gradient and the input gradient of every layer)
//
// where in_l·out_l runs over the hidden layers (the first has in = Context·Embed),
// W is the width feeding the output layer (Hidden, or Context·Embed without
// hidden layers), V = Vocab, and rows is the number of predicted positions
// per window: 1 for Autoregressive and CentreMasked, and its expectation
// Context/2 for MaskedDiffusion (mask rate t ~ U(0,1], each position masked
// with probability t, so E[masked] = Context·E[t] = Context/2). The count is
// exact for the deterministic objectives and exact in expectation for masked
// diffusion.

// hiddenMACs returns Σ in·out over the hidden layers and the output layer's
// input width W.
func hiddenMACs(c Config) (macs float64, w int) {
	w = c.Context * c.Embed
	for l := 0; l < c.Layers; l++ {
		macs += float64(w) * float64(c.Hidden)
		w = c.Hidden
	}
	return macs, w
}

// trainRows is the (expected) number of output rows per training window.
func trainRows(c Config) float64 {
	if c.Objective == MaskedDiffusion {
		return float64(c.Context) / 2
	}
	return 1
}

// StepFLOPs returns the matrix-multiply FLOPs of one training step
// (forward and backward) of c; see the formula above.
func StepFLOPs(c Config) float64 {
	macs, w := hiddenMACs(c)
	fwd := 2 * float64(c.Batch) * (macs + trainRows(c)*float64(w)*float64(c.Vocab))
	return 3 * fwd
}

// TrainFLOPs returns StepFLOPs(c)·c.Steps, the training compute of c.
func TrainFLOPs(c Config) float64 { return StepFLOPs(c) * float64(c.Steps) }

// EvalFLOPs returns the matrix-multiply FLOPs of evaluating c on
// EvalWindows windows: one forward pass per window for Autoregressive and
// CentreMasked; for MaskedDiffusion Context rounds of the hidden layers and,
// in round r = 0…Context−1, Context−r output rows (the masked positions
// along the greedy unmasking order), Σ = Context·(Context+1)/2 rows.
func EvalFLOPs(c Config) float64 {
	macs, w := hiddenMACs(c)
	n := float64(c.EvalWindows)
	out := float64(w) * float64(c.Vocab)
	if c.Objective == MaskedDiffusion {
		C := float64(c.Context)
		return 2 * n * (C*macs + C*(C+1)/2*out)
	}
	return 2 * n * (macs + out)
}

// Params returns the number of trainable parameters of c: the embedding
// table (Vocab rows, plus the mask symbol for the masked objectives), each
// hidden layer's matrix and bias (and norm gain, and bias for layernorm),
// and the output layer's matrix and bias (one block per predicted position
// for MaskedDiffusion).
func Params(c Config) int {
	n := c.inputVocab() * c.Embed
	w := c.Context * c.Embed
	for l := 0; l < c.Layers; l++ {
		n += w*c.Hidden + c.Hidden
		switch c.Norm {
		case "layernorm":
			n += 2 * c.Hidden
		case "rmsnorm":
			n += c.Hidden
		}
		w = c.Hidden
	}
	P := c.outPositions()
	return n + P*w*c.Vocab + P*c.Vocab
}

// BudgetSteps returns how many optimiser steps of c a training budget of
// budget FLOPs pays for: ⌊budget / StepFLOPs(c)⌋, at least 1 and at most the
// largest Steps that Validate accepts. A relative tolerance of 1e-9 absorbs
// the rounding of a budget defined as steps·StepFLOPs.
func BudgetSteps(c Config, budget float64) int {
	per := StepFLOPs(c)
	if !(per > 0) || !(budget > 0) {
		return 1
	}
	s := math.Floor(budget / per * (1 + 1e-9))
	return int(min(max(s, 1), maxSteps))
}

// WithBudget returns c with Steps = BudgetSteps(c, budget), so that a wider
// or deeper model, a longer context or a larger batch trains fewer steps,
// and its warm-up rescaled by the same ratio (rounded, at most Steps), so
// that a warm-up keeps its fraction of the run.
func WithBudget(c Config, budget float64) Config {
	steps := BudgetSteps(c, budget)
	if steps == c.Steps {
		return c
	}
	if c.Steps > 0 {
		c.Warmup = min(steps, int(math.Round(float64(c.Warmup)*float64(steps)/float64(c.Steps))))
	}
	c.Steps = steps
	return c
}
