package proposer

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
)

// Sentinel errors of the package.
var (
	// ErrConfig wraps every PolicyConfig validation failure.
	ErrConfig = errors.New("proposer: invalid config")
	// ErrCatalogue wraps every catalogue validation failure.
	ErrCatalogue = errors.New("proposer: invalid catalogue")
	// ErrNotInCatalogue is returned when a proposal to score or train on
	// is not a card of the policy's catalogue with one of its choices.
	ErrNotInCatalogue = errors.New("proposer: proposal not in the catalogue")
	// ErrBadItem is returned for a batch item the policy cannot train on
	// (an invalid sample, or old log-probs that are not one per token).
	ErrBadItem = errors.New("proposer: bad batch item")
	// ErrCheckpoint is returned by UnmarshalBinary for a malformed checkpoint.
	ErrCheckpoint = errors.New("proposer: bad checkpoint")
	// ErrNotInitialised is returned by the methods of a zero Policy that
	// has not been filled by UnmarshalBinary.
	ErrNotInitialised = errors.New("proposer: policy not initialised")
)

// AdamConfig parameterises the Adam optimiser of the embedded policy
// (Kingma and Ba, 2015). The paper trains an LLM and gives no optimiser
// settings for a log-linear policy, so every default is a library choice.
type AdamConfig struct {
	// LR is the step size α; default 0.05. Library choice: the policy's
	// weights are logits over sparse binary features, so a step of a few
	// hundredths moves a probability by a few percent, and the learning
	// test converges in tens of steps without oscillating.
	LR float64 `json:"lr"`
	// Beta1 is β₁, the decay of the first-moment average; default 0.9
	// (Adam's published default).
	Beta1 float64 `json:"beta1"`
	// Beta2 is β₂, the decay of the second-moment average; default 0.999
	// (Adam's published default).
	Beta2 float64 `json:"beta2"`
	// Eps is ε in the denominator; default 1e-8 (Adam's published default).
	Eps float64 `json:"eps"`
}

