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
	if bad := c.outOfRange(); len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(bad, "; "))
	}
	// Size caps: every field is in range, so the counts are defined.
	if bad := c.overCaps(); len(bad) > 0 {
		return fmt.Errorf("%w: %w: %s", ErrInvalidConfig, ErrTooLarge, strings.Join(bad, "; "))
	}
	return nil
}

// outOfRange says, field by field, what is out of its range.
func (c Config) outOfRange() problems {
	var p problems
	switch c.Objective {
	case Autoregressive, MaskedDiffusion, CentreMasked:
	default:
		p.add("Objective = %q, want %q, %q or %q", c.Objective, Autoregressive, MaskedDiffusion, CentreMasked)
	}
	p.intIn("Vocab", c.Vocab, 2, maxVocab)
	minCtx := 1
	if c.Objective == CentreMasked {
		minCtx = 2 // the centre needs at least one visible neighbour
	}
	p.intIn("Context", c.Context, minCtx, maxContext)
	p.intIn("Embed", c.Embed, 1, maxWidth)
	p.intIn("Hidden", c.Hidden, 1, maxWidth)
	p.intIn("Layers", c.Layers, 0, maxLayers)
	p.oneOf("Activation", c.Activation, activations)
	p.oneOf("Norm", c.Norm, norms)
	p.realIn("InitScale", c.InitScale, 0, 100, true, true)
	p.realIn("Dropout", c.Dropout, 0, 1, false, false)
	p.realIn("LabelSmoothing", c.LabelSmoothing, 0, 1, false, false)
	p.oneOf("Optimizer", c.Optimizer, optimizers)
	p.realIn("LR", c.LR, 0, 100, true, true)
	p.realIn("Beta1", c.Beta1, 0, 1, false, false)
	p.realIn("Beta2", c.Beta2, 0, 1, false, false)
	p.realIn("AdamEps", c.AdamEps, 0, 1, true, true)
	p.realIn("WeightDecay", c.WeightDecay, 0, 10, false, true)
	p.realIn("ClipNorm", c.ClipNorm, 0, 1e6, false, true)
	p.oneOf("Schedule", c.Schedule, schedules)
	p.intIn("Steps", c.Steps, 1, maxSteps)
	p.intIn("Warmup", c.Warmup, 0, max(c.Steps, 0))
	p.realIn("MinLRFrac", c.MinLRFrac, 0, 1, false, true)
	p.realIn("DecayFrac", c.DecayFrac, 0, 1, false, true)
	p.intIn("Batch", c.Batch, 1, maxBatch)
	p.intIn("EvalWindows", c.EvalWindows, 1, maxEval)
	return p
}

// overCaps says which size caps c exceeds (every field in range).
func (c Config) overCaps() problems {
	var p problems
	if f := StepFLOPs(c); f > MaxStepFLOPs {
		p.add("one step costs %.3g FLOPs, want ≤ MaxStepFLOPs = %.3g", f, MaxStepFLOPs)
	}
	if f := TrainFLOPs(c) + EvalFLOPs(c); f > MaxRunFLOPs {
		p.add("the run costs %.3g FLOPs, want ≤ MaxRunFLOPs = %.3g", f, MaxRunFLOPs)
	}
	if n := Params(c); n > MaxParams {
		p.add("%d parameters, want ≤ MaxParams = %d", n, MaxParams)
	}
	return p
}

// problems are Validate's messages, one per field out of its range.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// intIn checks lo ≤ v ≤ hi.
func (p *problems) intIn(name string, v, lo, hi int) {
	if v < lo || v > hi {
		p.add("%s = %d, want %d..%d", name, v, lo, hi)
	}
}

// oneOf checks that v is one of valid.
func (p *problems) oneOf(name, v string, valid []string) {
	for _, s := range valid {
		if v == s {
			return
		}
	}
	p.add("%s = %q, want one of %s", name, v, strings.Join(valid, ", "))
}

// realIn checks lo ≤ v < hi (or ≤ hi when closed), rejecting NaN.
func (p *problems) realIn(name string, v, lo, hi float64, loOpen, hiClosed bool) {
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
		p.add("%s = %g, want in %s%g, %g%s", name, v, l, lo, hi, r)
	}
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
