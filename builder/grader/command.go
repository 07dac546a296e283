package grader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SandboxConfig parameterises a Sandbox: the limits of every command it
// runs. Every default is a library choice (the paper names no sandbox);
// they are sized for a small training run on CPU.
type SandboxConfig struct {
	// Timeout is a run's wall-clock limit; 0 = none of the sandbox's own
	// (the caller's ctx only). Default 0. A run past it is killed and
	// Result.TimedOut is set.
	Timeout time.Duration
	// Memory bounds the memory of the whole run, in bytes: the cgroup's
	// limit (all its processes, and the pages of its private tmpfs), and
	// the size= of each private tmpfs (the run directory's: Memory bytes
	// beyond what was staged there). Default 4 GiB. 0 = no limit. There is
	// no per-process address-space limit (PyTorch reserves far more
	// address space than it uses): without cgroups (Result.Sandbox.Cgroup
	// "") memory is not bounded.
	Memory int64
	// FileSize is the largest file a run may write (RLIMIT_FSIZE); default
	// 1 GiB. 0 = no limit.
	FileSize int64
	// Processes bounds the processes and threads of the whole run (the
	// cgroup's pids.max); default 512 (PyTorch starts a thread pool).
	Processes int
	// CPUs caps the CPU time of the whole run, in CPUs (cgroup cpu.max or
	// cpu.cfs_quota_us, where the host gives the cpu controller); every
	// run also gets the same CPU weight. Default 0 = no cap, the equal
	// weight only.
	CPUs float64
	// Inodes bounds the files and directories a run may make in each of
	// its private tmpfs (the run directory's: that many beyond what was
	// staged); default 65,536. 0 = the kernel's default.
	Inodes int
	// Isolate asks for private PID, network, mount and IPC namespaces;
	// default true. RequireIsolation (default true: fail closed) makes a
	// run whose host cannot give the whole sandbox (the namespaces, a user
	// of the run's own and cgroup limits: root only) fail with an error
	// wrapping ErrIsolation, with nothing run; false runs with what the
	// host gives, and Result.Sandbox says what that was.
	Isolate, RequireIsolation bool
	// UIDFirst and UIDCount are the user ids (and equal group ids) runs
	// execute as when this process is root, shared with every Grader of
	// the process: no two concurrent runs get the same one. Defaults
	// 2,000,000,000 and 1,000, as the grader's.
	UIDFirst, UIDCount int
	// KillGrace is the wait between SIGTERM and SIGKILL of the run's init
	// on timeout or cancel; default 1 s.
	KillGrace time.Duration
}

// DefaultSandboxConfig returns the defaults documented on SandboxConfig.
func DefaultSandboxConfig() SandboxConfig {
	return SandboxConfig{Memory: 4 << 30, FileSize: 1 << 30, Processes: 512, Inodes: 1 << 16,
		Isolate: true, RequireIsolation: true, UIDFirst: 2_000_000_000, UIDCount: 1000, KillGrace: time.Second}
}

// Validate reports the first problem with c.
func (c SandboxConfig) Validate() error {
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("grader: sandbox Timeout = %v, want ≥ 0", c.Timeout)
	case c.Memory < 0 || c.FileSize < 0:
		return fmt.Errorf("grader: sandbox Memory = %d, FileSize = %d, want ≥ 0", c.Memory, c.FileSize)
	case c.Processes < 1:
		return fmt.Errorf("grader: sandbox Processes = %d, want > 0", c.Processes)
	case !(c.CPUs >= 0 && c.CPUs <= 1<<20) || c.Inodes < 0:
		return fmt.Errorf("grader: sandbox CPUs = %g, Inodes = %d, want ≥ 0", c.CPUs, c.Inodes)
	case c.UIDFirst < 1 || c.UIDCount < 1 || int64(c.UIDFirst)+int64(c.UIDCount) > 1<<31-1:
		return fmt.Errorf("grader: sandbox UIDFirst = %d, UIDCount = %d, want a range of positive ids below 2^31", c.UIDFirst, c.UIDCount)
	case c.RequireIsolation && !c.Isolate:
		return errors.New("grader: sandbox RequireIsolation without Isolate")
	case c.KillGrace <= 0:
		return fmt.Errorf("grader: sandbox KillGrace = %v, want > 0", c.KillGrace)
	}
	return nil
}

// ErrBadCommand: a Command the sandbox cannot run as asked (a relative
// path, a run directory that is not a directory, a read-only path that is
// missing or lies where the run could not see it). Nothing ran.
var ErrBadCommand = errors.New("grader: bad sandbox command")