// DefaultAdamConfig returns LR 0.05, β₁ 0.9, β₂ 0.999, ε 1e-8.
func DefaultAdamConfig() AdamConfig {
	return AdamConfig{LR: 0.05, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// Validate reports the first invalid field.
func (c AdamConfig) Validate() error {
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("%w: Adam LR = %g, want finite and > 0", ErrConfig, c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("%w: Adam Beta1 = %g, want in [0, 1)", ErrConfig, c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("%w: Adam Beta2 = %g, want in [0, 1)", ErrConfig, c.Beta2)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return fmt.Errorf("%w: Adam Eps = %g, want finite and > 0", ErrConfig, c.Eps)
	}
	return nil
}

// PolicyConfig parameterises the embedded log-linear policy.
type PolicyConfig struct {
	// Temperature is T in π(k) ∝ exp(z_k / T); default 1.0 (METHOD.md §1
	// Policy optimisation: rollouts sample at temperature 1.0).
	Temperature float64 `json:"temperature"`
	// NoChange adds the no-change proposal (records.NoChange) as one more
	// card token; default false. Library choice: METHOD.md §1 Reward 2
	// punishes it with −3, so it is off unless a host wants the policy to
	// learn to avoid it.
	NoChange bool `json:"no_change"`
	// FamilyBuckets is the number of hashed one-hot features for the task
	// family (FNV-1a of the family name modulo FamilyBuckets); default 32.
	// Library choice: hashing needs no list of families, so held-out and
	// unseen families get a feature too, at the price of rare collisions.
	FamilyBuckets int `json:"family_buckets"`
	// DescriptionBuckets is the number of hashed one-hot features for the
	// words of the task's description (records.Task.Description: FNV-1a of
	// each lower-cased word, numbers kept whole, modulo DescriptionBuckets);
	// default 0 = off. The description is what an LLM proposer reads about
	// a task (its reference configuration), and two tasks of one family can
	// need opposite changes (a reference that already runs hot must not
	// raise its learning rate). Library choice: off by default, because it
	// is only as useful as the host's descriptions and, at the default Adam
	// LR 0.05, it made the policy collapse faster on the lab. The lab's main
	// job (examples/lm2lm) turns it on with 64 buckets and LR 0.02: over
	// seeds 1–3 held-out Avg@4 −1.97 σ_e vs −7.78 σ_e without it (Base −4.34).
	DescriptionBuckets int `json:"description_buckets"`
	// DescriptorBuckets is the number of hashed one-hot features for the
	// task's named numeric descriptors (records.Task.Descriptors, the
	// structured twin of the description): each (name, value) becomes the
	// bucket FNV-1a(name, q(v)) modulo DescriptorBuckets with the
	// quarter-octave bin q(v) = ⌊4·sign(v)·log₂(1 + |v|)⌋, so learning rates
	// a factor 2 apart, widths 64 and 128, or one-hot 0 and 1 land in
	// different bins. Default 0 = off (library choice: like the description,
	// it is only as useful as the host's descriptors).
	DescriptorBuckets int `json:"descriptor_buckets,omitempty"`
	// DescriptorSpread is s: each descriptor also turns on the buckets of
	// the s bins on either side of its own, q(v)−s … q(v)+s, so two tasks
	// whose values are up to 2s quarter-octaves apart share features and
	// what the policy learns on one reaches its neighbours (a smooth
	// function of the value instead of one weight per bin). Default 0 (one
	// bin per descriptor). Needs DescriptorBuckets > 0; each descriptor then
	// uses 2s+1 buckets, so give it room (library choice of the lab's
	// drivers: s = 2 with 1,024 buckets).
	DescriptorSpread int `json:"descriptor_spread,omitempty"`
	// HistoryProposalBuckets is the number of hashed one-hot features for
	// the exact proposals of the state's history with their outcome: each
	// record becomes the bucket FNV-1a(records.Proposal.Key, outcome)
	// modulo HistoryProposalBuckets, the outcome being a positive gain, a
	// non-positive gain or an infeasible run. The history's card features
	// say that some width change helped; these say which one (width ×2 or
	// ×½), so a parameter head can prefer or avoid the direction the
	// history measured. Default 0 = off (library choice: the card features
	// are what the paper's state describes; this is a lever measured on the
	// lab's validation split, see the README).
	HistoryProposalBuckets int `json:"history_proposal_buckets,omitempty"`
	// Hidden is H, the number of units of an optional hidden layer over the
	// state features, h = tanh(U · x_state + c), shared by every head: each
	// head's logits gain V_head · h on top of their log-linear terms (a
	// residual addition), so the policy can follow rewards that depend on
	// combinations of features (one family and one descriptor bin), which
	// a log-linear head cannot represent. U starts at N(0, HiddenInitStd²)
	// drawn from NewPolicy's rng (which Hidden > 0 therefore needs), c and
	// V at zero, so the hidden layer adds nothing to the initial policy.
	// Default 0 = no hidden layer: exactly the log-linear policy, its
	// parameters, results and checkpoints. At most 1,024. Library choice:
	// off by default, as the paper's proposer is an LLM and gives no size;
	// it is the lever for a log-linear head that spreads its mass instead
	// of following rewards that change from task to task.
	Hidden int `json:"hidden,omitempty"`
	// HiddenInitStd is σ, the standard deviation of the hidden layer's
	// initial weights U ~ N(0, σ²); 0 (the default) means 0.1. Library
	// choice: a state with n active features starts with pre-activations
	// of standard deviation σ·√n, and σ = 0.1 keeps them in tanh's range
	// (below 1) for the lab's states, which have tens of features. With few
	// features per state, a larger σ matters: DAPO can settle on the
	// log-linear compromise, starving one state, before a nearly linear
	// hidden layer bends. On the XOR states (four features each,
	// TestHiddenDAPOLearnsXOR: Hidden 16, 300 steps, LR 0.01) σ = 1 learns
	// all four states on 7 seeds of 8, σ = 0.1 on 1, the log-linear policy
	// on none. At most 10; ignored when Hidden = 0.
	HiddenInitStd float64 `json:"hidden_init_std,omitempty"`
	// DescriptorInputs are real-valued inputs of the hidden layer, one per
	// named task descriptor (records.Task.Descriptors): the input of d is
	// x_d = clamp((asinh(v) − d.Center) / d.Scale, −3, 3) for the task's
	// value v, 0 when the task lacks the name or v is not finite, and the
	// hidden pre-activations gain Σ_d Ud[d, ·]·x_d. Unlike the binned
	// DescriptorBuckets, which give each quarter-octave bin its own
	// weights, these are smooth in the value: what the policy learns on
	// the training tasks' recipes reaches an unseen task's recipe between
	// or beside them. Ud starts at N(0, HiddenInitStd²), drawn from
	// NewPolicy's rng after U. Needs Hidden > 0; names distinct and
	// non-empty, Center finite, Scale finite and > 0; at most 1,024.
	// Default nil = none (library choice: the host knows its descriptors
	// and their spread; the lab's drivers standardise each over the
	// training tasks).
	DescriptorInputs []DescriptorInput `json:"descriptor_inputs,omitempty"`
	// DescriptorLinear: the descriptor inputs also enter every head's
	// logits linearly, z_k += Σ_d L[d, k]·x_d, so that a head is
	// log-linear in the standardised descriptors (each card's preference
	// a linear function of the recipe, with or without a hidden layer).
	// L starts at zero, after every other parameter, so the initial
	// policy and every other parameter's draw are those without it.
	// Needs DescriptorInputs. Default false (library choice: the
	// log-linear policy of the binary features; a lever measured on the
	// lab's validation split, see the README).
	DescriptorLinear bool `json:"descriptor_linear,omitempty"`
	// InitStd is the standard deviation of the initial weights; default 0,
	// which starts from the uniform policy and needs no rng. Library
	// choice: uniform is the least informed start and is exactly
	// reproducible.
	InitStd float64 `json:"init_std"`
	// Adam configures the optimiser; default DefaultAdamConfig().
	Adam AdamConfig `json:"adam"`
	// Loss configures the DAPO surrogate used by Update; default
	// dapo.DefaultLossConfig() (METHOD.md §1 Policy optimisation:
	// ε_low 0.2, ε_high 0.28, token-level).
	Loss dapo.LossConfig `json:"loss"`
}

// DescriptorInput is one real-valued hidden-layer input of
// PolicyConfig.DescriptorInputs: the descriptor Name, standardised as
// (asinh(v) − Center) / Scale.
type DescriptorInput struct {
	Name   string  `json:"name"`
	Center float64 `json:"center"`
	Scale  float64 `json:"scale"`
}

// StandardisedInputs returns a DescriptorInput for every descriptor name
// of tasks whose asinh value varies across them, in name order, centred at
// the mean of asinh(v) over the tasks that have it and scaled by its
// standard deviation there (non-finite values are skipped): the
// standardisation PolicyConfig.DescriptorInputs expects, computed on the
// training tasks. A name constant across its tasks says nothing about
// them and gets no input.
func StandardisedInputs(tasks []records.Task) []DescriptorInput {
	vals := map[string][]float64{}
	for _, t := range tasks {
		for n, v := range t.Descriptors {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				vals[n] = append(vals[n], math.Asinh(v))
			}
		}
	}
	var out []DescriptorInput
	for _, n := range slices.Sorted(maps.Keys(vals)) {
		xs := vals[n]
		var mean float64
		for _, x := range xs {
			mean += x
		}
		mean /= float64(len(xs))
		var ss float64
		for _, x := range xs {
			ss += (x - mean) * (x - mean)
		}
		if sd := math.Sqrt(ss / float64(len(xs))); sd > 1e-9 {
			out = append(out, DescriptorInput{Name: n, Center: mean, Scale: sd})
		}
	}
	return out
}

// maxDescriptorInputs bounds PolicyConfig.DescriptorInputs, so that a
// checkpoint cannot ask for an absurd allocation.
const maxDescriptorInputs = 1024

// descriptorInputClamp bounds each standardised descriptor input.
const descriptorInputClamp = 3

// validateInputs reports the first invalid descriptor input.
func (c PolicyConfig) validateInputs() error {
	if len(c.DescriptorInputs) == 0 {
		if c.DescriptorLinear {
			return fmt.Errorf("%w: DescriptorLinear without DescriptorInputs", ErrConfig)
		}
		return nil
	}
	if (c.Hidden == 0 && !c.DescriptorLinear) || len(c.DescriptorInputs) > maxDescriptorInputs {
		return fmt.Errorf("%w: %d DescriptorInputs, want at most %d and Hidden > 0 or DescriptorLinear", ErrConfig, len(c.DescriptorInputs), maxDescriptorInputs)
	}
	seen := make(map[string]bool, len(c.DescriptorInputs))
	for i, d := range c.DescriptorInputs {
		switch {
		case d.Name == "" || seen[d.Name]:
			return fmt.Errorf("%w: DescriptorInputs[%d]: name %q empty or repeated", ErrConfig, i, d.Name)
		case math.IsNaN(d.Center) || math.IsInf(d.Center, 0):
			return fmt.Errorf("%w: DescriptorInputs[%d] (%s): Center = %g, want finite", ErrConfig, i, d.Name, d.Center)
		case !(d.Scale > 0) || math.IsInf(d.Scale, 0):
			return fmt.Errorf("%w: DescriptorInputs[%d] (%s): Scale = %g, want finite and > 0", ErrConfig, i, d.Name, d.Scale)
		}
		seen[d.Name] = true
	}
	return nil
}

// DefaultPolicyConfig returns the documented defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{
		Temperature:        1,
		NoChange:           false,
		FamilyBuckets:      32,
		DescriptionBuckets: 0,
		InitStd:            0,
		Adam:               DefaultAdamConfig(),
		Loss:               dapo.DefaultLossConfig(),
	}
}

