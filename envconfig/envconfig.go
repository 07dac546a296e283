// Package envconfig is the config file of an lm2lm environment run on a
// team's own training code: its tasks and their reference recipes, the
// catalogue of mechanism cards, the training command (speaking the
// subprocess protocol of package builder), the executor (a local pool or
// Slurm), the world model (embedded or an OpenAI-compatible server), the
// records store, M_0, the calibration schedule and the service's address.
// cmd/lm2lm reads it; docs/own-environment.md explains every key.
//
// The format is YAML, decoded with go.yaml.in/yaml/v3, the maintained fork
// of the Go YAML parser: it keeps comments out of the data (users annotate
// their file), and its KnownFields decoding refuses keys that are not in
// the Go types. On top of it this package walks the document's node tree
// before decoding, so that every problem names its key path (e.g.
// executor.slurm.partition) and line: unknown keys, keys given twice
// (YAML allows neither here), anchors and aliases (refused: a config is
// read by people, and aliases make it expand), values of the wrong type.
// Missing required values and out-of-range numbers are found by Validate,
// with the same paths. Every error is an *Error and wraps ErrInvalid.
//
// Load = Parse + Resolve (fill every default, documented on the types, and
// make relative paths relative to the file's directory) + Validate.
// Format writes the resolved config back as YAML with every default
// spelled out, and parses strictly to the same Config.
package envconfig

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Sentinels. Every error of Parse, Resolve, Validate and Load wraps
// ErrInvalid and one of the kinds below; test them with errors.Is.
var (
	ErrInvalid      = errors.New("envconfig: invalid config")
	ErrSyntax       = errors.New("not valid YAML for a config")
	ErrUnknownKey   = errors.New("unknown key")
	ErrDuplicateKey = errors.New("duplicate key")
	ErrType         = errors.New("wrong type")
	ErrMissing      = errors.New("missing required value")
	ErrRange        = errors.New("value out of range")
)

// Error is a problem with one key of a config file.
type Error struct {
	Path string // key path, e.g. "executor.slurm.partition" or "tasks[2].id"; "" = the whole file
	Line int    // line in the file; 0 when unknown (Validate's checks)
	Kind error  // ErrSyntax, ErrUnknownKey, ErrDuplicateKey, ErrType, ErrMissing or ErrRange
	Msg  string
}

func (e *Error) Error() string {
	s := "envconfig: "
	if e.Path != "" {
		s += e.Path
		if e.Line > 0 {
			s += fmt.Sprintf(" (line %d)", e.Line)
		}
		s += ": "
	} else if e.Line > 0 {
		s += fmt.Sprintf("line %d: ", e.Line)
	}
	return s + e.Kind.Error() + ": " + e.Msg
}

// Is makes errors.Is match ErrInvalid and the error's Kind.
func (e *Error) Is(target error) bool { return target == ErrInvalid || target == e.Kind }

var durationType = reflect.TypeFor[time.Duration]()

// Version is the only config version this package reads.
const Version = 1

// Config is one environment. Zero values stand for the defaults named on
// each field; Resolve fills them in.
type Config struct {
	// Version of the file format: 1. Required.
	Version int `yaml:"version"`
	// Out is the folder of the reports (reference.json, m0.json) and, by
	// default, of the store and the service's state. Default "lm2lm-out".
	Out string `yaml:"out"`
	// Store is the records store (records.OpenFile): every real run, kept
	// so that no run is ever paid twice. Default "<out>/records.jsonl".
	Store string `yaml:"store"`
	// PricePerDeviceHour prices runs (builder.PoolConfig): money =
	// device-seconds / 3600 × price. Default 0 (unpriced).
	PricePerDeviceHour float64 `yaml:"price_per_device_hour"`
	// Training is the command that trains one run.
	Training Training `yaml:"training"`
	// Executor runs the command: locally or under Slurm.
	Executor Executor `yaml:"executor"`
	// Reference holds the defaults of the tasks' reference runs.
	Reference Reference `yaml:"reference"`
	// Tasks are the environments e (METHOD.md §1 Vocabulary). At least one
	// training task is required.
	Tasks []Task `yaml:"tasks"`
	// Catalogue is the mechanism library proposals instantiate (METHOD.md
	// §1 Vocabulary: mechanism cards). Required.
	Catalogue Catalogue `yaml:"catalogue"`
	// WorldModel predicts gains (METHOD.md §1 Research World Model).
	WorldModel WorldModel `yaml:"world_model"`
	// M0 is the initial real records.
	M0 M0 `yaml:"m0"`
	// Calibration is the on-policy calibration schedule.
	Calibration Calibration `yaml:"calibration"`
	// Serve is the environment service's address and state.
	Serve Serve `yaml:"serve"`
	// Evaluate is the held-out evaluation of a trained proposer (the
	// evaluate verb).
	Evaluate Evaluate `yaml:"evaluate"`

	dir string // the config file's directory; relative paths are relative to it
}

