package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/records"
)

// SubprocessConfig parameterises NewSubprocess.
type SubprocessConfig struct {
	// Command is the training script's command line, e.g.
	// {"/usr/bin/python3", "train.py"}; the job file and result file paths
	// are appended as the last two arguments. It is fixed by configuration
	// and never built from proposal text. Required; Command[0] is looked up
	// in PATH when it holds no slash.
	Command []string
	// Dir is the script's working directory; "" = the job's private
	// directory. Library choice: the private directory keeps concurrent
	// runs from writing over each other's files.
	Dir string
	// TempDir is where private job directories are made; "" = os.TempDir().
	TempDir string
	// PassEnv names the variables copied from this process's environment
	// besides PATH and HOME (allow-list; library choice: a proposal's run
	// must not see API keys or other secrets by accident). Default none.
	PassEnv []string
	// Env holds extra "NAME=value" entries set for the script. Default none.
	Env []string
	// Timeout stops a run after this long, as a timeout (ErrInfeasible and
	// ErrTimedOut); 0 = no limit of the executor's own. Default 0.
	Timeout time.Duration
	// KillGrace is how long the process group has between SIGTERM and
	// SIGKILL on cancel or timeout. Default 2 s (library choice: long enough
	// to flush a log line, short enough not to hold a device slot).
	KillGrace time.Duration
	// LogTail is how many bytes of the script's combined stdout and stderr
	// are kept for Outcome.Log. Default 8 KiB.
	LogTail int
	// KeepDirs keeps the private job directories (for debugging). Default
	// false.
	KeepDirs bool
	// LogDir, when set, keeps every run's whole combined stdout and stderr
	// at LogPath(LogDir, job) (Outcome.LogFile), written as the run goes;
	// a retried attempt replaces it. Default "" (only the tail is kept).
	LogDir string
	// NoReaper runs the script directly instead of under a reaper. By
	// default (false), on Linux, the script runs under a re-execution of
	// this process's own binary that is a child subreaper (prctl(2)
	// PR_SET_CHILD_SUBREAPER, see doc.go): descendants that leave the
	// script's process group (setsid, double forks) are still killed when
	// the script ends or is stopped. Other systems have no reaper: there
	// only the process group is killed. Library choice: a run must not
	// leave processes holding devices behind; NoReaper is for hosts whose
	// binary must not be re-executed.
	NoReaper bool
}

// DefaultSubprocessConfig returns the defaults; Command must still be set.
func DefaultSubprocessConfig() SubprocessConfig {
	return SubprocessConfig{KillGrace: 2 * time.Second, LogTail: 8 << 10}
}

// Validate reports the first problem with c.
func (c SubprocessConfig) Validate() error {
	switch {
	case len(c.Command) == 0 || c.Command[0] == "":
		return errors.New("builder: SubprocessConfig.Command is empty")
	case c.Timeout < 0:
		return fmt.Errorf("builder: SubprocessConfig.Timeout = %v, want ≥ 0", c.Timeout)
	case c.KillGrace <= 0:
		return fmt.Errorf("builder: SubprocessConfig.KillGrace = %v, want > 0", c.KillGrace)
	case c.LogTail < 1:
		return fmt.Errorf("builder: SubprocessConfig.LogTail = %d, want ≥ 1", c.LogTail)
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("builder: SubprocessConfig.Env entry %q is not NAME=value", e)
		}
	}
	return nil
}

