package overlay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/grader"
	"github.com/lm2lm/lm2lm/records"
)

// SpecVersion is the version of the job spec envelope an overlay job
// carries (Spec).
const SpecVersion = 1

// Spec is the job spec of an overlay job: the code to copy and its digest,
// the overlay to apply and its digest and diff, who wrote it, and the inner
// spec (the base builder's, which the training script reads as its spec).
// An executor that does not know this envelope hands it to the script as
// its spec, which a script fails to read: an overlay job never runs
// silently on the unchanged code.
type Spec struct {
	Overlay  int             `json:"lm2lm_overlay"` // SpecVersion
	Code     string          `json:"code"`          // the code directory copied for each run
	Digest   string          `json:"digest"`        // its digest (Digest) when the job was built
	Files    []File          `json:"files"`         // the overlay; none for the unchanged code
	OvDigest string          `json:"overlay_digest,omitempty"`
	Diff     string          `json:"diff,omitempty"`
	Builder  string          `json:"builder,omitempty"`
	Inner    json.RawMessage `json:"spec,omitempty"`
}

// ParseSpec reads an overlay job's spec; ok is false when raw is not one
// (no lm2lm_overlay field), err reports a malformed one.
func ParseSpec(raw json.RawMessage) (s Spec, ok bool, err error) {
	var probe struct {
		V *int `json:"lm2lm_overlay"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &probe) != nil || probe.V == nil {
		return Spec{}, false, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return Spec{}, true, fmt.Errorf("overlay: job spec: %w", err)
	}
	if s.Overlay != SpecVersion {
		return Spec{}, true, fmt.Errorf("overlay: job spec version %d, want %d", s.Overlay, SpecVersion)
	}
	if len(s.Files) > 0 && (Overlay{Files: s.Files}).Digest() != s.OvDigest {
		return Spec{}, true, fmt.Errorf("overlay: job spec: the files do not match their digest %s", records.Excerpt(s.OvDigest))
	}
	return s, true, nil
}

// ExecutorConfig parameterises NewExecutor.
type ExecutorConfig struct {
	// Runner returns the executor of one run whose working directory is
	// dir, a private copy of the overlaid code (SandboxRunner.Runner,
	// SubprocessRunner). nil = the default: a SandboxRunner over Sandbox,
	// which NewExecutor probes (below). A Runner given here is the
	// caller's explicit choice, and what a run may do is what its
	// executor guarantees (docs/code-builder.md, Sandboxing).
	Runner func(dir string) (builder.Executor, error)
	// Sandbox configures the default runner (Runner nil): the training
	// script's command line, the task's data it reads, what it must not
	// see, and the sandbox's limits. Sandbox.Command is then required.
	// Whatever the runner, a Sandbox.Hide path inside the code directory
	// is left out of each run's copy (it still counts in the code's
	// digest).
	Sandbox SandboxConfig
	// Unsandboxed allows the default runner to fall back to
	// SubprocessRunner (Sandbox.Command, Env, Timeout and LogTail, with
	// builder.Subprocess's guarantees only: no file-system, network, user
	// or memory boundary) when this host cannot give the sandbox (not
	// root, no namespaces, no cgroups). Default false: NewExecutor then
	// fails with an error wrapping grader.ErrIsolation (fail closed).
	Unsandboxed bool
	// Plain runs jobs that are not overlay jobs (reference runs, catalogue
	// changes); nil = such a job fails with ErrNotOverlayJob.
	Plain builder.Executor
	// TempDir is where the private copies are made; "" = os.TempDir().
	TempDir string
	// KeepDirs keeps the copies (for debugging). Default false.
	KeepDirs bool
}

// Executor runs overlay jobs: for each run it copies the code into a
// private directory, checks that the copy has the digest the job was built
// against, writes the overlay's files, runs the job (with its inner spec)
// through the Runner's executor in that directory, sets Outcome.Code so
// that the record names the code, and removes the copy. It is safe for
// concurrent use.
type Executor struct {
	cfg       ExecutorConfig
	sandboxed bool
	iso       grader.Isolation
}

var _ builder.Executor = (*Executor)(nil)

// probeTimeout bounds NewExecutor's probe of the sandbox.
const probeTimeout = 30 * time.Second

// NewExecutor checks cfg and returns an Executor. With no Runner it
// probes the sandbox (grader.Sandbox.Probe: the namespaces, mounts, user
// and cgroups of a run set up, nothing started; a few tens of
// milliseconds) and runs every overlaid copy through a SandboxRunner over
// cfg.Sandbox. A host that cannot give the whole sandbox is an error
// wrapping grader.ErrIsolation, unless cfg.Unsandboxed allows
// SubprocessRunner instead (Sandboxed then reports false).
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	e := &Executor{cfg: cfg}
	if cfg.Runner != nil {
		return e, nil
	}
	sr, err := NewSandboxRunner(cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	iso, err := sr.Probe(ctx)
	switch {
	case err == nil:
		e.cfg.Runner, e.sandboxed, e.iso = sr.Runner, true, iso
		return e, nil
	case !errors.Is(err, grader.ErrIsolation) || !cfg.Unsandboxed:
		return nil, fmt.Errorf("overlay: the default runner's sandbox: %w", err)
	}
	sc := builder.DefaultSubprocessConfig()
	sc.Command, sc.Env, sc.Timeout, sc.LogTail = cfg.Sandbox.Command, cfg.Sandbox.Env, cfg.Sandbox.Timeout, cfg.Sandbox.LogTail
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	e.cfg.Runner = SubprocessRunner(sc)
	return e, nil
}

// Sandboxed reports whether the executor runs overlaid copies through the
// sandbox it made itself (ExecutorConfig.Runner nil, the host able), and
// what the probe found then. It is false for a Runner the caller gave
// and for the Unsandboxed fallback.
func (e *Executor) Sandboxed() (grader.Isolation, bool) { return e.iso, e.sandboxed }

// SubprocessRunner returns a Runner that runs each job with
// builder.Subprocess under cfg, its working directory the run's copy (a
// relative script path in cfg.Command, e.g. {"/usr/bin/python3",
// "train.py"}, names the overlaid script). What it guarantees is
// Subprocess's: a fixed command line, a minimal environment, a process
// group and (on Linux) a subreaper that kill everything the run started,
// and a time limit; not a file-system, network or user boundary.
func SubprocessRunner(cfg builder.SubprocessConfig) func(dir string) (builder.Executor, error) {
	return func(dir string) (builder.Executor, error) {
		c := cfg
		c.Dir = dir
		return builder.NewSubprocess(c)
	}
}

// Execute runs j. A job that is not an overlay job goes to Plain. A
// malformed overlay job, or a code directory whose digest is no longer the
// job's, is builder.ErrFailed (nothing ran: the job cannot be run as
// built); an overlay that cannot be applied to the copy is
// builder.ErrInfeasible. Otherwise it returns what the Runner's executor
// returns, with Outcome.Code set.
func (e *Executor) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	s, ok, err := ParseSpec(j.Spec)
	if err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "bad overlay job", Err: err}
	}
	if !ok {
		if e.cfg.Plain == nil {
			return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "no executor for plain jobs", Err: ErrNotOverlayJob}
		}
		return e.cfg.Plain.Execute(ctx, j)
	}
	if err := ctx.Err(); err != nil {
		return builder.Outcome{}, builder.DoneError(ctx, "")
	}
	dir, err := os.MkdirTemp(e.cfg.TempDir, "lm2lm-overlay-")
	if err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "make run directory", Err: err}
	}
	if !e.cfg.KeepDirs {
		defer os.RemoveAll(dir)
	}
	// The copy is world-readable so that a runner that drops to a user of
	// the run's own can read it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "make run directory", Err: err}
	}
	got, err := copyTree(s.Code, dir, hiddenBelow(s.Code, e.cfg.Sandbox.Hide))
	if err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "copy code", Err: err}
	}
	if got != s.Digest {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "code changed since the job was built",
			Err: fmt.Errorf("%w: %s has digest %s, the job was built against %s", ErrBadCode, s.Code, got, s.Digest)}
	}
	if err := applyFiles(dir, Overlay{Files: s.Files}); err != nil {
		return builder.Outcome{Infeasible: "overlay cannot be applied", Seeds: []uint64{j.Seed}},
			&builder.RunError{Class: builder.ErrInfeasible, Reason: "overlay cannot be applied", Err: err}
	}
	run, err := e.cfg.Runner(dir)
	if err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "runner", Err: err}
	}
	inner := j
	inner.Spec = s.Inner
	out, err := run.Execute(ctx, inner)
	if len(s.Files) > 0 {
		out.Code = &records.Code{Digest: s.Digest, Overlay: s.OvDigest, Diff: s.Diff, Builder: s.Builder}
	}
	return out, err
}
