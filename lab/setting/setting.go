// Package setting names the configurations the lab's drivers run
// (examples/lm2lm, examples/compare, examples/pytorch, examples/rwmeval):
// a Setting is a world model, a policy and a trainer part chosen together
// and known by name, and a Profile is the size of one job (steps, states,
// real-run budgets, tasks). Every driver builds its world model, policy and
// trainer from one Setting and one Profile of this package, so that the
// main job and the comparison cannot drift apart, and every result file
// records the setting by name and by content.
//
// Validated is the setting chosen on lab v2's validation splits with
// examples/compare (the main job's default); Library is every library
// default (the catalogue-only world model, the log-linear policy, the
// paper's trainer); PriorLocal and Local train on a world model that reads
// the calibration records as a local correction, with the lab's
// pretrained prior and without it. Lookup finds each by name.
//
// The package depends on lab, rwm, proposer and the root package; none of
// them depends on it.
package setting

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/prior"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// ErrUnknown wraps the error of a name that is neither a setting nor a
// profile of the package; its text lists the valid names.
var ErrUnknown = errors.New("setting: unknown name")

// Setting is a named configuration of the drivers: what the world model
// reads, how the policy is shaped and sampled, and how the trainer judges
// its states. Its JSON is what result files record as the setting's
// content.
type Setting struct {
	// Name is the setting's name (Names lists them).
	Name    string  `json:"name"`
	World   World   `json:"world"`
	Policy  Policy  `json:"policy"`
	Trainer Trainer `json:"trainer"`
	// Baselines is how the comparison's baselines are configured.
	Baselines Baselines `json:"baselines"`
}

// World is the embedded world model's part of a setting (METHOD.md §1
// Research World Model: W(s, a, M) predicts the gain of a proposal in the
// context of the records M).
type World struct {
	// Descriptors is the share of the task kernel that follows the tasks'
	// descriptors (rwm.EmbeddedConfig.DescriptorWeight, in [0, 1]; 0 = the
	// catalogue-only kernel). Library choice: how far two tasks' records
	// inform each other by their recipes rather than their family alone.
	Descriptors float64 `json:"descriptors"`
	// Effects reads what each proposal does to the task's descriptors from
	// the lab (rwm.WithEffects with lab.Effects). Library choice: the lab
	// can say what a change does to a recipe; a host without such a model
	// leaves it off.
	Effects bool `json:"effects"`
	// Tune re-tunes the world model's hyperparameters by marginal
	// likelihood on each evidence (rwm.Tuned around the same
	// configuration). Library choice: the fixed defaults fit no task
	// suite in particular.
	Tune bool `json:"tune"`
	// Prior gives the world model the lab's pretrained prior (lab/prior
	// V2: its mean function and the hyperparameters fitted beside it,
	// rwm.Prior.Config) and reads its context clipped at PriorClip σ_e,
	// the scale the prior was fitted on. Outside knowledge, which no
	// real-run budget counts (METHOD.md §1 Research World Model: the
	// paper's W is a pretrained LLM). Excludes Tune (the prior's
	// hyperparameters are kept).
	Prior bool `json:"prior,omitempty"`
	// Local has the trainer's world model read the calibration records as
	// a local correction of the model on M_0 (rwm.Residual with
	// rwm.DefaultResidualConfig, TrainerWorld) rather than as more
	// context of the same model (METHOD.md §1 On-policy calibration).
	Local bool `json:"local,omitempty"`
}

// PriorClip is the clip, in σ_e, of the gains a world model with the lab's
// prior conditions on (rwm.EmbeddedConfig.ClipSigmas): the scale the prior
// was fitted on (examples/priorcorpus -clip 6), and the better of the
// prior's two versions on v3-val (+1.72 robust clipped, +1.57 not;
// docs/results.md).
const PriorClip = 6

// Policy is the embedded policy's part of a setting (METHOD.md §1 Policy
// optimisation; the paper's policy is an LLM, so every field is a library
// choice for the embedded log-linear one, proposer.PolicyConfig).
type Policy struct {
	// LR is the Adam learning rate (proposer.AdamConfig.LR). Library
	// choice: the hidden layer's and the descriptor features' weights move
	// more per step than the log-linear weights alone.
	LR float64 `json:"lr"`
	// DescriptionBuckets is proposer.PolicyConfig.DescriptionBuckets
	// (hashed words of the task description; 0 = off).
	DescriptionBuckets int `json:"description_buckets"`
	// DescriptorBuckets is proposer.PolicyConfig.DescriptorBuckets
	// (binned task descriptors; 0 = off).
	DescriptorBuckets int `json:"descriptor_buckets"`
	// Hidden is proposer.PolicyConfig.Hidden (units of the hidden layer;
	// 0 = the log-linear policy). Its initial weights come from
	// HiddenSource.
	Hidden int `json:"hidden"`
	// TrainTemperature is the sampling temperature of the rollouts
	// (proposer.PolicyConfig.Temperature; METHOD.md §1 Policy
	// optimisation: 1.0).
	TrainTemperature float64 `json:"train_temperature"`
	// EvalTemperature is the sampling temperature at evaluation
	// (proposer.Policy.SetTemperature before lm2lm.Evaluate). Library
	// choice: the paper evaluates at the rollouts' temperature.
	EvalTemperature float64 `json:"eval_temperature"`
}