// Command is one program to run in a Sandbox.
type Command struct {
	// Path is the program, an absolute path outside the private
	// directories and the masked paths; Args follow it (argv[0] is Path).
	Path string
	Args []string
	// Dir is the run directory, the program's working directory: an
	// existing directory the caller made for this run (a copy of the code
	// the run may change). With a mount namespace the run sees a private
	// tmpfs at this path holding a copy of Dir's regular files and
	// directories, and writes there only; the files named in Keep are
	// copied back to Dir when the run has ended, nothing else. Without
	// one the run works in Dir itself. As root, Dir's tree is given to the
	// run's user.
	Dir string
	// Env holds "NAME=value" entries added to the minimal environment
	// (PATH=/usr/bin:/bin, HOME and TMPDIR the run directory,
	// LANG=C.UTF-8). Nothing else of this process's environment reaches
	// the run.
	Env []string
	// ReadOnly are host paths the run reads (a task's data): each is bound
	// read-only at its own path, visible even below a private directory
	// such as /tmp. It must exist, and must not lie in Dir or below a
	// Hide path. The run's user must be allowed to read it.
	ReadOnly []string
	// Hide are host paths the run must not see: a directory becomes an
	// empty read-only directory, a file an empty one (/dev/null), masked
	// after every other mount (a ReadOnly folder that holds one, below
	// /tmp or elsewhere, shows it masked); a path that cannot be masked
	// fails the run with ErrIsolation, nothing run. Dir must not lie below
	// one, and none may lie in Dir (ErrBadCommand: its copy would be the
	// run's).
	Hide []string
	// Keep names files of the run directory (plain names, no '/') to copy
	// back to Dir after the run, each at most KeepMax+1 bytes (so that the
	// caller still sees one too large), only when a regular file (anything
	// else is left as a dangling symbolic link). KeepMax 0 = 1 MiB.
	Keep    []string
	KeepMax int64
	// Stdout and Stderr receive the run's output; nil discards it.
	Stdout, Stderr io.Writer
}

// Result is how a sandboxed command ended.
type Result struct {
	// ExitCode is the program's exit status, -1 when a signal ended it
	// (Signal).
	ExitCode int
	Signal   syscall.Signal
	// TimedOut: SandboxConfig.Timeout passed and the run was killed.
	TimedOut bool
	// OOMKills counts the processes of the run the kernel killed for
	// exceeding SandboxConfig.Memory (cgroups only).
	OOMKills int
	// Wall is the run's wall-clock time.
	Wall time.Duration
	// Sandbox is what isolated the run.
	Sandbox Isolation
}

// Sandbox runs commands under the sandbox of docs/sandbox.md, the one the
// Grader runs solutions in: a user id of the run's own (as root), a
// session of its own, private PID, network, mount and IPC namespaces, the
// whole file system read-only but for the run directory and the private
// /tmp, /var/tmp, /dev/shm and /run (tmpfs bounded by Memory and Inodes),
// chosen paths masked and chosen paths bound read-only, cgroup limits on
// memory, processes and CPU, no_new_privs, RLIMIT_FSIZE and no core dumps,
// a wall-clock limit, a minimal environment, and every process of the run
// killed when it ends. It is safe for concurrent use and does not limit
// concurrency itself.
type Sandbox struct {
	cfg SandboxConfig
}

// NewSandbox checks cfg and returns a Sandbox.
func NewSandbox(cfg SandboxConfig) (*Sandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sandbox{cfg: cfg}, nil
}

// Config returns the sandbox's configuration.
func (s *Sandbox) Config() SandboxConfig { return s.cfg }

// Run runs c to completion in the sandbox. A program that fails, is
// killed or times out is a Result, not an error. Errors: ErrBadCommand
// (nothing ran), ErrIsolation under RequireIsolation (the error names what
// the host cannot give; nothing ran), ErrStart (the program could not be
// started, or what it left could not be handed back), and a done ctx
// (wrapping ctx.Err(); the Result then says how long the run took). Every
// process of the run is gone when Run returns.
func (s *Sandbox) Run(ctx context.Context, c Command) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("grader: sandbox: %w", err)
	}
	if c.Path == "" {
		return Result{}, fmt.Errorf("%w: no program", ErrBadCommand)
	}
	sp, err := s.spec(c)
	if err != nil {
		return Result{}, err
	}
	return s.run(ctx, sp, c.Stdout, c.Stderr)
}

