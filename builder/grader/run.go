package grader

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/reward"
)

// runnerSource is the Python runner: it sets the resource limits, compiles
// and runs the solution, and writes a status file.
//
//go:embed runner.py
var runnerSource string

// errStart marks a host that could not start the interpreter.
var errStart = errors.New("grader: cannot start python")

// status is the runner's status file.
type status struct {
	Status    string `json:"status"`
	ErrorType string `json:"error_type"`
	ErrorLine int    `json:"error_line"`
	Message   string `json:"message"`
}

// Grade runs code as the solution of t and grades it (METHOD.md §2):
//
//   - empty or blank code: reward.Malformed (nothing runs);
//   - code that does not compile: reward.SyntaxError;
//   - an exception, a non-zero exit, death by a signal, exceeding the
//     memory limit or Config.Timeout: reward.RuntimeError;
//   - a clean exit without a scorable submission.csv: reward.RanNoSubmission;
//   - otherwise reward.ValidSubmission with q = t.Percentile(metric).
//
// The run happens in a fresh private directory holding copies of t.Inputs
// and solution.py, as Config's unprivileged user when root, in its own
// process group and (when possible) network namespace, under RLIMIT_AS,
// RLIMIT_FSIZE and RLIMIT_CPU, with the environment PATH=/usr/bin:/bin,
// HOME and TMPDIR set to the directory, LANG=C.UTF-8, PYTHONHASHSEED=0 and
// one BLAS/OpenMP thread; nothing else of this process's environment (no
// proxies, no keys) reaches it. Errors are only for machinery: a done ctx
// (wrapped ctx.Err()), unreadable task files (ErrTask), a missing
// interpreter (errStart), a refused isolation (ErrIsolation).
func (g *Grader) Grade(ctx context.Context, t Task, code string) (Grade, error) {
	if err := ctx.Err(); err != nil {
		return Grade{}, fmt.Errorf("grader: %w", err)
	}
	answers, err := g.answersOf(t)
	if err != nil {
		return Grade{}, err
	}
	if strings.TrimSpace(code) == "" {
		return finish(t, Grade{Status: reward.Malformed, Detail: "empty solution"})
	}
	dir, err := os.MkdirTemp(g.cfg.TempDir, "lm2lm-grade-")
	if err != nil {
		return Grade{}, fmt.Errorf("%w: %w", errStart, err)
	}
	defer os.RemoveAll(dir)
	if err := g.stage(t, dir, code); err != nil {
		return Grade{}, err
	}
	gr, err := g.run(ctx, dir)
	if err != nil {
		return Grade{}, err
	}
	if gr.Status == "" { // exited 0: look at the submission
		gr.Status = reward.RanNoSubmission
		if m, err := readSubmission(t, dir, answers); err != nil {
			gr.Detail = err.Error()
		} else {
			gr.Status, gr.Metric, gr.Percentile = reward.ValidSubmission, m, t.Percentile(m)
		}
	}
	return finish(t, gr)
}

func finish(t Task, gr Grade) (Grade, error) {
	s, err := reward.LadderScore(gr.Status, gr.Percentile)
	if err != nil {
		return Grade{}, fmt.Errorf("grader: %s: %w", t.ID, err)
	}
	gr.Score = s
	return gr, nil
}

// stage copies t's inputs and the code into dir and hands dir to the
// unprivileged user.
func (g *Grader) stage(t Task, dir, code string) error {
	files := map[string][]byte{"solution.py": []byte(code)}
	for _, in := range t.Inputs {
		b, err := os.ReadFile(filepath.Join(t.Dir, in))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrTask, t.ID, err)
		}
		files[in] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("%w: stage %s: %w", errStart, name, err)
		}
	}
	if os.Geteuid() != 0 {
		return nil
	}
	if err := traversable(filepath.Dir(dir)); err != nil {
		return err
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, g.cfg.DropTo, g.cfg.DropTo)
	})
}

