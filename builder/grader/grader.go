package grader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// Config parameterises a Grader. Every default is a library choice
// (METHOD.md §2 names the ladder, not the sandbox).
type Config struct {
	// Python is the interpreter, an absolute path; default
	// "/usr/bin/python3" (Debian's, where python3-sklearn lives; another
	// python3 earlier on PATH may lack it).
	Python string
	// SandboxConfig bounds every run as it bounds a Sandbox's commands
	// (its fields are Config's: Timeout, Memory, FileSize, Processes,
	// CPUs, Inodes, Isolate, RequireIsolation, UIDFirst, UIDCount,
	// KillGrace), with the grader's own defaults, sized for scikit-learn
	// on a loaded machine rather than a training run (DefaultConfig):
	//
	//   - Timeout 120 s, and > 0: the task's compute budget. A run past it
	//     is a runtime error (reward.RuntimeError, ErrorType "Timeout").
	//   - Memory 1 GiB (NumPy and scikit-learn with one BLAS thread peak
	//     near 200 MB). It is also the address-space limit of each process
	//     (RLIMIT_AS), so that it bounds a run where the host has no
	//     cgroups; exceeding it is a runtime error (ErrorType
	//     "MemoryError"). With a mount namespace it sizes the run's /tmp,
	//     /dev/shm and directory (Memory bytes beyond the inputs).
	//   - FileSize 64 MiB, Processes 256, CPUs 1.
	//   - RequireIsolation false: what the host cannot give, a run goes
	//     without (Grade.Sandbox says what it had; without namespaces a
	//     run gets a process group, a subreaper and its own user); true
	//     makes the grade fail with ErrIsolation.
	//
	// With a mount namespace Inodes also bounds the private /tmp,
	// /var/tmp, /dev/shm and /run (docs/sandbox.md). UIDFirst and
	// UIDCount are shared with every Sandbox of the process.
	SandboxConfig
	// TempDir is where private run directories are made; "" = os.TempDir().
	TempDir string
	// LogTail is how many bytes of the run's stdout and stderr are kept;
	// default 4 KiB.
	LogTail int
	// Logger receives what the grader could not clean up after a run (a
	// run directory it failed to remove, also named in Grade.Detail);
	// nil = slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config: the sandbox's
// (DefaultSandboxConfig) with the grader's limits.
func DefaultConfig() Config {
	sb := DefaultSandboxConfig()
	sb.Timeout, sb.Memory, sb.FileSize, sb.Processes, sb.CPUs = 120*time.Second, 1<<30, 64<<20, 256, 1
	sb.RequireIsolation = false
	return Config{Python: "/usr/bin/python3", SandboxConfig: sb, LogTail: 4 << 10}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case !filepath.IsAbs(c.Python):
		return fmt.Errorf("grader: Python = %q, want an absolute path", c.Python)
	case c.Timeout <= 0:
		return fmt.Errorf("grader: Timeout = %v, want > 0", c.Timeout)
	case c.LogTail < 1:
		return fmt.Errorf("grader: LogTail = %d, want > 0", c.LogTail)
	}
	return c.SandboxConfig.Validate()
}

// ErrIsolation: RequireIsolation is set and the host cannot give a run
// the whole sandbox (namespaces, a user of its own, cgroup limits); the
// error names what is missing.
var ErrIsolation = errors.New("grader: isolation unavailable")

// Grade is what running one solution on one task gave.
type Grade struct {
	Status reward.Status
	// Score is the ladder score (reward.LadderScore).
	Score float64
	// Metric is the submission's metric value and Percentile its standing on
	// the leaderboard (q); both meaningful only for a valid submission.
	Metric, Percentile float64
	// ErrorType and ErrorLine describe a syntax or runtime error: the
	// Python exception name ("SyntaxError", "KeyError", "MemoryError"),
	// "Timeout", or "signal: killed"; the line in solution.py when known.
	ErrorType string
	ErrorLine int
	// Detail says why a run has no usable submission, or the error message.
	Detail string
	// Log is the tail of the run's stdout and stderr.
	Log string
	// Wall is the run's wall-clock time (zero when nothing ran).
	Wall time.Duration
	// Isolated reports that the run had no network (Sandbox.Network).
	Isolated bool
	// Sandbox is what isolated the run.
	Sandbox Isolation
}

// Isolation is what isolated one run (docs/sandbox.md).
type Isolation struct {
	// Network, PID and Mount: the run had private network, PID and mount
	// (and IPC) namespaces: no network, its processes killed when it
	// ended, its directory on a tmpfs of its own (Config.Memory bytes
	// beyond its inputs, Config.Inodes files), private /tmp, /dev/shm
	// and /run, task files masked, no terminal device; for Sandbox.Run,
	// also everything else read-only.
	Network, PID, Mount bool
	// UID is the run's own user id (0 when it ran as the grader's user).
	UID int
	// Cgroup is "v2" or "v1" when Config.Memory and Config.Processes
	// bounded the whole run, "" when they bounded each process only.
	Cgroup string
	// CPU: the run's cgroup had the cpu controller, the same CPU weight
	// as every other run and at most Config.CPUs CPUs.
	CPU bool
	// Missing says what the host could not give, "" when nothing.
	Missing string
}