// Probe sets the sandbox up as Run would, with an empty run directory of
// its own, and starts nothing in it: it reports what a run would get now,
// and under RequireIsolation an error wrapping ErrIsolation when the host
// cannot give it.
func (s *Sandbox) Probe(ctx context.Context) (Isolation, error) {
	dir, err := os.MkdirTemp("", "lm2lm-sandbox-probe-")
	if err != nil {
		return Isolation{}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	defer os.RemoveAll(dir)
	sp, err := s.spec(Command{Dir: dir})
	if err != nil {
		return Isolation{}, err
	}
	r, err := s.run(ctx, sp, nil, nil)
	if err == nil && (r.ExitCode != 0 || r.Signal != 0) {
		err = fmt.Errorf("%w: the probe ended with exit %d, signal %d", ErrStart, r.ExitCode, r.Signal)
	}
	return r.Sandbox, err
}

// spec checks c and returns the init's specification (sp.UID is set by
// run).
func (s *Sandbox) spec(c Command) (sandboxSpec, error) {
	bad := func(format string, a ...any) (sandboxSpec, error) {
		return sandboxSpec{}, fmt.Errorf("%w: "+format, append([]any{ErrBadCommand}, a...)...)
	}
	if c.Path != "" && !filepath.IsAbs(c.Path) {
		return bad("program %q is not an absolute path", c.Path)
	}
	dir, err := realDir(c.Dir)
	if err != nil {
		return bad("run directory: %v", err)
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return bad("environment entry %q is not NAME=value", e)
		}
	}
	var hide []string
	for _, h := range c.Hide {
		abs, err := filepath.Abs(h)
		if err != nil {
			return bad("hidden path %q: %v", h, err)
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		if within(dir, abs) {
			return bad("the run directory %s lies below the hidden path %s", dir, abs)
		}
		if within(abs, dir) {
			// Its copy would be the run's (and, as root, given to the
			// run's user): the caller leaves it out of Dir instead.
			return bad("the hidden path %s lies in the run directory %s", abs, dir)
		}
		hide = append(hide, abs)
	}
	var ro []string
	for _, p := range c.ReadOnly {
		abs, err := filepath.Abs(p)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			return bad("read-only path %q: %v", p, err)
		}
		if within(abs, dir) || within(dir, abs) {
			return bad("read-only path %s and the run directory %s overlap", abs, dir)
		}
		for _, h := range hide {
			if within(abs, h) {
				return bad("read-only path %s lies below the hidden path %s", abs, h)
			}
		}
		ro = append(ro, abs)
	}
	keepMax := c.KeepMax
	if keepMax <= 0 {
		keepMax = 1 << 20
	}
	var keep []keepFile
	for _, k := range c.Keep {
		if k == "" || k == "." || k == ".." || strings.ContainsRune(k, '/') {
			return bad("kept file %q is not a plain name", k)
		}
		keep = append(keep, keepFile{Name: k, Max: keepMax})
	}
	env := append([]string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8"}, c.Env...)
	sp := sandboxSpec{Program: c.Path, Args: c.Args, Env: env, Dir: dir, Private: privateDirs, Hide: hide,
		TmpSize: s.cfg.Memory, Inodes: s.cfg.Inodes, Keep: keep, ReadOnlyRoot: true, ReadOnly: ro,
		Rlimits: []rlimitSpec{{Resource: unix.RLIMIT_CORE, Max: 0}}}
	if s.cfg.FileSize > 0 {
		sp.Rlimits = append(sp.Rlimits, rlimitSpec{Resource: unix.RLIMIT_FSIZE, Max: uint64(s.cfg.FileSize)})
	}
	if s.cfg.Timeout > 0 { // a backstop behind the wall-clock limit
		sp.Rlimits = append(sp.Rlimits, rlimitSpec{Resource: unix.RLIMIT_CPU, Max: uint64(s.cfg.Timeout/time.Second) + 2})
	}
	return sp, nil
}

// run takes a user id for the run (as root), gives it the run directory
// and runs sp.
func (s *Sandbox) run(ctx context.Context, sp sandboxSpec, stdout, stderr io.Writer) (Result, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	sp.UID, sp.GID = -1, -1
	if os.Geteuid() == 0 {
		uid, err := acquireUID(ctx, s.cfg.UIDFirst, s.cfg.UIDCount)
		if err != nil {
			return Result{}, err
		}
		defer releaseUID(uid)
		sp.UID, sp.GID = uid, uid
		// Without a mount namespace the run works in the directory
		// itself; with one its tmpfs copy is the run's either way.
		if err := filepath.Walk(sp.Dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, uid)
		}); err != nil {
			return Result{}, fmt.Errorf("%w: give the run directory to the run's user: %w", ErrStart, err)
		}
	}
	end, err := runSandboxed(ctx, sp, runLimits{memory: s.cfg.Memory, processes: s.cfg.Processes, cpus: s.cfg.CPUs,
		isolate: s.cfg.Isolate, require: s.cfg.RequireIsolation, timeout: s.cfg.Timeout, killGrace: s.cfg.KillGrace}, stdout, stderr)
	r := Result{ExitCode: end.code, Signal: end.signal, TimedOut: end.timedOut, OOMKills: end.ooms, Wall: end.wall, Sandbox: end.iso}
	if end.signal != 0 {
		r.ExitCode = -1
	}
	return r, err
}

// realDir returns dir as an absolute path without symbolic links, and
// checks that it is a directory.
func realDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("empty")
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	return abs, nil
}

// within reports whether path is dir or lies below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