// Trainer is the LM2LM trainer's part of a setting (lm2lm.Config).
type Trainer struct {
	// HeldOutTask judges each training state's rewards as for an unseen
	// task (lm2lm.Config.HeldOutTask; beyond METHOD.md §1 Reward, whose W
	// reads M whole).
	HeldOutTask bool `json:"held_out_task"`
}

// Baselines is the baselines' part of a setting: each baseline in its
// strongest version chosen on validation, like every method's setting.
type Baselines struct {
	// RerankHistory has the world-model rerank read each state's own
	// history (baseline.RerankConfig.History: the state's real records of
	// its task join M for that state's predictions), for the Rerank
	// baseline and for LM2LM's rerank of its trained policy. Library
	// choice: METHOD.md's W reads M; the state's history is the evidence a
	// rerank at test time has in hand.
	RerankHistory bool `json:"rerank_history"`
}

// RerankConfig returns baseline.DefaultRerankConfig with the setting's
// Baselines.RerankHistory.
func (s Setting) RerankConfig() baseline.RerankConfig {
	c := baseline.DefaultRerankConfig()
	c.History = s.Baselines.RerankHistory
	return c
}

// Validated is the setting chosen on lab v2's validation splits with
// examples/compare (the third look's, with the nearest miss settled on
// v2-val2's 16 seeds): the world model follows the task descriptors
// fully, reads what each proposal does to them from the lab and re-tunes
// on its records; the policy has 256 binned descriptor features, no
// description words and a 32-unit hidden layer, Adam LR 0.02, rollouts at
// temperature 2 and evaluation at 0.5; the trainer judges each training
// state as for an unseen task; the rerank baselines read each state's own
// history. The main job and the comparison run it by
// default.
func Validated() Setting {
	return Setting{
		Name:      "validated",
		World:     World{Descriptors: 1, Effects: true, Tune: true},
		Policy:    Policy{LR: 0.02, DescriptionBuckets: 0, DescriptorBuckets: 256, Hidden: 32, TrainTemperature: 2, EvalTemperature: 0.5},
		Trainer:   Trainer{HeldOutTask: true},
		Baselines: Baselines{RerankHistory: true},
	}
}

// Library is every library default: rwm.DefaultEmbeddedConfig over the
// catalogue (no descriptors, no effects, fixed hyperparameters),
// proposer.DefaultPolicyConfig (log-linear, Adam LR 0.05, temperature 1
// for the rollouts and the evaluation) and lm2lm.DefaultConfig's trainer.
func Library() Setting {
	p := proposer.DefaultPolicyConfig()
	return Setting{
		Name: "library",
		Policy: Policy{LR: p.Adam.LR, DescriptionBuckets: p.DescriptionBuckets, DescriptorBuckets: p.DescriptorBuckets,
			Hidden: p.Hidden, TrainTemperature: p.Temperature, EvalTemperature: p.Temperature},
		Trainer:   Trainer{HeldOutTask: lm2lm.DefaultConfig().HeldOutTask},
		Baselines: Baselines{RerankHistory: baseline.DefaultRerankConfig().History},
	}
}

// PriorLocal is Validated with the lab's pretrained prior in the world
// model (World.Prior, its hyperparameters kept) and the calibration
// records read as a local correction of it (World.Local): the setting
// under which LM2LM trains on the strongest world model the lab has.
func PriorLocal() Setting {
	s := Validated()
	s.Name = "prior-local"
	s.World.Tune, s.World.Prior, s.World.Local = false, true, true
	return s
}

// Local is Validated with the calibration records read as a local
// correction of the world model on M_0 (World.Local): PriorLocal without
// the prior.
func Local() Setting {
	s := Validated()
	s.Name = "local"
	s.World.Local = true
	return s
}

// Names lists the settings' names, the default first.
func Names() []string { return []string{"validated", "library", "prior-local", "local"} }

// Lookup returns the setting of the given name; for any other name it
// returns an error wrapping ErrUnknown that lists the valid names.
func Lookup(name string) (Setting, error) {
	switch name {
	case "validated":
		return Validated(), nil
	case "library":
		return Library(), nil
	case "prior-local":
		return PriorLocal(), nil
	case "local":
		return Local(), nil
	}
	return Setting{}, fmt.Errorf("%w: setting %q; valid: %s", ErrUnknown, excerpt(name), strings.Join(Names(), ", "))
}