// traversable checks that an unprivileged user can reach a directory
// below dir: every directory from dir up to the root must be searchable by
// others, else the run would fail for the host's reason and be graded as
// the solution's runtime error.
func traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("%w: %w", errStart, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s is not searchable by the unprivileged user (mode %v); set Config.TempDir", errStart, d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func readSubmission(t Task, dir string, answers map[string]string) (float64, error) {
	p := filepath.Join(dir, Submission)
	fi, err := os.Lstat(p)
	if err != nil {
		return 0, fmt.Errorf("%w: no %s", ErrSubmission, Submission)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%w: %s is not a regular file", ErrSubmission, Submission)
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSubmission, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSubmissionBytes+1))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSubmission, err)
	}
	if len(b) > MaxSubmissionBytes {
		return 0, fmt.Errorf("%w: larger than %d bytes", ErrSubmission, MaxSubmissionBytes)
	}
	sub, err := ReadTable(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	return Score(t.Metric, answers, sub)
}

// env is a run's whole environment.
func env(dir string) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8", "PYTHONHASHSEED=0",
		"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "MPLBACKEND=Agg"}
}

// run starts the runner in dir and classifies how it ended. A Grade with
// an empty Status means a clean exit.
func (g *Grader) run(ctx context.Context, dir string) (Grade, error) {
	cpu := int64(g.cfg.Timeout/time.Second) + 2 // a backstop behind the wall-clock limit
	args := []string{"-I", "-c", runnerSource, "solution.py", ".status.json",
		strconv.FormatInt(g.cfg.Memory, 10), strconv.FormatInt(g.cfg.FileSize, 10), strconv.FormatInt(cpu, 10)}
	rctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	tail := builder.NewTail(g.cfg.LogTail)
	isolated := g.cfg.Isolate
	start := time.Now()
	werr, err := g.start(rctx, dir, args, tail, isolated)
	if err != nil && isolated && !g.cfg.RequireIsolation && errors.Is(err, ErrIsolation) {
		isolated = false
		werr, err = g.start(rctx, dir, args, tail, false)
	}
	if err != nil {
		return Grade{}, err
	}
	gr := Grade{Wall: time.Since(start), Log: tail.String(), Isolated: isolated}
	if ctx.Err() != nil {
		return Grade{}, fmt.Errorf("grader: %w", ctx.Err())
	}
	st := readStatus(filepath.Join(dir, ".status.json"))
	switch {
	case rctx.Err() != nil:
		gr.Status, gr.ErrorType, gr.Detail = reward.RuntimeError, "Timeout", fmt.Sprintf("no exit within %v", g.cfg.Timeout)
	case werr == nil:
		// clean exit
	case exitCode(werr) == 10 && st.Status == string(reward.SyntaxError):
		gr.Status, gr.ErrorType, gr.ErrorLine, gr.Detail = reward.SyntaxError, st.ErrorType, st.ErrorLine, st.Message
	default:
		gr.Status, gr.ErrorType, gr.ErrorLine, gr.Detail = reward.RuntimeError, st.ErrorType, st.ErrorLine, st.Message
		if st.Status != string(reward.RuntimeError) || gr.ErrorType == "" {
			gr.ErrorType, gr.ErrorLine, gr.Detail = werr.Error(), 0, "" // a signal, or an exit the runner did not see
		}
	}
	return gr, nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func readStatus(path string) status {
	var st status
	f, err := os.Open(path)
	if err != nil {
		return st
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<16))
	if json.Unmarshal(b, &st) != nil {
		return status{}
	}
	return st
}

// start runs the interpreter to completion and returns its wait error; err
// is for a run that could not start.
func (g *Grader) start(ctx context.Context, dir string, args []string, out io.Writer, isolate bool) (werr, err error) {
	cmd := exec.Command(g.cfg.Python, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env(dir), out, out
	attr := &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(g.cfg.DropTo), Gid: uint32(g.cfg.DropTo), NoSetGroups: true}
	}
	if isolate {
		attr.Cloneflags = syscall.CLONE_NEWNET
		if os.Geteuid() != 0 {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
		}
	}
	cmd.SysProcAttr = attr
	cmd.WaitDelay = g.cfg.KillGrace
	if err := cmd.Start(); err != nil {
		if isolate && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC)) {
			return nil, fmt.Errorf("%w: %w", ErrIsolation, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", errStart, g.cfg.Python, err)
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case werr = <-waited:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(g.cfg.KillGrace)
		select {
		case werr = <-waited:
			t.Stop()
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			werr = <-waited
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever the run left in its group
	if errors.Is(werr, exec.ErrWaitDelay) {
		werr = nil
	}
	return werr, nil
}
