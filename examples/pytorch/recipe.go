package main

import (
	"errors"
	"fmt"
	"math"
)

// Recipe is a training recipe of train.py's tiny character-level GPT: the
// "recipe" object of the job spec, field for field (train.py's RECIPE
// table holds the same names and bounds and checks them again).
type Recipe struct {
	Width         int     `json:"width"`          // model width d
	Depth         int     `json:"depth"`          // transformer blocks
	Heads         int     `json:"heads"`          // attention heads; divides Width
	MLPRatio      float64 `json:"mlp_ratio"`      // MLP hidden size / Width
	Context       int     `json:"context"`        // window length in bytes
	Batch         int     `json:"batch"`          // windows per step
	Steps         int     `json:"steps"`          // optimiser steps
	LR            float64 `json:"lr"`             // peak learning rate
	MinLRFrac     float64 `json:"min_lr_frac"`    // final / peak rate of a decaying schedule
	Warmup        int     `json:"warmup"`         // linear warm-up steps (≤ Steps)
	Schedule      string  `json:"schedule"`       // cosine | linear | constant
	Optimizer     string  `json:"optimizer"`      // adamw | sgd
	Beta1         float64 `json:"beta1"`          // AdamW β1; SGD momentum
	Beta2         float64 `json:"beta2"`          // AdamW β2
	WeightDecay   float64 `json:"weight_decay"`   // on matrices only
	GradClip      float64 `json:"grad_clip"`      // global norm; 0 = off
	Dropout       float64 `json:"dropout"`        // on attention, residual and embedding outputs
	Activation    string  `json:"activation"`     // gelu | relu | silu
	TieEmbeddings bool    `json:"tie_embeddings"` // output layer shares the byte embedding
	InitStd       float64 `json:"init_std"`       // std of the weights' normal initialisation
}

// ErrRecipe is wrapped by Recipe.Validate.
var ErrRecipe = errors.New("pytorch: invalid recipe")

// BaseRecipe is the reference recipe the example's tasks start from: a
// 2-block, 32-wide GPT trained for 160 steps of 16 windows of 32 bytes,
// about 2 CPU seconds (library choice: small enough for CI, long enough to
// leave the unigram plateau: about 3.5 bits per byte on the Opticks, σ_e
// about 0.05).
func BaseRecipe() Recipe {
	return Recipe{Width: 32, Depth: 2, Heads: 2, MLPRatio: 4, Context: 32, Batch: 16, Steps: 160,
		LR: 1e-2, MinLRFrac: 0.1, Warmup: 10, Schedule: "cosine", Optimizer: "adamw", Beta1: 0.9, Beta2: 0.99,
		WeightDecay: 0.1, GradClip: 1, Dropout: 0, Activation: "gelu", TieEmbeddings: true, InitStd: 0.1}
}

type bound struct {
	name   string
	v      float64
	lo, hi float64
}

// Validate reports the first field out of train.py's bounds, wrapping
// ErrRecipe. A proposal whose recipe does not validate is infeasible.
func (r Recipe) Validate() error {
	for _, b := range []bound{
		{"width", float64(r.Width), 8, 4096}, {"depth", float64(r.Depth), 1, 64},
		{"heads", float64(r.Heads), 1, 64}, {"mlp_ratio", r.MLPRatio, 0.25, 16},
		{"context", float64(r.Context), 4, 8192}, {"batch", float64(r.Batch), 1, 65536},
		{"steps", float64(r.Steps), 1, 1e7}, {"lr", r.LR, 1e-7, 100}, {"min_lr_frac", r.MinLRFrac, 0, 1},
		{"warmup", float64(r.Warmup), 0, 1e7}, {"beta1", r.Beta1, 0, 0.9999}, {"beta2", r.Beta2, 0, 0.99999},
		{"weight_decay", r.WeightDecay, 0, 10}, {"grad_clip", r.GradClip, 0, 1e6}, {"dropout", r.Dropout, 0, 0.9},
		{"init_std", r.InitStd, 1e-4, 1},
	} {
		if math.IsNaN(b.v) || b.v < b.lo || b.v > b.hi {
			return fmt.Errorf("%w: %s = %g out of range [%g, %g]", ErrRecipe, b.name, b.v, b.lo, b.hi)
		}
	}
	switch {
	case r.Width%r.Heads != 0:
		return fmt.Errorf("%w: width %d is not a multiple of heads %d", ErrRecipe, r.Width, r.Heads)
	case r.Warmup > r.Steps:
		return fmt.Errorf("%w: warmup %d exceeds steps %d", ErrRecipe, r.Warmup, r.Steps)
	case !oneOf(r.Schedule, "cosine", "linear", "constant"):
		return fmt.Errorf("%w: schedule %q", ErrRecipe, r.Schedule)
	case !oneOf(r.Optimizer, "adamw", "sgd"):
		return fmt.Errorf("%w: optimizer %q", ErrRecipe, r.Optimizer)
	case !oneOf(r.Activation, "gelu", "relu", "silu"):
		return fmt.Errorf("%w: activation %q", ErrRecipe, r.Activation)
	}
	return nil
}

func oneOf(s string, choices ...string) bool {
	for _, c := range choices {
		if s == c {
			return true
		}
	}
	return false
}

// Spec is the Job.Spec of a run of train.py (see its docstring).
type Spec struct {
	Corpus string `json:"corpus"` // absolute path of the text file
	// Heldout is the absolute path of the validation text when it is kept
	// apart from Corpus (then all training text): hidden from the
	// training run and read by evaluate.py, the trusted evaluator
	// (overlay.EvalConfig). Empty: Corpus holds both, split by blocks.
	Heldout   string  `json:"heldout,omitempty"`
	Block     int     `json:"block"`      // split block in bytes
	ValEvery  int     `json:"val_every"`  // every ValEvery-th block is validation
	EvalBytes int     `json:"eval_bytes"` // validation bytes scored
	Recipe    Recipe  `json:"recipe"`
	Reference *Recipe `json:"reference,omitempty"`
	// ReferenceLosses are the reference recipe's losses by seed (decimal
	// string keys), so that the script trains the reference itself only
	// for a seed it does not know.
	ReferenceLosses map[string]float64 `json:"reference_losses,omitempty"`
	Device          string             `json:"device"`  // auto | cpu | cuda
	Threads         int                `json:"threads"` // CPU threads
}
