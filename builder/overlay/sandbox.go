package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/grader"
	"github.com/lm2lm/lm2lm/records"
)

// SandboxConfig parameterises a SandboxRunner: the training script's
// command line and the sandbox (grader.Sandbox) each run of an overlaid
// copy goes through.
type SandboxConfig struct {
	// Command is the training script's command line, e.g.
	// {"/usr/bin/python3", "train.py"}; the job file and result file paths
	// are appended as the last two arguments (the subprocess protocol).
	// Command[0] must be an absolute path outside /tmp, /var/tmp,
	// /dev/shm, /run and the Hide paths; a relative script path names the
	// run's copy. Required.
	Command []string
	// Env holds "NAME=value" entries added to the sandbox's minimal
	// environment (PATH=/usr/bin:/bin, HOME and TMPDIR the run's copy,
	// LANG=C.UTF-8). Nothing else of this process's environment reaches a
	// run. Default none.
	Env []string
	// ReadOnly lists the host paths a run reads: the task's data (for
	// examples/pytorch, the corpus the job spec names). Each is bound
	// read-only at its own path, even below /tmp. Default none: a run then
	// sees only what its user may read outside the private directories.
	ReadOnly []string
	// Hide lists host paths a run must not see (held-out data, reference
	// results, the code directory the copies are made from, keys): each
	// is masked, a directory by an empty one, a file by an empty file.
	Hide []string
	// Timeout bounds one run; past it the run is killed and is a timeout
	// (builder.ErrInfeasible and builder.ErrTimedOut). 0 = the caller's
	// ctx only (the smoke test has SmokeTimeout). Default 0.
	Timeout time.Duration
	// LogTail is how many bytes of the run's stdout and stderr are kept;
	// default 8 KiB.
	LogTail int
	// Limits are the sandbox's memory, process, CPU, file-size and inode
	// limits and its user range (grader.DefaultSandboxConfig; its Timeout
	// is not used: see Timeout). Isolate and RequireIsolation must be
	// true: a SandboxRunner never runs without the whole sandbox.
	Limits grader.SandboxConfig
	// Eval, when set, is the trusted measurement of every run: the loss
	// (and gain) recorded is the evaluator's, not the script's. Default
	// nil: the script measures itself (docs/code-builder.md).
	Eval *EvalConfig
}

// EvalConfig is a fixed evaluator that measures a sandboxed run from the
// checkpoint it wrote, as a sandboxed step of its own (METHOD.md §1
// Vocabulary: the loss ℓ of a run, g = b_e − ℓ). The training run is given
// the path of its checkpoint in the environment (CheckpointEnv) and never
// sees the held-out data (ReadOnly is hidden from it); the evaluator runs
// in a fresh directory holding a copy of Code (never the overlaid copy, so
// no overlay can change it), the checkpoint and the job file, with the
// held-out data bound read-only, under the same limits and with no
// network, and writes a result file {"loss", "gain"?} under the subprocess
// protocol (exit 3 with {"infeasible"} when the checkpoint cannot be
// evaluated, e.g. it does not fit the task's model).
type EvalConfig struct {
	// Command is the evaluator's command line, e.g. {"/usr/bin/python3",
	// "evaluate.py"}; a relative script names the evaluator's copy of Code.
	// The job file and result file paths are appended. Required.
	Command []string
	// Code is the directory the evaluator's copy is made from (regular
	// files and directories only). Required.
	Code string
	// Checkpoint is the plain file name the training run writes its
	// checkpoint to, in its copy (CheckpointEnv holds its path). Default
	// "lm2lm-checkpoint".
	Checkpoint string
	// CheckpointMax bounds the checkpoint, in bytes; default 1 GiB
	// (library choice: the weights of a small model). A larger one is
	// infeasible.
	CheckpointMax int64
	// ReadOnly are the paths only the evaluator reads (the held-out
	// data): bound read-only for it, hidden from every training run.
	ReadOnly []string
	// Timeout bounds one evaluation; 0 = the run's ctx only.
	Timeout time.Duration
}

// CheckpointEnv names the environment variable that tells a training run,
// and then the evaluator, the checkpoint's path.
const CheckpointEnv = "LM2LM_CHECKPOINT"

// ErrNoCheckpoint: a run measured by an evaluator left no usable
// checkpoint (none, not a regular file, or larger than CheckpointMax).
// The run is infeasible: the overlay broke the script's contract.
var ErrNoCheckpoint = errors.New("overlay: no checkpoint for the evaluator")

