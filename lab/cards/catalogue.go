package cards

import (
	"fmt"
	"math"
	"strconv"

	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

func fparam(name string, lo, hi float64, doc string, choices ...float64) records.ParamSpec {
	cs := make([]string, len(choices))
	for i, c := range choices {
		cs[i] = records.FormatNumber(c)
	}
	return records.ParamSpec{Name: name, Kind: Float, Choices: cs, Min: lo, Max: hi, Doc: doc}
}

func iparam(name string, lo, hi int, doc string, choices ...int) records.ParamSpec {
	cs := make([]string, len(choices))
	for i, c := range choices {
		cs[i] = strconv.Itoa(c)
	}
	return records.ParamSpec{Name: name, Kind: Int, Choices: cs, Min: float64(lo), Max: float64(hi), Doc: doc}
}

func eparam(name, doc string, choices ...string) records.ParamSpec {
	return records.ParamSpec{Name: name, Kind: Enum, Choices: choices, Doc: doc}
}

func prior(mean, std float64) *records.Prior { return &records.Prior{Mean: mean, Std: std} }

func card(mech, desc string, pr *records.Prior, apply func(*model.Config, values), params ...records.ParamSpec) def {
	return sized(mech, desc, pr, func(c *model.Config, v values) error { apply(c, v); return nil }, params...)
}

// sized is card for an edit that can fail: a relative size card whose
// result leaves the card's range returns an error (sizeIn).
func sized(mech, desc string, pr *records.Prior, apply func(*model.Config, values) error, params ...records.ParamSpec) def {
	return def{card: records.Card{Mechanism: mech, Description: desc, Params: params, Prior: pr}, apply: apply}
}

// scaleSize multiplies a size by a factor as the relative size cards do:
// a factor above 1 rounds to the nearest integer (×2 doubles), a factor
// below 1 rounds down (×½ is v/2 in integer division), at least 1.
func scaleSize(v int, factor float64) int {
	x := float64(v) * factor
	if factor < 1 {
		return max(1, int(math.Floor(x+1e-9)))
	}
	return roundPos(x)
}

// sizeIn checks a relative size card's result against the card's range
// [lo, hi] (the sizes the card is meant for; the model's own limits are
// checked by Apply afterwards).
func sizeIn(param, what string, ref, got, lo, hi int) error {
	if got < lo || got > hi {
		return &ProposalError{Param: param, Err: ErrOutOfRange,
			Reason: fmt.Sprintf("%s %d → %d outside the card's range %d..%d", what, ref, got, lo, hi)}
	}
	return nil
}

// scaled is the edit of a card that multiplies one size of the model by
// its factor parameter, within [lo, hi].
func scaled(what string, lo, hi int, field func(*model.Config) *int) func(*model.Config, values) error {
	return func(c *model.Config, v values) error {
		f := field(c)
		got := scaleSize(*f, v.f("factor"))
		if err := sizeIn("factor", what, *f, got, lo, hi); err != nil {
			return err
		}
		*f = got
		return nil
	}
}

// addLayers is the edit of the depth cards: layers += add, within 0..6
// for a plain stack; the residual cards also turn residual connections on
// and go to at least 2 layers (within 2..6).
func addLayers(c *model.Config, v values, residual bool) error {
	got, lo := c.Layers+v.i("add"), 0
	if residual {
		got, lo = max(2, got), 2
	}
	if err := sizeIn("add", "layers", c.Layers, got, lo, 6); err != nil {
		return err
	}
	c.Layers = got
	c.Residual = c.Residual || residual
	return nil
}

// scaleBatch is the edit of the batch cards: the batch times factor
// (within 8..512) at a fixed token budget; with sqrtLR the learning rate
// is scaled by the square root of the batch ratio.
func scaleBatch(c *model.Config, v values, sqrtLR bool) error {
	b := scaleSize(c.Batch, v.f("factor"))
	if err := sizeIn("factor", "batch", c.Batch, b, 8, 512); err != nil {
		return err
	}
	if sqrtLR {
		c.LR *= math.Sqrt(float64(b) / float64(c.Batch))
	}
	setBatchFixedTokens(c, b)
	return nil
}

// roundPos rounds x to the nearest integer, at least 1.
func roundPos(x float64) int { return max(1, int(math.Round(x))) }

// warmupSteps converts a fraction of the run into warm-up steps.
func warmupSteps(c *model.Config, frac float64) int {
	return min(c.Steps, int(math.Round(frac*float64(c.Steps))))
}

// setBatchFixedTokens changes the batch and rescales steps (and warm-up) so
// that the number of training windows stays the same.
func setBatchFixedTokens(c *model.Config, batch int) {
	r := float64(c.Batch) / float64(batch)
	c.Steps = roundPos(float64(c.Steps) * r)
	c.Warmup = min(c.Steps, int(math.Round(float64(c.Warmup)*r)))
	c.Batch = batch
}

// buildCatalogue lists the cards. Priors (mean, std in σ_e) are written
// from general knowledge before measuring anything in the lab; see doc.go.
func buildCatalogue() []def {
	return []def{
		// Learning rate and optimiser.
		card("lr-scale", "Multiply the peak learning rate by a factor; the most sensitive hyperparameter of a short run.",
			prior(0, 6), func(c *model.Config, v values) { c.LR *= v.f("factor") },
			fparam("factor", 0.01, 100, "multiplier on the reference peak learning rate", 2, 0.5, 0.25, 4, 10)),
		card("lr-warmup-boost", "Raise the peak learning rate and add a linear warm-up so that the higher rate stays stable early on.",
			prior(1, 6), func(c *model.Config, v values) {
				c.LR *= v.f("factor")
				c.Warmup = warmupSteps(c, v.f("warmup_frac"))
			},
			fparam("factor", 1, 20, "multiplier on the peak learning rate", 2, 4),
			fparam("warmup_frac", 0, 0.5, "fraction of the steps spent warming up", 0.05, 0.1)),
		card("optimizer", "Swap the optimiser, keeping the learning rate and every other setting.",
			prior(-1, 5), func(c *model.Config, v values) { c.Optimizer = v.s("name") },
			eparam("name", "optimiser", "lion", "momentum", "sgd", "adamw", "adam")),
		card("lion", "Switch to the Lion optimiser (sign updates, β1 0.9, β2 0.99) with a smaller learning rate, as Lion needs.",
			prior(-0.5, 5), func(c *model.Config, v values) {
				c.Optimizer, c.Beta1, c.Beta2 = "lion", 0.9, 0.99
				c.LR *= v.f("lr_factor")
			},
			fparam("lr_factor", 0.001, 1, "multiplier on the peak learning rate", 0.3, 0.1)),
		card("sgd-momentum", "Switch to SGD with heavy-ball momentum and a learning rate scaled up for plain gradients.",
			prior(-3, 6), func(c *model.Config, v values) {
				c.Optimizer, c.Beta1 = "momentum", v.f("momentum")
				c.LR *= v.f("lr_factor")
			},
			fparam("lr_factor", 1, 1000, "multiplier on the peak learning rate", 30, 10, 100),
			fparam("momentum", 0, 0.99, "momentum coefficient", 0.9, 0.5)),
		card("adam-beta1", "Change Adam's first-moment decay β1 (momentum of the update direction).",
			prior(0, 2), func(c *model.Config, v values) { c.Beta1 = v.f("value") },
			fparam("value", 0, 0.99, "β1", 0.8, 0.95, 0.5)),
		card("adam-beta2", "Change Adam's second-moment decay β2; a lower β2 adapts faster in short runs.",
			prior(0.5, 2), func(c *model.Config, v values) { c.Beta2 = v.f("value") },
			fparam("value", 0.5, 0.99999, "β2", 0.99, 0.95, 0.9999)),
		card("adam-eps", "Change Adam's ε, the floor of the update's denominator.",
			prior(0, 1), func(c *model.Config, v values) { c.AdamEps = v.f("value") },
			fparam("value", 1e-12, 0.01, "ε", 1e-6, 1e-10, 1e-4)),
		card("weight-decay", "Add weight decay with the current optimiser (L2 for Adam and SGD, decoupled for AdamW and Lion).",
			prior(-0.5, 2), func(c *model.Config, v values) { c.WeightDecay = v.f("value") },
			fparam("value", 0, 1, "decay coefficient", 0.01, 0.1, 0.3)),
		card("adamw", "Switch to AdamW with decoupled weight decay.",
			prior(0.3, 2), func(c *model.Config, v values) { c.Optimizer, c.WeightDecay = "adamw", v.f("decay") },
			fparam("decay", 0, 1, "decoupled decay coefficient", 0.1, 0.01, 0.3)),
		card("grad-clip", "Clip the global gradient norm.",
			prior(0.3, 1.5), func(c *model.Config, v values) { c.ClipNorm = v.f("norm") },
			fparam("norm", 0.01, 100, "maximum global gradient norm", 1, 0.5, 5)),

		// Schedules.
		card("cosine-decay", "Decay the learning rate along a cosine from its peak to a fraction of it.",
			prior(1.5, 3), func(c *model.Config, v values) { c.Schedule, c.MinLRFrac = "cosine", v.f("min_frac") },
			fparam("min_frac", 0, 1, "final learning rate as a fraction of the peak", 0.1, 0)),
		card("linear-decay", "Decay the learning rate linearly from its peak to a fraction of it.",
			prior(1.5, 3), func(c *model.Config, v values) { c.Schedule, c.MinLRFrac = "linear", v.f("min_frac") },
			fparam("min_frac", 0, 1, "final learning rate as a fraction of the peak", 0, 0.1)),
		card("wsd", "Warm-up-stable-decay: hold the peak learning rate, then decay it to zero over the final fraction of the run.",
			prior(1.5, 3), func(c *model.Config, v values) {
				c.Schedule, c.DecayFrac, c.MinLRFrac = "wsd", v.f("decay_frac"), 0
			},
			fparam("decay_frac", 0.05, 0.9, "fraction of the steps in the final decay", 0.2, 0.1, 0.4)),
		card("warmup", "Add a linear learning-rate warm-up at the start of the run.",
			prior(0, 1.5), func(c *model.Config, v values) { c.Warmup = warmupSteps(c, v.f("frac")) },
			fparam("frac", 0, 0.5, "fraction of the steps spent warming up", 0.05, 0.1, 0.02)),
		card("warmup-cosine", "The common recipe: linear warm-up, then cosine decay to a fraction of the peak.",
			prior(1.5, 3), func(c *model.Config, v values) {
				c.Warmup = warmupSteps(c, v.f("warmup_frac"))
				c.Schedule, c.MinLRFrac = "cosine", v.f("min_frac")
			},
			fparam("warmup_frac", 0, 0.5, "fraction of the steps spent warming up", 0.05, 0.1),
			fparam("min_frac", 0, 1, "final learning rate as a fraction of the peak", 0.1, 0)),

		// Architecture.
		card("activation", "Change the hidden layers' activation function.",
			prior(0.5, 3), func(c *model.Config, v values) { c.Activation = v.s("name") },
			eparam("name", "activation", "gelu", "relu", "silu", "tanh")),
		card("norm", "Normalise each hidden layer's pre-activation.",
			prior(0.5, 3), func(c *model.Config, v values) { c.Norm = v.s("kind") },
			eparam("kind", "normalisation", "layernorm", "rmsnorm", "none")),
		sized("depth", "Add layers to the hidden stack (add=1) or remove them (add=-1), keeping its other settings (0 layers = a linear model; at most 6).",
			prior(0.5, 4), func(c *model.Config, v values) error { return addLayers(c, v, false) },
			iparam("add", -6, 6, "hidden layers added (negative: removed)", 1, -1)),
		sized("residual-depth", "Stack hidden layers with residual connections between them: the reference's layers plus add, at least 2 (at most 6).",
			prior(1, 4), func(c *model.Config, v values) error { return addLayers(c, v, true) },
			iparam("add", -6, 6, "hidden layers added to the reference's (the result is at least 2)", 1, 0, 2)),
		sized("deep-normed", "A deeper pre-normalised residual stack: residual connections plus a normalisation in every layer; the reference's layers plus add, at least 2 (at most 6).",
			prior(1, 4), func(c *model.Config, v values) error {
				c.Norm = v.s("norm")
				return addLayers(c, v, true)
			},
			iparam("add", -6, 6, "hidden layers added to the reference's (the result is at least 2)", 1, 0),
			eparam("norm", "normalisation", "rmsnorm", "layernorm")),
		sized("width", "Multiply the hidden width of every layer by a factor (×2 doubles it, ×0.5 halves it; the result stays within 8–512 units).",
			prior(1, 3), scaled("hidden width", 8, 512, func(c *model.Config) *int { return &c.Hidden }),
			fparam("factor", 0.125, 8, "multiplier on the reference's hidden units per layer", 2, 0.5)),
		sized("embed-dim", "Multiply the embedding width per input symbol by a factor (×2 doubles it, ×0.5 halves it; the result stays within 2–128).",
			prior(2, 4), scaled("embedding width", 2, 128, func(c *model.Config) *int { return &c.Embed }),
			fparam("factor", 0.125, 8, "multiplier on the reference's embedding width", 2, 0.5)),
		card("model-scale", "Scale the embedding and hidden widths together.",
			prior(1.5, 4), func(c *model.Config, v values) {
				c.Embed = roundPos(float64(c.Embed) * v.f("factor"))
				c.Hidden = roundPos(float64(c.Hidden) * v.f("factor"))
			},
			fparam("factor", 0.25, 4, "multiplier on embedding and hidden widths", 2, 1.5, 0.5)),
		sized("context", "Multiply the context window (symbols the model sees) by a factor (×2 doubles it, ×0.5 halves it; the result stays within 2–32 symbols).",
			prior(1, 4), scaled("context", 2, 32, func(c *model.Config) *int { return &c.Context }),
			fparam("factor", 0.125, 8, "multiplier on the reference's window length", 2, 0.5)),
		card("init-scale", "Multiply the standard deviation of the initial weights.",
			prior(0, 2), func(c *model.Config, v values) { c.InitScale *= v.f("factor") },
			fparam("factor", 0.01, 10, "multiplier on the init std", 0.5, 2, 0.25)),

		// Batch and regularisation.
		sized("batch-size", "Multiply the batch size by a factor at a fixed token budget (steps scale inversely), keeping the learning rate; the batch stays within 8–512 windows.",
			prior(0, 3), func(c *model.Config, v values) error { return scaleBatch(c, v, false) },
			fparam("factor", 0.125, 8, "multiplier on the reference's windows per step", 2, 0.5, 4, 0.25)),
		sized("batch-size-sqrt-lr", "Multiply the batch size by a factor at a fixed token budget and the learning rate by the square root of the batch ratio; the batch stays within 8–512 windows.",
			prior(0.5, 3), func(c *model.Config, v values) error { return scaleBatch(c, v, true) },
			fparam("factor", 0.125, 8, "multiplier on the reference's windows per step", 2, 0.5)),
		card("label-smoothing", "Smooth the training targets towards uniform by ε.",
			prior(-1.5, 1.5), func(c *model.Config, v values) { c.LabelSmoothing = v.f("eps") },
			fparam("eps", 0, 0.5, "smoothing ε", 0.05, 0.1, 0.2)),
		card("dropout", "Drop hidden activations during training.",
			prior(-1.5, 2), func(c *model.Config, v values) { c.Dropout = v.f("rate") },
			fparam("rate", 0, 0.5, "dropout rate", 0.1, 0.05, 0.2)),
	}
}