// Summary is a one-line description of g.
func (g Grade) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s score %.4f", g.Status, g.Score)
	if g.Status == reward.ValidSubmission {
		fmt.Fprintf(&b, " metric %.4g percentile %.3f", g.Metric, g.Percentile)
	}
	if g.ErrorType != "" {
		fmt.Fprintf(&b, " %s", g.ErrorType)
		if g.ErrorLine > 0 {
			fmt.Fprintf(&b, " at line %d", g.ErrorLine)
		}
	}
	if g.Detail != "" {
		fmt.Fprintf(&b, ": %s", oneLine(g.Detail, 160))
	}
	return b.String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// Grader runs Python solutions of code-solution tasks and grades them on
// WMRL's ladder (METHOD.md §2). It is a builder.Builder and a
// builder.Executor for those tasks: a proposal's Text is the solution's
// code, its Mechanism names the approach. It is safe for concurrent use
// and does not limit concurrency itself (wrap it in a builder.Pool).
type Grader struct {
	cfg   Config
	tasks map[string]Task

	answersMu sync.Mutex
	answers   map[string]map[string]string // task ID → hidden answers, read once
}

var (
	_ builder.Executor = (*Grader)(nil)
	_ builder.Builder  = (*Grader)(nil)
)

// New returns a grader for tasks under cfg.
func New(cfg Config, tasks ...Task) (*Grader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Grader{cfg: cfg, tasks: map[string]Task{}, answers: map[string]map[string]string{}}
	for _, t := range tasks {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if _, dup := g.tasks[t.ID]; dup {
			return nil, fmt.Errorf("%w: task %s given twice", ErrTask, t.ID)
		}
		g.tasks[t.ID] = t
	}
	return g, nil
}

// sortedTasks returns the grader's tasks in ID order.
func (g *Grader) sortedTasks() []Task {
	out := make([]Task, 0, len(g.tasks))
	for _, t := range g.tasks {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Task returns the task with the given ID.
func (g *Grader) Task(id string) (Task, bool) {
	t, ok := g.tasks[id]
	return t, ok
}

// Build makes the job of solution p for task t: the grader's tasks only;
// an unknown task wraps builder.ErrFailed (a host misconfiguration, not
// the proposal's fault). Every solution builds: empty or broken code is
// graded on the ladder, not refused.
func (g *Grader) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	if err := ctx.Err(); err != nil {
		return builder.Job{}, &builder.RunError{Class: builder.ErrCancelled, Reason: "build", Err: err}
	}
	if _, ok := g.tasks[t.ID]; !ok {
		return builder.Job{}, &builder.RunError{Class: builder.ErrFailed, Reason: "build", Err: fmt.Errorf("%w: unknown task %q", ErrTask, t.ID)}
	}
	return builder.Job{Task: t, Proposal: p}, nil
}

// Execute grades j.Proposal.Text on the task j.Task.ID. The outcome's
// Gain is the ladder score and Loss = 1 − score (records.LadderShortfall,
// b_e = 1); Log starts with the grade's Summary. A solution's failures are
// rungs of the ladder, never errors: errors are a done ctx (ErrCancelled),
// an unknown task or unreadable task files (ErrFailed), and a host that
// cannot start Python (ErrTransient).
func (g *Grader) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	t, ok := g.tasks[j.Task.ID]
	if !ok {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "execute", Err: fmt.Errorf("%w: unknown task %q", ErrTask, j.Task.ID)}
	}
	gr, err := g.Grade(ctx, t, j.Proposal.Text)
	if err != nil {
		if ctx.Err() != nil {
			return builder.DoneOutcome(ctx, j, records.Cost{}, "")
		}
		class := builder.ErrFailed
		if errors.Is(err, ErrStart) {
			class = builder.ErrTransient
		}
		return builder.Outcome{}, &builder.RunError{Class: class, Reason: "grade", Err: err}
	}
	w := gr.Wall.Seconds()
	return builder.Outcome{
		Loss: 1 - gr.Score, Gain: gr.Score, Seeds: []uint64{j.Seed},
		Cost: records.Cost{WallSeconds: w, DeviceSeconds: w},
		Log:  gr.Summary() + "\n" + gr.Log,
	}, nil
}

// answersOf reads t's hidden answers once.
func (g *Grader) answersOf(t Task) (map[string]string, error) {
	g.answersMu.Lock()
	defer g.answersMu.Unlock()
	if a, ok := g.answers[t.ID]; ok {
		return a, nil
	}
	f, err := os.Open(filepath.Join(t.Dir, t.Answers))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrTask, t.ID, err)
	}
	defer f.Close()
	a, err := ReadTable(f)
	if err != nil || len(a) == 0 {
		return nil, fmt.Errorf("%w: %s: answers: %v (%d rows)", ErrTask, t.ID, err, len(a))
	}
	g.answers[t.ID] = a
	return a, nil
}
