package serve

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Errors of the package.
var (
	// ErrConfig marks an invalid Config or missing component.
	ErrConfig = errors.New("serve: invalid config")
	// ErrState marks a state directory that cannot be read or written.
	ErrState = errors.New("serve: state")
)

// APIVersion names the wire format of the JSON API; every response
// carries it, and its routes live under /v1/.
const APIVersion = "lm2lm-serve/v1"

// Config parameterises a Service. Zero values are not replaced: start from
// DefaultConfig.
type Config struct {
	// Loop is the training loop's configuration. The service uses its
	// Reward, DAPO (Norm, Eps, FlatTol), Schedule, Calibration,
	// DuplicateRuns, MaxHistory, Seed and WMRL-free parts; DefaultConfig
	// sets RolloutEvery = 1 (a scored request is a rollout), Steps to
	// MaxSteps and States = DAPO.Quota. WMRL, HeldOutTask and Trigger are
	// not served (ErrConfig).
	Loop lm2lm.Config
	// Addr is the listen address; default "127.0.0.1:8080" (loopback).
	// Any other host needs Token.
	Addr string
	// Token, when set, is the bearer token every request must carry
	// ("Authorization: Bearer <token>"). Required unless Addr is loopback.
	Token string
	// Dir is the state directory: the loop's checkpoint and the journal of
	// the requests applied since; required. A service restarted on the same
	// Dir resumes where it stopped.
	Dir string
	// MaxBody bounds a request body; default 16 MiB (library choice: 256
	// states × 8 completions of 4 KiB with room for JSON escapes).
	MaxBody int64
	// MaxGroups bounds the groups (states) of one request; default 1024.
	MaxGroups int
	// MaxCompletions bounds the completions of one group; default 64.
	MaxCompletions int
	// MaxCompletionBytes bounds one completion; default 8192.
	MaxCompletionBytes int
	// MaxStates bounds the states of one states or dataset request;
	// default 4096.
	MaxStates int
	// MaxInFlight bounds the requests being processed at once; a request
	// beyond it is answered 503 at once (memory stays bounded). Default 4.
	MaxInFlight int
	// Parallel bounds concurrent world-model calls of one request and
	// concurrent real runs; default 2.
	Parallel int
	// Cache is how many responses are kept for repeated request ids;
	// default 64 (a 256 × 8 answer is about 250 KB).
	Cache int
	// SnapshotEvery writes a checkpoint after that many journalled
	// requests even without a step change; default 64.
	SnapshotEvery int
	// AllowNoChange accepts the no-change proposal "none" (METHOD.md §1
	// Reward 2: it earns the no-change reward); default true.
	AllowNoChange bool
	// TextBytes is how much of a completion is kept as the proposal's
	// Text (what a text-reading world model sees); default 512.
	TextBytes int
	// Now stamps synthetic records; nil = a zero time (library choice:
	// reproducible state byte for byte).
	Now func() time.Time
}

// MaxSteps is the Loop.Steps of DefaultConfig: an outside trainer's
// steps are not bounded by the service.
const MaxSteps = 1 << 40

// DefaultConfig returns the defaults documented on Config over the
// paper's loop configuration.
func DefaultConfig() Config {
	lc := lm2lm.DefaultConfig()
	lc.RolloutEvery, lc.Steps, lc.States = 1, MaxSteps, lc.DAPO.Quota
	return Config{Loop: lc, Addr: "127.0.0.1:8080", MaxBody: 16 << 20, MaxGroups: 1024, MaxCompletions: 64,
		MaxCompletionBytes: 8192, MaxStates: 4096, MaxInFlight: 4, Parallel: 2, Cache: 64, SnapshotEvery: 64,
		AllowNoChange: true, TextBytes: 512}
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

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is required", ErrConfig)
	case c.Addr == "":
		return fmt.Errorf("%w: Addr is required", ErrConfig)
	case !Loopback(c.Addr) && c.Token == "":
		return fmt.Errorf("%w: Addr %q is not loopback: a bearer token is required", ErrConfig, c.Addr)
	case c.MaxBody < 1024:
		return fmt.Errorf("%w: MaxBody = %d, want ≥ 1024", ErrConfig, c.MaxBody)
	case c.MaxGroups < 1 || c.MaxCompletions < 1 || c.MaxCompletionBytes < 1 || c.MaxStates < 1:
		return fmt.Errorf("%w: MaxGroups, MaxCompletions, MaxCompletionBytes and MaxStates must be ≥ 1", ErrConfig)
	case c.MaxInFlight < 1 || c.Parallel < 1 || c.Cache < 1 || c.SnapshotEvery < 1:
		return fmt.Errorf("%w: MaxInFlight, Parallel, Cache and SnapshotEvery must be ≥ 1", ErrConfig)
	case c.TextBytes < 0:
		return fmt.Errorf("%w: TextBytes = %d, want ≥ 0", ErrConfig, c.TextBytes)
	case c.Loop.WMRL != nil || c.Loop.HeldOutTask || c.Loop.Trigger != nil:
		return fmt.Errorf("%w: WMRL, HeldOutTask and Trigger are not served", ErrConfig)
	case c.Loop.RolloutEvery != 1:
		return fmt.Errorf("%w: Loop.RolloutEvery = %d, want 1 (a scored request is a rollout)", ErrConfig, c.Loop.RolloutEvery)
	}
	if err := c.Loop.Validate(); err != nil {
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
	// Not needed when Loop.Calibration is Static (evaluation then fails).
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
