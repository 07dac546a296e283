package model

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrInvalidConfig: a Config field is out of range; the message names
	// every offending field. The lab maps it to an infeasible proposal.
	ErrInvalidConfig = errors.New("model: invalid config")
	// ErrTooLarge: the configuration is in range field by field but exceeds
	// MaxStepFLOPs, MaxRunFLOPs or MaxParams; it comes wrapped together
	// with ErrInvalidConfig (the lab reports it as infeasible).
	ErrTooLarge = errors.New("model: configuration too large")
	// ErrInvalidData: the data cannot train or evaluate the configuration
	// (too short, or a symbol ≥ Vocab).
	ErrInvalidData = errors.New("model: invalid data")
)

// Valid values of the string-typed Config fields.
var (
	activations = []string{"tanh", "relu", "gelu", "silu"}
	norms       = []string{"none", "layernorm", "rmsnorm"}
	optimizers  = []string{"adam", "adamw", "sgd", "momentum", "lion"}
	schedules   = []string{"constant", "cosine", "linear", "wsd"}
)

// DefaultConfig returns the lab's measured baseline: an autoregressive
// byte-level MLP LM over 96 folded symbols, context 8, embedding 16, one tanh
// layer of 128, Adam at a constant 2e-3 (β1 0.9, β2 0.999, ε 1e-8), batch
// 64, 1000 steps, float32, evaluated on 4096 validation windows. It reached
// 3.133 bits per byte (seed σ 0.018) on the Opticks text.
func DefaultConfig() Config {
	return Config{
		Objective:   Autoregressive,
		Vocab:       96,
		Context:     8,
		Embed:       16,
		Hidden:      128,
		Layers:      1,
		Activation:  "tanh",
		Norm:        "none",
		InitScale:   1,
		Optimizer:   "adam",
		LR:          2e-3,
		Beta1:       0.9,
		Beta2:       0.999,
		AdamEps:     1e-8,
		Schedule:    "constant",
		MinLRFrac:   0,
		DecayFrac:   0.2,
		Steps:       1000,
		Batch:       64,
		EvalWindows: 4096,
	}
}

// Limits of Validate. They bound the cost of one run and keep the numerics
// meaningful; they are library choices, not METHOD.md values.
const (
	maxVocab   = 256 // byte-level
	maxContext = 64
	maxWidth   = 1024
	maxLayers  = 8
	maxSteps   = 1_000_000
	maxBatch   = 4096
	maxEval    = 1 << 20
)

