package proposer

import (
	"errors"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/dapo"
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

// PolicyConfig parameterises the embedded log-linear policy (METHOD.md §1
// Policy optimisation: the policy π_θ that DAPO trains; the paper's is an
// LLM, so its shape here is the library's).
type PolicyConfig struct {
	// Temperature is T in π(k) ∝ exp(z_k / T), the temperature of Propose
	// and of the rollouts' log-probs; default 1.0 (METHOD.md §1 Policy
	// optimisation: rollouts sample at temperature 1.0).
	Temperature float64 `json:"temperature"`
	// NoChange adds the no-change proposal (records.NoChange) as one more
	// card token; default false. Library choice: METHOD.md §1 Reward 2
	// punishes it with −3, so it is off unless a host wants the policy to
	// learn to avoid it.
	NoChange bool `json:"no_change"`
	// FamilyBuckets is the number of hashed one-hot features for the task
	// family (FNV-1a of the family name modulo FamilyBuckets); default 32.
	// Library choice: hashing needs no list of families, so held-out and
	// unseen families get a feature too, at the price of rare collisions
	// (METHOD.md §1 Vocabulary: the task e of the state).
	FamilyBuckets int `json:"family_buckets"`
	// DescriptionBuckets is the number of hashed one-hot features for the
	// words of the task's description (records.Task.Description: FNV-1a of
	// each lower-cased word, numbers kept whole, modulo DescriptionBuckets);
	// default 0 = off. The description is what an LLM proposer reads about
	// a task (METHOD.md §1 Vocabulary: the research state's task e), and two
	// tasks of one family can need opposite changes (a reference that
	// already runs hot must not raise its learning rate). Library choice:
	// off by default, because it is only as useful as the host's
	// descriptions; the lab's validated setting (lab/setting.Validated)
	// leaves it off too, reading the structured DescriptorBuckets instead.
	DescriptionBuckets int `json:"description_buckets"`
	// DescriptorBuckets is the number of hashed one-hot features for the
	// task's named numeric descriptors (records.Task.Descriptors, the
	// structured twin of the description; METHOD.md §1 Vocabulary: the
	// task e of the state): each (name, value) becomes the bucket
	// FNV-1a(name, q(v)) modulo DescriptorBuckets with the quarter-octave
	// bin q(v) = ⌊4·sign(v)·log₂(1 + |v|)⌋, so learning rates a factor 2
	// apart, widths 64 and 128, or one-hot 0 and 1 land in different bins.
	// Default 0 = off (library choice: like the description, it is only as
	// useful as the host's descriptors; the lab's validated setting uses
	// 256 buckets).
	DescriptorBuckets int `json:"descriptor_buckets,omitempty"`
	// Hidden is H, the number of units of an optional hidden layer over the
	// state features, h = tanh(U · x_state + c), shared by every head: each
	// head's logits gain V_head · h on top of their log-linear terms (a
	// residual addition), so the policy can follow rewards that depend on
	// combinations of features (one family and one descriptor bin), which
	// a log-linear head cannot represent. U starts at N(0, 0.1²) drawn from
	// NewPolicy's rng (which Hidden > 0 therefore needs), c and V at zero,
	// so the hidden layer adds nothing to the initial policy. Default 0 =
	// no hidden layer: exactly the log-linear policy, its parameters,
	// results and checkpoints. At most 1,024. Library choice: off by
	// default, as the paper's proposer is an LLM and gives no size; the
	// lab's validated setting uses 32 units.
	Hidden int `json:"hidden,omitempty"`
	// InitStd is the standard deviation of the initial log-linear weights;
	// default 0, which starts from the uniform policy and needs no rng.
	// Library choice: uniform is the least informed start and is exactly
	// reproducible.
	InitStd float64 `json:"init_std"`
	// Adam configures the optimiser; default DefaultAdamConfig() (library
	// choice: the paper trains an LLM and gives no optimiser settings for
	// this policy; see AdamConfig).
	Adam AdamConfig `json:"adam"`
	// Loss configures the DAPO surrogate used by Update; default
	// dapo.DefaultLossConfig() (METHOD.md §1 Policy optimisation:
	// ε_low 0.2, ε_high 0.28, token-level).
	Loss dapo.LossConfig `json:"loss"`
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
	case c.Hidden < 0 || c.Hidden > maxHidden:
		return fmt.Errorf("%w: Hidden = %d, want in [0, %d]", ErrConfig, c.Hidden, maxHidden)
	case !(c.InitStd >= 0) || math.IsInf(c.InitStd, 0):
		return fmt.Errorf("%w: InitStd = %g, want finite and ≥ 0", ErrConfig, c.InitStd)
	}
	if err := c.Loss.Validate(); err != nil {
		return fmt.Errorf("%w: Loss: %w", ErrConfig, err)
	}
	return c.Adam.Validate()
}