// EnvName reports whether s is a portable environment variable name:
// letters, digits and '_', not starting with a digit.
func EnvName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// MinimalEnv returns the environment of a training script: PATH and HOME
// and the variables named in pass, copied from environ (in the form of
// os.Environ) when set there, followed by extra ("NAME=value"). The result
// is never nil, so that it can be given to exec.Cmd.Env as is (a nil Env
// would pass on this process's whole environment).
func MinimalEnv(environ, pass, extra []string) []string {
	allow := map[string]bool{"PATH": true, "HOME": true}
	for _, n := range pass {
		allow[n] = true
	}
	// Never nil: os/exec gives a command with a nil Env this process's
	// whole environment.
	env := make([]string, 0, len(allow)+len(extra))
	for _, kv := range environ {
		if k, _, ok := strings.Cut(kv, "="); ok && allow[k] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Subprocess runs jobs as child processes speaking the subprocess protocol
// (see doc.go). It is safe for concurrent use; it does not limit
// concurrency itself (wrap it in a Pool).
type Subprocess struct {
	cfg  SubprocessConfig
	path string // resolved Command[0]
	now  func() time.Time
}

var _ Executor = (*Subprocess)(nil)

// NewSubprocess returns an executor for cfg.
func NewSubprocess(cfg SubprocessConfig) (*Subprocess, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := exec.LookPath(cfg.Command[0])
	if err != nil {
		return nil, fmt.Errorf("builder: subprocess command: %w", err)
	}
	cfg.Command = append([]string(nil), cfg.Command...)
	return &Subprocess{cfg: cfg, path: p, now: time.Now}, nil
}

// Execute runs j: it writes the job file into a fresh private directory,
// starts the command in its own process group with a minimal environment
// (under the reaper unless NoReaper), waits, and reads the result file
// without blocking (see ReadResultFile). On cancel or timeout the whole
// process group gets SIGTERM, then SIGKILL after KillGrace; when the script
// exits, anything left in its group, and under the reaper every descendant
// wherever it went, is killed too.
func (s *Subprocess) Execute(ctx context.Context, j Job) (Outcome, error) {
	if ctx.Err() != nil {
		return DoneOutcome(ctx, j, records.Cost{}, "")
	}
	if s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	dir, err := os.MkdirTemp(s.cfg.TempDir, "lm2lm-job-")
	if err != nil {
		return Outcome{}, &RunError{Class: ErrTransient, Reason: "make job directory", Err: err}
	}
	if !s.cfg.KeepDirs {
		defer os.RemoveAll(dir)
	}
	jobPath, resultPath := filepath.Join(dir, "job.json"), filepath.Join(dir, "result.json")
	if err := WriteJobFile(jobPath, j, resultPath); err != nil {
		return Outcome{}, &RunError{Class: ErrTransient, Reason: "write job file", Err: err}
	}

	tail := NewTail(s.cfg.LogTail)
	if s.cfg.LogDir == "" {
		return s.run(ctx, j, dir, tail, tail)
	}
	f, err := CreateLog(s.cfg.LogDir, j)
	if err != nil {
		return Outcome{}, &RunError{Class: ErrTransient, Reason: "create log file", Err: err}
	}
	defer f.Close()
	o, err := s.run(ctx, j, dir, teeWriter{tail, f}, tail)
	o.LogFile = f.Name()
	return o, err
}

// run runs the command on the job files in dir, its output to out, of
// which tail keeps the end.
func (s *Subprocess) run(ctx context.Context, j Job, dir string, out io.Writer, tail *Tail) (Outcome, error) {
	jobPath, resultPath := filepath.Join(dir, "job.json"), filepath.Join(dir, "result.json")
	args := append(append([]string(nil), s.cfg.Command[1:]...), jobPath, resultPath)
	path, args, reaperEnv, reaped := s.path, args, []string(nil), false
	if !s.cfg.NoReaper {
		path, args, reaperEnv, reaped = reaperCommand(s.path, args, s.cfg.KillGrace)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = s.cfg.Dir
	if cmd.Dir == "" {
		cmd.Dir = dir
	}
	cmd.Env = append(MinimalEnv(os.Environ(), s.cfg.PassEnv, s.cfg.Env), reaperEnv...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child that outlives the script and holds its output open must not
	// keep Wait from returning; the group kill below then ends it.
	cmd.WaitDelay = s.cfg.KillGrace
	start := s.now()
	if err := cmd.Start(); err != nil {
		class := ErrFailed // e.g. a missing or non-executable command
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ETXTBSY) {
			// Out of processes or memory, or a script being replaced:
			// the host's state, which a retry may find changed.
			class = ErrTransient
		}
		fmt.Fprintf(out, "lm2lm: start %s: %v\n", s.cfg.Command[0], err)
		return Outcome{Log: tail.String()}, &RunError{Class: class, Reason: "start " + records.Excerpt(s.cfg.Command[0]), Log: tail.String(), Err: err}
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var werr error
	stopped := false
	select {
	case werr = <-waited:
	case <-ctx.Done():
		stopped = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		// The reaper gives the script KillGrace, then kills every
		// descendant itself; the group SIGKILL is the fallback.
		grace := s.cfg.KillGrace
		if reaped {
			grace *= 2
		}
		t := time.NewTimer(grace)
		select {
		case werr = <-waited:
			t.Stop()
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			werr = <-waited
		}
	}
	// Whatever the script left behind in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(werr, exec.ErrWaitDelay) {
		werr = nil // the script itself exited 0; only its output was held open
	}
	wall := s.now().Sub(start).Seconds()
	measured := records.Cost{WallSeconds: wall, DeviceSeconds: wall * float64(j.slots())}
	log := tail.String()

	if stopped {
		return DoneOutcome(ctx, j, measured, log)
	}
	resultBytes, rerr := ReadResultFile(resultPath)
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return Outcome{Cost: measured, Log: log}, &RunError{Class: ErrFailed, Reason: "wait", Log: log, Err: werr}
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return Outcome{Cost: measured, Log: log}, &RunError{Class: ErrFailed,
				Reason: "killed by signal " + ws.Signal().String(), Log: log}
		}
		e := ExitError(ee.ExitCode(), InfeasibleReason(resultBytes), log)
		if errors.Is(e, ErrInfeasible) {
			return Outcome{Infeasible: e.Reason, Cost: measured, Log: log, Seeds: []uint64{j.Seed}}, e
		}
		return Outcome{Cost: measured, Log: log}, e
	}
	if rerr != nil {
		return Outcome{Cost: measured, Log: log}, &RunError{Class: ErrFailed, Reason: "no result file", Log: log,
			Err: fmt.Errorf("%w: %w", ErrBadResult, rerr)}
	}
	r, err := ParseResult(resultBytes)
	if err != nil {
		return Outcome{Cost: measured, Log: log}, &RunError{Class: ErrFailed, Reason: "parse result", Log: log, Err: err}
	}
	return r.Outcome(j, measured, log)
}
