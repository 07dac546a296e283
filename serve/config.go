package serve

import (
	"errors"
	"fmt"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
	"log/slog"
	"net"
	"strings"
	"time"
	"unicode"
)

// Errors of the package.
var (
	// ErrConfig marks an invalid Config or missing component.
	ErrConfig = errors.New("serve: invalid config")
	// ErrState marks a state directory that cannot be read or written, or
	// one whose journal or checkpoint is damaged.
	ErrState = errors.New("serve: state")
	// ErrLocked marks a state directory another service holds.
	ErrLocked = errors.New("serve: state directory in use")
)

// APIVersion names the wire format of the JSON API; every response
// carries it, and its routes live under /v1/.
const APIVersion = "lm2lm-serve/v1"

// TokenEnv is the one environment variable the service's command and the
// adapters read the bearer token from.
const TokenEnv = "LM2LM_TOKEN"

// MinTokenLen is the shortest bearer token accepted.
const MinTokenLen = 16

// MaxStep is the largest trainer step accepted (2⁴⁰, far beyond any
// run), so that no request can consume the calibration schedule with an
// absurd step.
const MaxStep = 1 << 40

// Config parameterises a Service. Zero values are not replaced: start from
// DefaultConfig. The first block holds the method's parameters, the rest
// is documented plumbing.
type Config struct {
	// Reward parameterises reward shaping (METHOD.md §1 Reward); default
	// reward.DefaultConfig().
	Reward reward.Config
	// Norm is the advantage normalisation, default dapo.MeanCentered
	// (METHOD.md §1 Policy optimisation: Â_i = R_i − mean(R)); Eps guards
	// the std under dapo.GroupStd; FlatTol is the tolerance under which a
	// group's rewards count as all equal (dynamic sampling drops it).
	Norm    dapo.Norm
	Eps     float64
	FlatTol float64
	// Schedule is the calibration schedule in the trainer's steps, default
	// steps 16, 40, 64 with budgets 31, 38, 31 (METHOD.md §1 On-policy
	// calibration).
	Schedule calibrate.Schedule
	// Calibration is loop.TopRated (default, greedy top-B),
	// loop.RandomCalibration or loop.Static.
	Calibration loop.Calibration
	// DuplicateRuns allows calibration to run a change already in M
	// (loop.Config.DuplicateRuns); default false.
	DuplicateRuns bool
	// MaxHistory is the longest history of a drawn state; default
	// records.MaxHistory (8, METHOD.md §1 Vocabulary).
	MaxHistory int
	// Seed seeds state draws and random calibration; default 1.
	Seed uint64
	// GroupSize is G for requests that do not state it (OpenRLHF's
	// per-sample reward calls); default 8 (METHOD.md §1 Policy
	// optimisation).
	GroupSize int

	// Addr is the listen address; default "127.0.0.1:8080" (loopback).
	// Any other host needs Token.
	Addr string
	// Token, when set, is the bearer token every request must carry
	// ("Authorization: Bearer <token>"): at least MinTokenLen bytes, no
	// white space. Required unless Addr is loopback.
	Token string
	// Dir is the state directory: the checkpoint, the journal of what was
	// applied since, and a lock file; required. A service restarted on the
	// same Dir resumes where it stopped; two services cannot share one.
	Dir string
	// MaxBody bounds a request body; default 16 MiB.
	MaxBody int64
	// MaxSamples bounds the samples of one score request (a whole group
	// counts G); default 4096.
	MaxSamples int
	// MaxCompletions bounds G; default 64.
	MaxCompletions int
	// MaxCompletionBytes bounds one completion; default 8192.
	MaxCompletionBytes int
	// MaxStates bounds the states of one states or dataset request;
	// default 512 (an answer of about 6 MB).
	MaxStates int
	// MaxIssued bounds the issued states the service remembers of each
	// split (training and test apart); the oldest of a split are forgotten
	// beyond it (a score naming one is refused with code unknown_state).
	// Default 8192 (a dataset of 8192 rows).
	MaxIssued int
	// MaxPendingGroups bounds the groups being assembled; a sample that
	// would open one more is answered 503. Default 4096.
	MaxPendingGroups int
	// MaxDoneGroups bounds the scored groups whose answers are kept for
	// late or retried samples; default 8192 (32 steps of 256 groups).
	MaxDoneGroups int
	// GroupDeadline is how long a group may wait for its last sample after
	// its first arrived; it is then scored on what arrived and marked
	// partial. Default 60 s.
	GroupDeadline time.Duration
	// PredictTimeout bounds one world-model call; a call that fails or
	// times out makes its group's samples answer a failure_reason, never a
	// reward. Default 120 s.
	PredictTimeout time.Duration
	// PoolPerTask bounds the synthetic records of each task in the state
	// pool (records.Pool.TrimSynthetic, every 64 scored groups: the pool
	// holds at most 64·G more between two trims); default 1024 (a state's
	// history holds at most 8 records).
	PoolPerTask int
	// MaxCandidates is how many of the groups scored since the last
	// calibration are its candidates, the newest kept (loop.Config.Candidates,
	// METHOD.md §1 On-policy calibration: the current policy's proposals);
	// default 4096 (the main job's segments score at most 3,072 groups).
	MaxCandidates int
	// MaxInFlight bounds the requests being processed at once, waiting
	// samples included; a request beyond it is answered 503. Default 1024.
	MaxInFlight int
	// MaxConns bounds open connections (Server); default 2048.
	MaxConns int
	// ReadTimeout bounds reading a request (headers and body) and
	// IdleTimeout an idle keep-alive connection (Server); defaults 30 s and
	// 120 s.
	ReadTimeout, IdleTimeout time.Duration
	// Parallel bounds concurrent world-model calls and concurrent real
	// runs; default 2.
	Parallel int
	// CacheBytes bounds the answers kept for repeated states and evaluate
	// requests, in bytes; default 32 MiB.
	CacheBytes int
	// SnapshotBytes is the journal size after which a checkpoint is
	// written; default 32 MiB.
	SnapshotBytes int64
	// MaxStepJump bounds how far one request may move the step forward;
	// default 64. A step beyond MaxStep is always refused.
	MaxStepJump int
	// StepLag is how many steps behind the service's step a request may
	// be (asynchronous trainers score the previous policy's rollouts while
	// the next step starts); default 0: a step that goes back is an error.
	StepLag int
	// CountSteps, when true, takes the step of a score request that states
	// none as the number of score requests applied before it (opt-in: with
	// per-sample calls a request is not a step). Default false: a request
	// without a step is refused.
	CountSteps bool
	// AllowNoChange accepts the no-change proposal "none" (METHOD.md §1
	// Reward 2: it earns the no-change reward); default true.
	AllowNoChange bool
	// TextBytes is how much of a completion is kept as the proposal's
	// Text (what a text-reading world model sees); default 512.
	TextBytes int
	// Now stamps synthetic records; nil = a zero time (reproducible state
	// byte for byte).
	Now func() time.Time
	// Log receives what the service repaired when it opened its state
	// (a final journal entry cut short by a crash, dropped with its byte
	// count and offset); nil = nowhere. cmd/lm2lm-serve logs to stderr.
	Log *slog.Logger
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	d := dapo.DefaultConfig()
	return Config{Reward: reward.DefaultConfig(), Norm: d.Norm, Eps: d.Eps, FlatTol: d.FlatTol,
		Schedule: calibrate.DefaultSchedule(), Calibration: loop.TopRated, MaxHistory: records.MaxHistory, Seed: 1,
		GroupSize: d.GroupSize,
		Addr:      "127.0.0.1:8080", MaxBody: 16 << 20, MaxSamples: 4096, MaxCompletions: 64, MaxCompletionBytes: 8192,
		MaxStates: 512, MaxIssued: 8192, MaxPendingGroups: 4096, MaxDoneGroups: 8192, GroupDeadline: 60 * time.Second,
		PredictTimeout: 120 * time.Second, PoolPerTask: 1024, MaxCandidates: 4096, MaxInFlight: 1024, MaxConns: 2048,
		ReadTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second, Parallel: 2, CacheBytes: 32 << 20,
		SnapshotBytes: 32 << 20, MaxStepJump: 64, AllowNoChange: true, TextBytes: 512}
}