// Training is the training command, speaking the subprocess protocol
// (docs/executors.md): it is started as <command...> <job file> <result
// file>, reads the job (task, proposal, seed, budget and the spec
// {"recipe": the task's reference recipe}), trains, and writes {"loss": ℓ}
// or {"infeasible": why}; exit 0 ok, 3 infeasible, 75 transient.
type Training struct {
	// Command is the argv list, e.g. [python3, ./train.py]; never a shell
	// string (the proposal's text never reaches a command line). An
	// element that starts with ./ or ../ is made absolute against the
	// config file's directory. Required.
	Command []string `yaml:"command"`
	// Timeout limits one attempt of a run; past it the run is infeasible
	// and timed out. Default 0 (no limit).
	Timeout time.Duration `yaml:"timeout"`
	// PassEnv names the variables of lm2lm's environment the command sees
	// besides PATH and HOME (an allow-list: API keys stay out). Default
	// none.
	PassEnv []string `yaml:"pass_env"`
	// Env holds extra NAME=value entries for the command. Default none.
	Env []string `yaml:"env"`
	// Slots is how many of the executor's slots (e.g. GPUs) one run takes.
	// Default 1.
	Slots int64 `yaml:"slots"`
	// Version names the training code's version: stored runs of another
	// version are not reused, so that an edited script is run again
	// (records.Record.Version). At most 256 bytes of printable text.
	// Default "" (unversioned).
	Version string `yaml:"version"`
}

// Executor kinds.
const (
	Local = "local"
	Slurm = "slurm"
)

// Executor says where runs execute.
type Executor struct {
	// Kind is "local" (builder.Subprocess on this machine) or "slurm"
	// (builder/slurm: one sbatch job per run). Default "local".
	Kind string `yaml:"kind"`
	// Slots is the slot budget shared by concurrent runs (builder.Pool):
	// local CPU or GPU slots, or Slurm jobs in flight. Default 1.
	Slots int64 `yaml:"slots"`
	// MaxAttempts bounds the attempts of one run; only transient failures
	// (exit 75, a lost node) are retried. Default 3 (builder's default).
	MaxAttempts int `yaml:"max_attempts"`
	// Slurm configures the Slurm executor; set only with kind slurm.
	Slurm *SlurmConfig `yaml:"slurm,omitempty"`
}

// SlurmConfig maps to builder/slurm.Config.
type SlurmConfig struct {
	// Partition, Account and QOS become --partition, --account and --qos.
	// Default "" (the cluster's defaults).
	Partition string `yaml:"partition"`
	Account   string `yaml:"account"`
	QOS       string `yaml:"qos"`
	// GRES is --gres for every job, e.g. "gpu:a100:1"; SlotGRES requests
	// --gres=<slot_gres>:<training.slots> instead, e.g. "gpu". At most one
	// of the two. Default "".
	GRES     string `yaml:"gres"`
	SlotGRES string `yaml:"slot_gres"`
	// CPUsPerTask is --cpus-per-task when > 0. Default 0.
	CPUsPerTask int `yaml:"cpus_per_task"`
	// Mem is --mem, e.g. "16G". Default "".
	Mem string `yaml:"mem"`
	// TimeLimit is --time; a job that reaches it is infeasible and timed
	// out. Default 0 (the partition's).
	TimeLimit time.Duration `yaml:"time_limit"`
	// WorkDir holds the jobs' directories; it must be on a file system the
	// nodes share. Default "<out>/slurm-jobs".
	WorkDir string `yaml:"work_dir"`
	// ExtraArgs are more sbatch options, e.g. [--constraint=a100]. Default
	// none.
	ExtraArgs []string `yaml:"extra_args"`
}