// excerpt bounds a name quoted in an error.
func excerpt(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

// WorldConfig returns the configuration of the setting's embedded world
// model over the lab: the lab catalogue's priors and cards
// (rwm.PriorsFromCards), the descriptor share and the lab's effects
// (World.Effects).
func (s Setting) WorldConfig(l *lab.Lab) rwm.EmbeddedConfig {
	cat := lab.Catalogue()
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.DescriptorWeight = s.World.Descriptors
	cfg.Priors, cfg.Cards = rwm.PriorsFromCards(cat), cat
	if s.World.Effects {
		cfg = rwm.WithEffects(cfg, l.Effects())
	}
	return cfg
}

// NewWorld returns the setting's embedded world model over the lab:
// WorldConfig's model, re-tuned on each evidence when World.Tune is set
// (rwm.Tuned), with the lab's prior when World.Prior is. A configuration
// the world model refuses is an error wrapping rwm.ErrConfig.
func (s Setting) NewWorld(l *lab.Lab) (rwm.WorldModel, error) {
	cfg := s.WorldConfig(l)
	if s.World.Prior {
		p, err := labPrior()
		if err != nil {
			return nil, err
		}
		if cfg, err = p.Config(cfg); err != nil {
			return nil, fmt.Errorf("setting %s: the pretrained prior: %w", s.Name, err)
		}
		cfg.ClipSigmas = PriorClip
	}
	return NewModel(cfg, s.World.Tune)
}

// labPrior is lab/prior's V2 prior, read and checked once.
var labPrior = sync.OnceValues(prior.V2)

// PriorDigest returns the digest of the prior the setting's world model
// carries (rwm.Prior.Digest), "" when it carries none.
func (s Setting) PriorDigest() (string, error) {
	if !s.World.Prior {
		return "", nil
	}
	p, err := labPrior()
	if err != nil {
		return "", err
	}
	return p.Digest(), nil
}

// TrainerWorld returns the world model the trainer reads, given the
// setting's world model base (NewWorld) and the trainer's M_0: base
// itself, or under World.Local the residual model that reads every record
// beyond M_0, the calibration records, as a local correction
// (rwm.NewResidual with rwm.DefaultResidualConfig).
func (s Setting) TrainerWorld(base rwm.WorldModel, m0 records.Evidence) (rwm.WorldModel, error) {
	if !s.World.Local {
		return base, nil
	}
	return rwm.NewResidual(base, m0, rwm.DefaultResidualConfig())
}

// NewModel returns the embedded world model of cfg, re-tuned on each
// evidence by rwm.Tuned around cfg when tune is set.
func NewModel(cfg rwm.EmbeddedConfig, tune bool) (rwm.WorldModel, error) {
	if tune {
		m, err := rwm.NewTuned(cfg, nil)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	m, err := rwm.NewEmbedded(cfg)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// PolicyConfig returns proposer.DefaultPolicyConfig with the setting's
// policy part: the learning rate, the feature buckets, the hidden layer
// and the rollouts' temperature.
func (s Setting) PolicyConfig() proposer.PolicyConfig {
	c := proposer.DefaultPolicyConfig()
	c.Adam.LR = s.Policy.LR
	c.DescriptionBuckets, c.DescriptorBuckets, c.Hidden = s.Policy.DescriptionBuckets, s.Policy.DescriptorBuckets, s.Policy.Hidden
	c.Temperature = s.Policy.TrainTemperature
	return c
}

// HiddenSource is the source of the policy's hidden-layer draws for a
// seed (proposer.NewPolicy's rng), nil when the setting's policy has no
// hidden layer: it depends on the seed alone, so every method and driver
// of one seed starts from the same policy.
func (s Setting) HiddenSource(seed uint64) *rand.Rand {
	if s.Policy.Hidden == 0 {
		return nil
	}
	return rand.New(rand.NewPCG(seed, 0x68696464))
}

// NewPolicy returns the setting's untrained policy over the lab catalogue
// for a seed (PolicyConfig, HiddenSource).
func (s Setting) NewPolicy(seed uint64) (*proposer.Policy, error) {
	return proposer.NewPolicy(lab.Catalogue(), s.PolicyConfig(), s.HiddenSource(seed))
}

// ApplyTrainer sets the setting's trainer part in cfg
// (lm2lm.Config.HeldOutTask).
func (s Setting) ApplyTrainer(cfg *lm2lm.Config) { cfg.HeldOutTask = s.Trainer.HeldOutTask }

// Validate reports a setting whose parts the library would refuse: a
// descriptor share outside [0, 1], or a policy configuration that
// proposer.PolicyConfig.Validate rejects (a non-positive learning rate or
// temperature, buckets or units out of range), or an evaluation
// temperature that is not finite and > 0.
func (s Setting) Validate() error {
	if !(s.World.Descriptors >= 0 && s.World.Descriptors <= 1) {
		return fmt.Errorf("setting %s: World.Descriptors = %g, want in [0, 1]", s.Name, s.World.Descriptors)
	}
	if s.World.Prior && s.World.Tune {
		return fmt.Errorf("setting %s: World.Prior with World.Tune: the prior keeps its hyperparameters", s.Name)
	}
	if !(s.Policy.EvalTemperature > 0 && s.Policy.EvalTemperature <= 100) {
		return fmt.Errorf("setting %s: Policy.EvalTemperature = %g, want in (0, 100]", s.Name, s.Policy.EvalTemperature)
	}
	if err := s.PolicyConfig().Validate(); err != nil {
		return fmt.Errorf("setting %s: %w", s.Name, err)
	}
	return nil
}
