package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// The example has its own mechanism cards: the lab's cards edit the lab's
// MLP language model (lab/model.Config), while these edit the GPT recipe of
// train.py. Choices are relative to the task's reference where a value is
// a size or a rate (×2, ×½), so that a card means the same on every task.

// card is a mechanism card with its edit of a recipe.
type card struct {
	records.Card
	apply func(r *Recipe, v values) error
}

// values holds a checked proposal's parameters.
type values map[string]string

func (v values) f(name string) float64 {
	x, _ := strconv.ParseFloat(v[name], 64)
	return x
}

func (v values) i(name string) int { return int(v.f(name)) }

func fparam(name string, lo, hi float64, doc string, choices ...float64) records.ParamSpec {
	cs := make([]string, len(choices))
	for i, c := range choices {
		cs[i] = strconv.FormatFloat(c, 'g', -1, 64)
	}
	return records.ParamSpec{Name: name, Kind: "float", Choices: cs, Min: lo, Max: hi, Doc: doc}
}

func iparam(name string, lo, hi int, doc string, choices ...int) records.ParamSpec {
	cs := make([]string, len(choices))
	for i, c := range choices {
		cs[i] = strconv.Itoa(c)
	}
	return records.ParamSpec{Name: name, Kind: "int", Choices: cs, Min: float64(lo), Max: float64(hi), Doc: doc}
}

func eparam(name, doc string, choices ...string) records.ParamSpec {
	return records.ParamSpec{Name: name, Kind: "enum", Choices: choices, Doc: doc}
}

func mk(mech, desc string, mean, std float64, apply func(*Recipe, values) error, ps ...records.ParamSpec) card {
	return card{Card: records.Card{Mechanism: mech, Description: desc, Params: ps,
		Prior: &records.Prior{Mean: mean, Std: std}}, apply: apply}
}

func set(f func(*Recipe, values)) func(*Recipe, values) error {
	return func(r *Recipe, v values) error { f(r, v); return nil }
}

// scaleSteps multiplies the steps (and the warm-up with them) by k.
func scaleSteps(r *Recipe, k float64) {
	w := float64(r.Warmup) / float64(r.Steps)
	r.Steps = max(1, int(math.Round(float64(r.Steps)*k)))
	r.Warmup = min(r.Steps, int(math.Round(w*float64(r.Steps))))
}