// validate checks e and fills its defaults.
func (e *EvalConfig) validate() error {
	switch {
	case len(e.Command) == 0 || !filepath.IsAbs(e.Command[0]):
		return fmt.Errorf("overlay: EvalConfig.Command = %q, want an absolute program path first", e.Command)
	case e.Code == "":
		return errors.New("overlay: EvalConfig.Code is required")
	case e.CheckpointMax < 0 || e.Timeout < 0:
		return fmt.Errorf("overlay: EvalConfig.CheckpointMax = %d, Timeout = %v, want ≥ 0", e.CheckpointMax, e.Timeout)
	}
	if e.Checkpoint == "" {
		e.Checkpoint = "lm2lm-checkpoint"
	}
	if e.CheckpointMax == 0 {
		e.CheckpointMax = 1 << 30
	}
	if k := e.Checkpoint; k == "." || k == ".." || strings.ContainsRune(k, '/') || k == JobFileName || k == ResultFileName {
		return fmt.Errorf("overlay: EvalConfig.Checkpoint = %q, want a plain file name other than the job and result files", k)
	}
	if _, err := walk(e.Code); err != nil {
		return fmt.Errorf("overlay: EvalConfig.Code: %w", err)
	}
	return nil
}

// DefaultSandboxConfig returns the defaults documented on SandboxConfig;
// Command must still be set.
func DefaultSandboxConfig() SandboxConfig {
	return SandboxConfig{LogTail: 8 << 10, Limits: grader.DefaultSandboxConfig()}
}

// Validate reports the first problem with c.
func (c SandboxConfig) Validate() error {
	switch {
	case len(c.Command) == 0 || !filepath.IsAbs(c.Command[0]):
		return fmt.Errorf("overlay: SandboxConfig.Command = %q, want an absolute program path first", c.Command)
	case c.Timeout < 0:
		return fmt.Errorf("overlay: SandboxConfig.Timeout = %v, want ≥ 0", c.Timeout)
	case c.LogTail < 1:
		return fmt.Errorf("overlay: SandboxConfig.LogTail = %d, want ≥ 1", c.LogTail)
	case !c.Limits.Isolate || !c.Limits.RequireIsolation:
		return errors.New("overlay: SandboxConfig.Limits must have Isolate and RequireIsolation (a SandboxRunner fails closed; ExecutorConfig.Unsandboxed is the explicit way to run without)")
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("overlay: SandboxConfig.Env entry %q is not NAME=value", e)
		}
	}
	if c.Eval != nil {
		ev := *c.Eval
		if err := ev.validate(); err != nil {
			return err
		}
	}
	return c.Limits.Validate()
}

// The job and result files of a sandboxed run, in the run's copy.
const (
	JobFileName    = "lm2lm-job.json"
	ResultFileName = "lm2lm-result.json"
)

// SandboxRunner runs each job of an overlaid copy in grader.Sandbox, the
// sandbox the grader runs solutions in (docs/sandbox.md). Its Runner
// method is an ExecutorConfig.Runner. What a run gets, on a host that
// gives the whole sandbox (root, PID/network/mount/IPC namespaces, cgroup
// v1 or v2 memory and pids controllers), which every run requires (else
// it fails with an error wrapping grader.ErrIsolation and nothing runs):
//
//   - a user id of its own (from Limits.UIDFirst), no supplementary
//     groups, no_new_privs, a session of its own with no terminal;
//   - no network at all (a network namespace with no interface up);
//   - a file system that is read-only everywhere but in its copy of the
//     code (a private tmpfs of at most Limits.Memory bytes and
//     Limits.Inodes files beyond the copy) and a private /tmp, /var/tmp,
//     /dev/shm and /run; ReadOnly bound read-only, Hide masked over
//     everything (below /tmp or elsewhere, inside a ReadOnly folder too;
//     a path that cannot be masked fails the run);
//   - cgroup limits on the memory of the whole run (Limits.Memory: a run
//     killed for memory is infeasible, ErrOverMemory), its processes and
//     threads (Limits.Processes), and its CPU share and cap where the
//     host gives the cpu controller; RLIMIT_FSIZE, no core dumps;
//   - a wall-clock limit (Timeout), and every process of the run killed
//     when it ends;
//   - a minimal environment (Env, and no variable of this process).
//
// What it does not guarantee: a system-call filter (a kernel bug is a way
// out); a file-system view narrower than what the run's user may read
// outside the masked and private paths (/usr, /etc, world-readable
// files); a device boundary (/dev is the host's, on a read-only mount:
// device nodes open as their modes allow, so a GPU whose nodes every user
// may open is usable, and so is any other such device; there is no
// device cgroup); and, without Eval, a trusted measurement: the overlaid
// script computes and writes its own validation loss. With Eval the loss
// and gain recorded are the evaluator's, measured from the checkpoint the
// run wrote on held-out data the run never saw (EvalConfig;
// docs/code-builder.md, A loss the overlay cannot forge). Files the run
// writes are gone with it, except the result file (and the checkpoint,
// handed to the evaluator).
type SandboxRunner struct {
	cfg SandboxConfig
	sb  *grader.Sandbox
}