// loopConfig is the loop configuration the service drives: its method
// parameters. Each request is a batch, every informative group kept
// (Quota 0): the outside trainer does its own dynamic sampling.
func (c Config) loopConfig() loop.Config {
	return loop.Config{Reward: c.Reward, Norm: c.Norm, Eps: c.Eps, FlatTol: c.FlatTol, Schedule: c.Schedule,
		Calibration: c.Calibration, Candidates: c.MaxCandidates, DuplicateRuns: c.DuplicateRuns,
		MaxHistory: c.MaxHistory, Seed: c.Seed}
}

// Loopback reports whether addr's host is a loopback address (or
// "localhost").
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckToken reports a token that is too short or holds white space.
func CheckToken(tok string) error {
	if len(tok) < MinTokenLen {
		return fmt.Errorf("%w: the token has %d bytes, want ≥ %d", ErrConfig, len(tok), MinTokenLen)
	}
	if strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("%w: the token holds white space or control characters", ErrConfig)
	}
	return nil
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is required", ErrConfig)
	case c.Addr == "":
		return fmt.Errorf("%w: Addr is required", ErrConfig)
	case !Loopback(c.Addr) && c.Token == "":
		return fmt.Errorf("%w: Addr %q is not loopback: a bearer token is required", ErrConfig, records.Excerpt(c.Addr))
	case c.MaxBody < 1024:
		return fmt.Errorf("%w: MaxBody = %d, want ≥ 1024", ErrConfig, c.MaxBody)
	case c.MaxSamples < 1 || c.MaxCompletions < 1 || c.MaxCompletionBytes < 1 || c.MaxStates < 1:
		return fmt.Errorf("%w: MaxSamples, MaxCompletions, MaxCompletionBytes and MaxStates must be ≥ 1", ErrConfig)
	case c.MaxIssued < 1 || c.MaxPendingGroups < 1 || c.MaxDoneGroups < 1 || c.MaxCandidates < 1 || c.PoolPerTask < 0:
		return fmt.Errorf("%w: MaxIssued, MaxPendingGroups, MaxDoneGroups and MaxCandidates must be ≥ 1, PoolPerTask ≥ 0", ErrConfig)
	case c.MaxInFlight < 1 || c.MaxConns < 1 || c.Parallel < 1 || c.CacheBytes < 1 || c.SnapshotBytes < 1:
		return fmt.Errorf("%w: MaxInFlight, MaxConns, Parallel, CacheBytes and SnapshotBytes must be ≥ 1", ErrConfig)
	case c.GroupDeadline <= 0 || c.PredictTimeout <= 0 || c.ReadTimeout <= 0 || c.IdleTimeout <= 0:
		return fmt.Errorf("%w: GroupDeadline, PredictTimeout, ReadTimeout and IdleTimeout must be > 0", ErrConfig)
	case c.GroupSize < 1 || c.GroupSize > c.MaxCompletions:
		return fmt.Errorf("%w: GroupSize = %d, want 1..MaxCompletions (%d)", ErrConfig, c.GroupSize, c.MaxCompletions)
	case c.MaxStepJump < 1 || c.StepLag < 0:
		return fmt.Errorf("%w: MaxStepJump = %d (want ≥ 1), StepLag = %d (want ≥ 0)", ErrConfig, c.MaxStepJump, c.StepLag)
	case c.TextBytes < 0:
		return fmt.Errorf("%w: TextBytes = %d, want ≥ 0", ErrConfig, c.TextBytes)
	}
	if c.Token != "" {
		if err := CheckToken(c.Token); err != nil {
			return err
		}
	}
	if err := c.loopConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Components are what a Service serves over.
type Components struct {
	// World predicts gains from the evidence M the loop gives it.
	World rwm.WorldModel
	// Builder and Executor run calibration and evaluation proposals for
	// real; wrap the executor in a builder.Pool over Store to make runs
	// durable and idempotent (a restarted service then pays nothing twice).
	// Not needed when Calibration is Static (evaluation then fails).
	Builder  builder.Builder
	Executor builder.Executor
	// Tasks are the training tasks; HeldOut the held-out (test) tasks.
	Tasks   []records.Task
	HeldOut []records.Task
	// Evidence is M_0.
	Evidence records.Evidence
	// Histories holds the records the held-out states' histories are
	// drawn from (nil = none: held-out states have empty histories).
	Histories *records.Pool
	// Catalogue is the mechanism library completions must instantiate
	// (nil = free-form proposals); it is also in the prompts.
	Catalogue []records.Card
}