// Reference holds the defaults of every task's reference runs.
type Reference struct {
	// Seeds are the reference runs' seeds: b_e is the mean of their
	// losses and σ_e their sample standard deviation (METHOD.md §1
	// Vocabulary: most tasks had 3 reference runs). Default [1, 2, 3].
	Seeds []uint64 `yaml:"seeds"`
	// MinSeedNoise is the least σ_e: a script that is deterministic
	// across seeds would otherwise give σ_e = 0, which no reward can be
	// scaled by (METHOD.md §1 Reward 1). Default 1e-6 (in the metric's
	// units).
	MinSeedNoise float64 `yaml:"min_seed_noise"`
}

// Task is one environment e: a training script's reference recipe on one
// model and data set.
type Task struct {
	// ID names the task; unique, 1-64 characters of letters, digits,
	// '-', '_' and '.'. Required.
	ID string `yaml:"id"`
	// Family is the unit of held-out generalisation (METHOD.md §1 Data and
	// evaluation), e.g. "ar-prose". Required.
	Family string `yaml:"family"`
	// Split is "train" or "held-out". Default "train".
	Split string `yaml:"split"`
	// Metric is "bits-per-byte" or "nats-per-token" (lower is better).
	// Default "bits-per-byte".
	Metric string `yaml:"metric"`
	// Budget is the training budget in the script's units (steps, tokens);
	// passed in the job. Default 0 (unknown).
	Budget int `yaml:"budget"`
	// Description is free text for people and LLM prompts. Default "".
	Description string `yaml:"description"`
	// Descriptors are named numeric descriptors of the task (names of
	// a-z, 0-9, '_'), read by the embedded world model. Default none.
	Descriptors map[string]float64 `yaml:"descriptors,omitempty"`
	// Recipe is the reference recipe: free-form keys and values, passed
	// to the script as the job's spec {"recipe": …}; the script applies
	// the job's proposal to it. Default empty.
	Recipe map[string]any `yaml:"recipe,omitempty"`
	// Seeds overrides reference.seeds for this task. Default: those.
	Seeds []uint64 `yaml:"seeds,omitempty"`
}

// Catalogue names the mechanism cards: a file or inline, not both.
type Catalogue struct {
	// File is a JSON or YAML file holding a list of cards in
	// records.Card's form (mechanism, description, params with name,
	// kind, choices, min, max, doc; prior with mean_sigmas, std_sigmas).
	File string `yaml:"file,omitempty"`
	// Cards are the cards inline, in the same form.
	Cards []Card `yaml:"cards,omitempty"`
}

// Card is records.Card with YAML keys equal to its JSON keys.
type Card struct {
	Mechanism   string  `yaml:"mechanism"`
	Description string  `yaml:"description"`
	Params      []Param `yaml:"params,omitempty"`
	Prior       *Prior  `yaml:"prior,omitempty"`
}

// Param is records.ParamSpec.
type Param struct {
	Name    string   `yaml:"name"`
	Kind    string   `yaml:"kind"` // float, int or enum
	Choices []string `yaml:"choices"`
	Min     float64  `yaml:"min,omitempty"`
	Max     float64  `yaml:"max,omitempty"`
	Doc     string   `yaml:"doc,omitempty"`
}

// Prior is records.Prior: the expected gain of a card in σ_e units.
type Prior struct {
	Mean float64 `yaml:"mean_sigmas"`
	Std  float64 `yaml:"std_sigmas"`
}

// World model kinds.
const (
	Embedded = "embedded"
	OpenAI   = "openai"
)

// WorldModel is the research world model.
type WorldModel struct {
	// Kind is "embedded" (rwm.NewEmbedded with the cards' priors: no
	// server) or "openai" (rwm/openai over an OpenAI-compatible server).
	// Default "embedded".
	Kind string `yaml:"kind"`
	// OpenAI configures the server; set only with kind openai.
	OpenAI *OpenAIConfig `yaml:"openai,omitempty"`
}