// NewSandboxRunner checks cfg and returns a SandboxRunner. It does not
// probe the host: Probe does, and every run requires the whole sandbox.
func NewSandboxRunner(cfg SandboxConfig) (*SandboxRunner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lim := cfg.Limits
	lim.Timeout = 0 // the run's ctx carries Timeout, as builder.ErrTimedOut
	sb, err := grader.NewSandbox(lim)
	if err != nil {
		return nil, err
	}
	cfg.Command = append([]string(nil), cfg.Command...)
	if cfg.Eval != nil {
		ev := *cfg.Eval
		_ = ev.validate() // checked above; fills the defaults
		ev.Command, ev.ReadOnly = slices.Clone(ev.Command), slices.Clone(ev.ReadOnly)
		cfg.Eval = &ev
	}
	return &SandboxRunner{cfg: cfg, sb: sb}, nil
}

// Probe reports what a run would get on this host now; under the
// required isolation, an error wrapping grader.ErrIsolation names what
// the host cannot give.
func (r *SandboxRunner) Probe(ctx context.Context) (grader.Isolation, error) {
	return r.sb.Probe(ctx)
}

// Runner returns the executor of the runs whose copy is dir: an
// ExecutorConfig.Runner.
func (r *SandboxRunner) Runner(dir string) (builder.Executor, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("overlay: run directory %q is not absolute", dir)
	}
	return &sandboxedRun{r: r, dir: dir}, nil
}

// ErrOverMemory: the kernel killed a process of a sandboxed run for
// exceeding SandboxConfig.Limits.Memory. The run is infeasible: memory is
// part of the task's budget, as time is.
var ErrOverMemory = errors.New("overlay: the run exceeded its memory limit")

// sandboxedRun is the executor of one copy's runs.
type sandboxedRun struct {
	r   *SandboxRunner
	dir string
}

// Execute runs j in the sandbox under the subprocess protocol: it writes
// the job file into the copy, runs the command there, and reads the
// result file the run left (copied back out of the run's tmpfs, at most
// builder.MaxResultBytes+1 bytes, a regular file only). A timeout, a run
// killed for memory and an infeasible exit are infeasible outcomes; a
// death by another signal, another exit code or an unusable result is
// builder.ErrFailed, as for builder.Subprocess; a host that cannot give
// the sandbox is builder.ErrFailed wrapping grader.ErrIsolation.
func (x *sandboxedRun) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	if ctx.Err() != nil {
		return builder.DoneOutcome(ctx, j, records.Cost{}, "")
	}
	cfg := x.r.cfg
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = builder.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	jobPath, resultPath := filepath.Join(x.dir, JobFileName), filepath.Join(x.dir, ResultFileName)
	if err := os.Remove(resultPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "clear result file", Err: err}
	}
	if err := builder.WriteJobFile(jobPath, j, resultPath); err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "write job file", Err: err}
	}
	tail := builder.NewTail(cfg.LogTail)
	run, err := x.command(jobPath, resultPath, tail)
	if err != nil {
		return builder.Outcome{}, err
	}
	res, err := x.r.sb.Run(ctx, run)
	slots := max(j.Slots, 1)
	wall := res.Wall.Seconds()
	measured := records.Cost{WallSeconds: wall, DeviceSeconds: wall * float64(slots)}
	log := tail.String()
	switch {
	case ctx.Err() != nil:
		return builder.DoneOutcome(ctx, j, measured, log)
	case errors.Is(err, grader.ErrIsolation):
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "sandbox unavailable", Err: err}
	case err != nil:
		return builder.Outcome{Cost: measured, Log: log}, &builder.RunError{Class: builder.ErrFailed, Reason: "sandbox", Log: log, Err: err}
	case res.OOMKills > 0:
		reason := fmt.Sprintf("exceeded the memory limit of %d bytes", cfg.Limits.Memory)
		return builder.Outcome{Infeasible: reason, Seeds: []uint64{j.Seed}, Cost: measured, Log: log},
			&builder.RunError{Class: builder.ErrInfeasible, Reason: reason, Log: log, Err: ErrOverMemory}
	case res.Signal != 0:
		return builder.Outcome{Cost: measured, Log: log}, &builder.RunError{Class: builder.ErrFailed,
			Reason: "killed by signal " + res.Signal.String(), Log: log}
	}
	resultBytes, rerr := builder.ReadResultFile(resultPath)
	if res.ExitCode != 0 {
		e := builder.ExitError(res.ExitCode, builder.InfeasibleReason(resultBytes), log)
		if errors.Is(e, builder.ErrInfeasible) {
			return builder.Outcome{Infeasible: e.Reason, Cost: measured, Log: log, Seeds: []uint64{j.Seed}}, e
		}
		return builder.Outcome{Cost: measured, Log: log}, e
	}
	if rerr != nil {
		return builder.Outcome{Cost: measured, Log: log}, &builder.RunError{Class: builder.ErrFailed, Reason: "no result file", Log: log,
			Err: fmt.Errorf("%w: %w", builder.ErrBadResult, rerr)}
	}
	r, err := builder.ParseResult(resultBytes)
	if err != nil {
		return builder.Outcome{Cost: measured, Log: log}, &builder.RunError{Class: builder.ErrFailed, Reason: "parse result", Log: log, Err: err}
	}
	if cfg.Eval == nil || r.Infeasible != "" {
		return r.Outcome(j, measured, log)
	}
	return x.evaluated(ctx, j, r, measured, log)
}