// maxFamilyBuckets bounds FamilyBuckets so that a checkpoint cannot ask
// for an absurd allocation.
const maxFamilyBuckets = 1 << 16

// maxHidden bounds Hidden, so that a checkpoint cannot ask for an absurd
// allocation.
const maxHidden = 1024

// maxHiddenInitStd bounds HiddenInitStd: beyond it every tanh unit starts
// saturated.
const maxHiddenInitStd = 10

// maxDescriptorSpread bounds DescriptorSpread: 16 bins either side is
// eight octaves, beyond which a feature says nothing of the value.
const maxDescriptorSpread = 16

// Validate reports the first invalid field.
func (c PolicyConfig) Validate() error {
	switch {
	case !(c.Temperature > 0) || math.IsInf(c.Temperature, 0):
		return fmt.Errorf("%w: Temperature = %g, want finite and > 0", ErrConfig, c.Temperature)
	case c.FamilyBuckets < 1 || c.FamilyBuckets > maxFamilyBuckets:
		return fmt.Errorf("%w: FamilyBuckets = %d, want in [1, %d]", ErrConfig, c.FamilyBuckets, maxFamilyBuckets)
	case c.DescriptionBuckets < 0 || c.DescriptionBuckets > maxFamilyBuckets:
		return fmt.Errorf("%w: DescriptionBuckets = %d, want in [0, %d]", ErrConfig, c.DescriptionBuckets, maxFamilyBuckets)
	case c.DescriptorBuckets < 0 || c.DescriptorBuckets > maxFamilyBuckets:
		return fmt.Errorf("%w: DescriptorBuckets = %d, want in [0, %d]", ErrConfig, c.DescriptorBuckets, maxFamilyBuckets)
	case c.DescriptorSpread < 0 || c.DescriptorSpread > maxDescriptorSpread || (c.DescriptorSpread > 0 && c.DescriptorBuckets == 0):
		return fmt.Errorf("%w: DescriptorSpread = %d, want in [0, %d], and 0 without DescriptorBuckets", ErrConfig, c.DescriptorSpread, maxDescriptorSpread)
	case c.HistoryProposalBuckets < 0 || c.HistoryProposalBuckets > maxFamilyBuckets:
		return fmt.Errorf("%w: HistoryProposalBuckets = %d, want in [0, %d]", ErrConfig, c.HistoryProposalBuckets, maxFamilyBuckets)
	case c.Hidden < 0 || c.Hidden > maxHidden:
		return fmt.Errorf("%w: Hidden = %d, want in [0, %d]", ErrConfig, c.Hidden, maxHidden)
	case !(c.HiddenInitStd >= 0 && c.HiddenInitStd <= maxHiddenInitStd):
		return fmt.Errorf("%w: HiddenInitStd = %g, want in [0, %g]", ErrConfig, c.HiddenInitStd, float64(maxHiddenInitStd))
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("%w: InitStd = %g, want finite and ≥ 0", ErrConfig, c.InitStd)
	}
	if err := c.validateInputs(); err != nil {
		return err
	}
	if err := c.Loss.Validate(); err != nil {
		return fmt.Errorf("%w: Loss: %w", ErrConfig, err)
	}
	return c.Adam.Validate()
}