// catalogue lists the cards. Priors (mean, std in σ_e) are written from
// general knowledge of small transformers before any run of this example.
var catalogue = []card{
	mk("lr-scale", "Multiply the peak learning rate by a factor.", 0, 6,
		set(func(r *Recipe, v values) { r.LR *= v.f("factor") }),
		fparam("factor", 0.01, 100, "multiplier on the peak learning rate", 2, 0.5, 4, 0.25, 10)),
	mk("warmup", "Spend a fraction of the steps on a linear learning-rate warm-up.", 0, 2,
		set(func(r *Recipe, v values) { r.Warmup = int(math.Round(v.f("frac") * float64(r.Steps))) }),
		fparam("frac", 0, 1, "fraction of the steps", 0.2, 0, 0.05, 0.4)),
	mk("schedule", "Change the learning-rate schedule after warm-up.", 0, 2,
		set(func(r *Recipe, v values) { r.Schedule = v["name"] }),
		eparam("name", "schedule", "linear", "constant", "cosine")),
	mk("min-lr", "Change the final learning rate of a decaying schedule, as a fraction of the peak.", 0, 1.5,
		set(func(r *Recipe, v values) { r.MinLRFrac = v.f("frac") }),
		fparam("frac", 0, 1, "final rate / peak rate", 0, 0.3, 0.03)),
	mk("width", "Scale the model width (keeping the number of heads).", 1, 4,
		set(func(r *Recipe, v values) { r.Width = int(math.Round(float64(r.Width) * v.f("factor"))) }),
		fparam("factor", 0.125, 8, "multiplier on the width", 2, 0.5, 1.5)),
	mk("depth", "Add or remove transformer blocks.", 0.5, 4,
		set(func(r *Recipe, v values) { r.Depth += v.i("delta") }),
		iparam("delta", -8, 8, "blocks added (negative: removed)", 1, -1, 2)),
	mk("heads", "Set the number of attention heads (must divide the width).", 0, 2,
		set(func(r *Recipe, v values) { r.Heads = v.i("n") }),
		iparam("n", 1, 64, "attention heads", 1, 4, 8)),
	mk("mlp-ratio", "Set the MLP's hidden size as a multiple of the width.", 0, 2,
		set(func(r *Recipe, v values) { r.MLPRatio = v.f("ratio") }),
		fparam("ratio", 0.25, 16, "hidden size / width", 2, 8, 1)),
	mk("dropout", "Add dropout on attention, residual and embedding outputs.", -1, 2,
		set(func(r *Recipe, v values) { r.Dropout = v.f("p") }),
		fparam("p", 0, 0.9, "drop probability", 0.1, 0.2)),
	mk("weight-decay", "Change AdamW's decoupled weight decay on the weight matrices.", 0, 1,
		set(func(r *Recipe, v values) { r.WeightDecay = v.f("value") }),
		fparam("value", 0, 10, "weight decay", 0, 0.01, 0.5)),
	mk("adam-beta2", "Change the second-moment decay β2 of AdamW.", 0, 1.5,
		set(func(r *Recipe, v values) { r.Beta2 = v.f("beta2") }),
		fparam("beta2", 0.5, 0.99999, "β2", 0.95, 0.999)),
	mk("grad-clip", "Change the global gradient-norm clip (0 turns it off).", 0, 1,
		set(func(r *Recipe, v values) { r.GradClip = v.f("norm") }),
		fparam("norm", 0, 100, "maximum global gradient norm; 0 = off", 0, 0.25, 4)),
	mk("batch-size", "Scale the batch, with the steps scaled inversely so that the training tokens stay the same.", 0, 3,
		set(func(r *Recipe, v values) {
			k := v.f("factor")
			r.Batch = max(1, int(math.Round(float64(r.Batch)*k)))
			scaleSteps(r, 1/k)
		}),
		fparam("factor", 0.0625, 16, "multiplier on the batch", 2, 0.5)),
	mk("context", "Scale the context window, with the batch scaled inversely so that each step sees the same tokens.", 0.5, 3,
		set(func(r *Recipe, v values) {
			k := v.f("factor")
			r.Context = int(math.Round(float64(r.Context) * k))
			r.Batch = max(1, int(math.Round(float64(r.Batch)/k)))
		}),
		fparam("factor", 0.125, 8, "multiplier on the context", 2, 0.5)),
	mk("activation", "Change the MLP's activation function.", 0, 1.5,
		set(func(r *Recipe, v values) { r.Activation = v["name"] }),
		eparam("name", "activation", "relu", "silu", "gelu")),
	mk("tie-embeddings", "Tie or untie the output layer and the byte embedding.", 0, 1.5,
		set(func(r *Recipe, v values) { r.TieEmbeddings = v["tied"] == "true" }),
		eparam("tied", "share the weights", "false", "true")),
	mk("sgd", "Switch to SGD with heavy-ball momentum and a larger learning rate.", -3, 5,
		set(func(r *Recipe, v values) {
			r.Optimizer, r.Beta1 = "sgd", v.f("momentum")
			r.LR *= v.f("lr_factor")
		}),
		fparam("lr_factor", 0.1, 1000, "multiplier on the peak learning rate", 30, 100),
		fparam("momentum", 0, 0.99, "momentum", 0.9)),
	mk("init-std", "Scale the standard deviation of the weights' initialisation.", 0, 1.5,
		set(func(r *Recipe, v values) { r.InitStd *= v.f("factor") }),
		fparam("factor", 0.01, 50, "multiplier on the initialisation std", 0.5, 2)),
	mk("longer-training", "Train for more (or fewer) steps, scaling the warm-up with them.", 2, 3,
		set(func(r *Recipe, v values) { scaleSteps(r, v.f("factor")) }),
		fparam("factor", 0.1, 10, "multiplier on the steps", 1.5, 0.5)),
}