// Validate reports every out-of-range field in one error wrapping
// ErrInvalidConfig, e.g. "model: invalid config: Embed = 0, want 1..1024".
func (c Config) Validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	intIn := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			add("%s = %d, want %d..%d", name, v, lo, hi)
		}
	}
	oneOf := func(name, v string, valid []string) {
		for _, s := range valid {
			if v == s {
				return
			}
		}
		add("%s = %q, want one of %s", name, v, strings.Join(valid, ", "))
	}
	// real checks lo ≤ v < hi (or ≤ hi when closed), rejecting NaN.
	real := func(name string, v, lo, hi float64, loOpen, hiClosed bool) {
		okLo := v >= lo
		if loOpen {
			okLo = v > lo
		}
		okHi := v < hi
		if hiClosed {
			okHi = v <= hi
		}
		if !okLo || !okHi || math.IsNaN(v) {
			l, r := "[", ")"
			if loOpen {
				l = "("
			}
			if hiClosed {
				r = "]"
			}
			add("%s = %g, want in %s%g, %g%s", name, v, l, lo, hi, r)
		}
	}
	switch c.Objective {
	case Autoregressive, MaskedDiffusion, CentreMasked:
	default:
		add("Objective = %q, want %q, %q or %q", c.Objective, Autoregressive, MaskedDiffusion, CentreMasked)
	}
	intIn("Vocab", c.Vocab, 2, maxVocab)
	minCtx := 1
	if c.Objective == CentreMasked {
		minCtx = 2 // the centre needs at least one visible neighbour
	}
	intIn("Context", c.Context, minCtx, maxContext)
	intIn("Embed", c.Embed, 1, maxWidth)
	intIn("Hidden", c.Hidden, 1, maxWidth)
	intIn("Layers", c.Layers, 0, maxLayers)
	oneOf("Activation", c.Activation, activations)
	oneOf("Norm", c.Norm, norms)
	real("InitScale", c.InitScale, 0, 100, true, true)
	real("Dropout", c.Dropout, 0, 1, false, false)
	real("LabelSmoothing", c.LabelSmoothing, 0, 1, false, false)
	oneOf("Optimizer", c.Optimizer, optimizers)
	real("LR", c.LR, 0, 100, true, true)
	real("Beta1", c.Beta1, 0, 1, false, false)
	real("Beta2", c.Beta2, 0, 1, false, false)
	real("AdamEps", c.AdamEps, 0, 1, true, true)
	real("WeightDecay", c.WeightDecay, 0, 10, false, true)
	real("ClipNorm", c.ClipNorm, 0, 1e6, false, true)
	oneOf("Schedule", c.Schedule, schedules)
	intIn("Steps", c.Steps, 1, maxSteps)
	intIn("Warmup", c.Warmup, 0, max(c.Steps, 0))
	real("MinLRFrac", c.MinLRFrac, 0, 1, false, true)
	real("DecayFrac", c.DecayFrac, 0, 1, false, true)
	intIn("Batch", c.Batch, 1, maxBatch)
	intIn("EvalWindows", c.EvalWindows, 1, maxEval)
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(bad, "; "))
	}
	// Size caps: every field is in range, so the counts are defined.
	if f := StepFLOPs(c); f > MaxStepFLOPs {
		add("one step costs %.3g FLOPs, want ≤ MaxStepFLOPs = %.3g", f, MaxStepFLOPs)
	}
	if f := TrainFLOPs(c) + EvalFLOPs(c); f > MaxRunFLOPs {
		add("the run costs %.3g FLOPs, want ≤ MaxRunFLOPs = %.3g", f, MaxRunFLOPs)
	}
	if n := Params(c); n > MaxParams {
		add("%d parameters, want ≤ MaxParams = %d", n, MaxParams)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %w: %s", ErrInvalidConfig, ErrTooLarge, strings.Join(bad, "; "))
	}
	return nil
}

// Size caps that Validate enforces on top of the per-field ranges, so that a
// hand-made configuration at every field's upper limit cannot run for hours
// or exhaust memory (library choice: each is far above any recipe of the
// lab — its runs cost at most a few GFLOPs in steps of at most about 0.5
// GFLOP and have well under a million parameters — and a run at the caps
// takes minutes, not hours, on one core at the pure-Go kernel's ~20
// GFLOP/s).
const (
	// MaxStepFLOPs bounds one training step's matrix-multiply FLOPs
	// (StepFLOPs): about half a second at 20 GFLOP/s, which also bounds
	// the step's activations (Batch × widths).
	MaxStepFLOPs = 1e10
	// MaxRunFLOPs bounds a whole run: TrainFLOPs + EvalFLOPs.
	MaxRunFLOPs = 2e12
	// MaxParams bounds the trainable parameters (Params); with Adam's two
	// moments and the gradient, 4 float32 copies of 16 Mi parameters are
	// 256 MiB.
	MaxParams = 1 << 24
)

// inputVocab is the embedding table's row count: Vocab plus the mask symbol
// (index Vocab) for the masked objectives.
func (c Config) inputVocab() int {
	if c.Objective == Autoregressive {
		return c.Vocab
	}
	return c.Vocab + 1
}

// outPositions is how many window positions the output layer predicts.
func (c Config) outPositions() int {
	if c.Objective == MaskedDiffusion {
		return c.Context
	}
	return 1
}