// OpenAIConfig is an OpenAI-compatible chat-completions server.
type OpenAIConfig struct {
	// BaseURL, e.g. http://localhost:8000/v1. Required.
	BaseURL string `yaml:"base_url"`
	// Model is the model name sent with every request. Required.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the API key; the
	// file never holds the key. Default "" (no key: local servers).
	APIKeyEnv string `yaml:"api_key_env"`
	// Concurrency bounds the calls in flight (rwm.NewLimit). Default 8.
	Concurrency int `yaml:"concurrency"`
	// PromptVersion pins the prompt the file was written for; the only
	// one is rwm/openai's "rwm-v1". Default "rwm-v1".
	PromptVersion string `yaml:"prompt_version"`
	// Temperature of the calls, in [0, 2]. Default 0.
	Temperature float64 `yaml:"temperature"`
}

// M0 is the initial real records M_0 (METHOD.md §1 Data and evaluation:
// catalogue changes drawn uniformly over the training tasks, run for real).
type M0 struct {
	// Size is how many (task, change) pairs are drawn. Default 100
	// (METHOD.md §1: |M_0| = 100).
	Size int `yaml:"size"`
	// Seed seeds the draws. Default 1.
	Seed uint64 `yaml:"seed"`
}

// Calibration is the on-policy calibration schedule (METHOD.md §1
// On-policy calibration).
type Calibration struct {
	// Steps are the calibration points. Default [16, 40, 64].
	Steps []int `yaml:"steps"`
	// Budgets are the real runs at each point (same length as steps).
	// Default [31, 38, 31].
	Budgets []int `yaml:"budgets"`
}

// Serve is the environment service (docs/service.md).
type Serve struct {
	// Addr is the listen address; a non-loopback one needs a token
	// ($LM2LM_TOKEN or token_file). Default "127.0.0.1:8080".
	Addr string `yaml:"addr"`
	// Dir is the service's state (checkpoint, journal). Default
	// "<out>/serve".
	Dir string `yaml:"dir"`
	// TokenFile holds the bearer token; the file never holds the token
	// itself. Default "" ($LM2LM_TOKEN, or none on loopback).
	TokenFile string `yaml:"token_file"`
	// GroupSize is G, proposals per state (METHOD.md §1 Policy
	// optimisation). Default 8.
	GroupSize int `yaml:"group_size"`
	// Parallel bounds the concurrent world-model calls and calibration
	// runs. Default 2.
	Parallel int `yaml:"parallel"`
	// Seed seeds the service's loop. Default 1.
	Seed uint64 `yaml:"seed"`
}

// Evaluate is the held-out evaluation of a trained LLM proposer (METHOD.md
// §1 Data and evaluation): K proposals per held-out state, each run for
// real, summarised as Avg@K and Best@K with bootstrap intervals.
type Evaluate struct {
	// Proposer is the trained policy behind an OpenAI-compatible server
	// (proposer/openai). Required by the evaluate verb only.
	Proposer *ProposerConfig `yaml:"proposer,omitempty"`
	// K is the number of proposals per state. Default 4 (METHOD.md §1:
	// Avg@4, Best@4).
	K int `yaml:"k"`
	// StatesPerTask is the number of states drawn per held-out task.
	// Default 4.
	StatesPerTask int `yaml:"states_per_task"`
	// Seed fixes the states and the sampling. Default 1.
	Seed uint64 `yaml:"seed"`
}

// ProposerConfig is a trained proposer behind an OpenAI-compatible
// chat-completions server.
type ProposerConfig struct {
	// BaseURL, e.g. http://localhost:8000/v1. Required.
	BaseURL string `yaml:"base_url"`
	// Model is the model name sent with every request. Required.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the API key; the
	// file never holds the key. Default "" (no key: local servers).
	APIKeyEnv string `yaml:"api_key_env"`
	// Temperature of sampling, in [0, 2]. Default 1 (METHOD.md §1: the
	// policy samples at temperature 1.0).
	Temperature *float64 `yaml:"temperature,omitempty"`
}

// Dir returns the directory relative paths of c are relative to.
func (c Config) Dir() string { return c.dir }