var byName = func() map[string]*card {
	m := make(map[string]*card, len(catalogue))
	for i := range catalogue {
		m[catalogue[i].Mechanism] = &catalogue[i]
	}
	return m
}()

// Catalogue returns the example's mechanism cards as data (for the policy,
// the world model and prompts). The caller owns the slice.
func Catalogue() []records.Card {
	out := make([]records.Card, len(catalogue))
	for i, c := range catalogue {
		out[i] = c.Card
		out[i].Params = append([]records.ParamSpec(nil), c.Params...)
	}
	return out
}

// Apply returns ref edited by p (records.NoChange returns ref), or an error
// wrapping builder.ErrInfeasible with the reason: an unknown card, a missing,
// unknown or out-of-range parameter, or a recipe train.py would reject.
func Apply(ref Recipe, p records.Proposal) (Recipe, error) {
	if p.IsNoChange() {
		if len(p.Params) > 0 {
			return ref, fmt.Errorf("%w: the no-change proposal takes no parameters", builder.ErrInfeasible)
		}
		return ref, nil
	}
	c, ok := byName[strings.ToLower(strings.TrimSpace(p.Mechanism))]
	if !ok {
		return ref, fmt.Errorf("%w: unknown card %q", builder.ErrInfeasible, p.Mechanism)
	}
	v, err := check(c.Card, p)
	if err != nil {
		return ref, err
	}
	r := ref
	if err := c.apply(&r, v); err != nil {
		return ref, err
	}
	if err := r.Validate(); err != nil {
		return ref, fmt.Errorf("%w: %s: %w", builder.ErrInfeasible, p.Key(), err)
	}
	return r, nil
}

// check validates p's parameters against c: every parameter given once,
// numbers finite and within [Min, Max] (integers whole), enums one of the
// choices.
func check(c records.Card, p records.Proposal) (values, error) {
	v := values{}
	for k, raw := range p.Params {
		name := strings.ToLower(strings.TrimSpace(k))
		if _, dup := v[name]; dup {
			return nil, fmt.Errorf("%w: %s: parameter %s given twice", builder.ErrInfeasible, c.Mechanism, name)
		}
		v[name] = strings.TrimSpace(raw)
	}
	want := map[string]bool{}
	for _, ps := range c.Params {
		want[ps.Name] = true
		s, ok := v[ps.Name]
		if !ok {
			return nil, fmt.Errorf("%w: %s: missing parameter %s", builder.ErrInfeasible, c.Mechanism, ps.Name)
		}
		if ps.Kind == "enum" {
			if !oneOf(strings.ToLower(s), ps.Choices...) {
				return nil, fmt.Errorf("%w: %s: %s = %q, want one of %v", builder.ErrInfeasible, c.Mechanism, ps.Name, s, ps.Choices)
			}
			v[ps.Name] = strings.ToLower(s)
			continue
		}
		x, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil || math.IsNaN(x) || math.IsInf(x, 0):
			return nil, fmt.Errorf("%w: %s: %s = %q is not a finite number", builder.ErrInfeasible, c.Mechanism, ps.Name, s)
		case ps.Kind == "int" && x != math.Trunc(x):
			return nil, fmt.Errorf("%w: %s: %s = %q is not an integer", builder.ErrInfeasible, c.Mechanism, ps.Name, s)
		case x < ps.Min || x > ps.Max:
			return nil, fmt.Errorf("%w: %s: %s = %g out of range [%g, %g]", builder.ErrInfeasible, c.Mechanism, ps.Name, x, ps.Min, ps.Max)
		}
	}
	var extra []string
	for k := range v {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("%w: %s: unknown parameters %v", builder.ErrInfeasible, c.Mechanism, extra)
	}
	return v, nil
}