// command is the sandboxed run of the copy's command on the job file
// jobPath, writing resultPath, its output to tail. With an evaluator it
// hides the held-out data from the run and keeps the checkpoint beside the
// result, clearing one an earlier run left.
func (x *sandboxedRun) command(jobPath, resultPath string, tail *builder.Tail) (grader.Command, error) {
	cfg := x.r.cfg
	args := append(append([]string(nil), cfg.Command[1:]...), jobPath, resultPath)
	run := grader.Command{Path: cfg.Command[0], Args: args, Dir: x.dir, Env: cfg.Env,
		ReadOnly: cfg.ReadOnly, Hide: cfg.Hide, Keep: []string{ResultFileName}, KeepMax: builder.MaxResultBytes,
		Stdout: tail, Stderr: tail}
	if ev := cfg.Eval; ev != nil {
		// The held-out data is the evaluator's alone; the checkpoint
		// comes back beside the result.
		run.Env = append(slices.Clone(cfg.Env), CheckpointEnv+"="+filepath.Join(x.dir, ev.Checkpoint))
		run.Hide = append(slices.Clone(cfg.Hide), ev.ReadOnly...)
		run.Keep = append(run.Keep, ev.Checkpoint)
		run.KeepMax = max(run.KeepMax, ev.CheckpointMax)
		if err := os.Remove(filepath.Join(x.dir, ev.Checkpoint)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return run, &builder.RunError{Class: builder.ErrTransient, Reason: "clear checkpoint", Err: err}
		}
	}
	return run, nil
}

// evaluated is the outcome of j whose run reported r, measured so far as
// measured with log: the evaluator (evaluate) measures the checkpoint,
// and its loss and gain replace the script's, which are its own word; its
// time joins the cost and its log the run's.
func (x *sandboxedRun) evaluated(ctx context.Context, j builder.Job, r builder.Result, measured records.Cost, log string) (builder.Outcome, error) {
	ev, wall, evLog, err := x.evaluate(ctx, j)
	measured.WallSeconds += wall
	measured.DeviceSeconds += wall * float64(max(j.Slots, 1))
	log = fmt.Sprintf("%s\n[evaluator] %s", log, evLog)
	if err != nil {
		var re *builder.RunError
		if errors.As(err, &re) {
			re.Log = log
		}
		if errors.Is(err, builder.ErrInfeasible) {
			return builder.Outcome{Infeasible: re.Reason, Seeds: []uint64{j.Seed}, Cost: measured, Log: log}, err
		}
		if ctx.Err() != nil {
			return builder.DoneOutcome(ctx, j, measured, log)
		}
		return builder.Outcome{Cost: measured, Log: log}, err
	}
	if r.Loss != nil && *r.Loss != *ev.Loss {
		log = fmt.Sprintf("%s\n[evaluator] the script reported loss %g; the evaluator measured %g", log, *r.Loss, *ev.Loss)
	}
	r.Loss, r.Gain = ev.Loss, ev.Gain
	r.Cost.WallSeconds, r.Cost.DeviceSeconds = 0, 0 // the executor's measurement, evaluation included
	return r.Outcome(j, measured, log)
}

// evaluate measures the run of j whose checkpoint x's copy holds with the
// evaluator (SandboxConfig.Eval) in a sandboxed run of its own, and
// returns its result (a loss, maybe a gain), its wall time and its log.
// A missing or oversized checkpoint, and an evaluator that reports the
// checkpoint infeasible, are builder.ErrInfeasible; an evaluator that
// fails otherwise is builder.ErrFailed.
func (x *sandboxedRun) evaluate(ctx context.Context, j builder.Job) (builder.Result, float64, string, error) {
	cfg := x.r.cfg
	ev := cfg.Eval
	infeasible := func(reason string, err error) (builder.Result, float64, string, error) {
		return builder.Result{}, 0, reason, &builder.RunError{Class: builder.ErrInfeasible, Reason: reason, Err: err}
	}
	failed := func(reason string, err error) (builder.Result, float64, string, error) {
		return builder.Result{}, 0, reason, &builder.RunError{Class: builder.ErrFailed, Reason: reason, Err: err}
	}
	ckpt := filepath.Join(x.dir, ev.Checkpoint)
	fi, err := os.Lstat(ckpt)
	switch {
	case err != nil || !fi.Mode().IsRegular():
		return infeasible("the run left no checkpoint "+ev.Checkpoint, ErrNoCheckpoint)
	case fi.Size() > ev.CheckpointMax:
		return infeasible(fmt.Sprintf("the checkpoint is larger than %d bytes", ev.CheckpointMax), ErrNoCheckpoint)
	}
	dir, err := os.MkdirTemp(filepath.Dir(x.dir), "lm2lm-eval-")
	if err != nil {
		return failed("make evaluation directory", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return failed("make evaluation directory", err)
	}
	if _, err := copyTree(ev.Code, dir, nil); err != nil {
		return failed("copy the evaluator", err)
	}
	// The checkpoint is data to the evaluator, never code: the
	// evaluator decides how to read it.
	if err := os.Rename(ckpt, filepath.Join(dir, ev.Checkpoint)); err != nil {
		return failed("move the checkpoint", err)
	}
	if ev.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = builder.WithTimeout(ctx, ev.Timeout)
		defer cancel()
	}
	jobPath, resultPath := filepath.Join(dir, JobFileName), filepath.Join(dir, ResultFileName)
	if err := builder.WriteJobFile(jobPath, j, resultPath); err != nil {
		return failed("write the evaluator's job file", err)
	}
	tail := builder.NewTail(cfg.LogTail)
	args := append(append([]string(nil), ev.Command[1:]...), jobPath, resultPath)
	res, err := x.r.sb.Run(ctx, grader.Command{Path: ev.Command[0], Args: args, Dir: dir,
		Env:      append(slices.Clone(cfg.Env), CheckpointEnv+"="+filepath.Join(dir, ev.Checkpoint)),
		ReadOnly: ev.ReadOnly, Hide: cfg.Hide, Keep: []string{ResultFileName}, KeepMax: builder.MaxResultBytes,
		Stdout: tail, Stderr: tail})
	wall, log := res.Wall.Seconds(), tail.String()
	fail := func(class error, reason string, err error) (builder.Result, float64, string, error) {
		return builder.Result{}, wall, log, &builder.RunError{Class: class, Reason: "evaluator: " + reason, Err: err}
	}
	switch {
	case ctx.Err() != nil:
		return fail(builder.ErrFailed, "cancelled or past its time", ctx.Err())
	case err != nil:
		return fail(builder.ErrFailed, "sandbox", err)
	case res.OOMKills > 0:
		return fail(builder.ErrInfeasible, fmt.Sprintf("exceeded the memory limit of %d bytes", cfg.Limits.Memory), ErrOverMemory)
	case res.Signal != 0:
		return fail(builder.ErrFailed, "killed by signal "+res.Signal.String(), nil)
	}
	b, rerr := builder.ReadResultFile(resultPath)
	if res.ExitCode != 0 {
		e := builder.ExitError(res.ExitCode, builder.InfeasibleReason(b), log)
		return fail(e.Class, e.Reason, e.Err)
	}
	if rerr != nil {
		return fail(builder.ErrFailed, "no result file", fmt.Errorf("%w: %w", builder.ErrBadResult, rerr))
	}
	r, err := builder.ParseResult(b)
	if err == nil && (r.Infeasible != "" || r.Loss == nil) {
		err = fmt.Errorf("%w: the evaluator's result has no loss", builder.ErrBadResult)
	}
	if err != nil {
		return fail(builder.ErrFailed, "parse result", err)
	}
	return r, wall, log, nil
}
