package grader

import (
	"bytes"
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// runnerSource is the Python runner: it sets the resource limits, compiles
// and runs the solution, and writes a status file.
//
//go:embed runner.py
var runnerSource string

// ErrStart: the host could not start a run's program (a missing
// interpreter, a run directory the run's user cannot reach) or could not
// hand back what the run left. It is the host's failure, never the run's.
var ErrStart = errors.New("grader: cannot start the run")

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
//   - a clean exit without a scorable submission.csv (a non-finite metric
//     included): reward.RanNoSubmission;
//   - otherwise reward.ValidSubmission with q = t.Percentile(metric).
//
// The run happens in a fresh private directory holding solution.py and
// copies of t.Inputs whose id columns are relabelled for this grade (ids a
// fresh random permutation, test rows shuffled, so that an id says nothing
// about its row; the submission's ids are mapped back before scoring),
// inside the sandbox of docs/sandbox.md: its own user when root, a
// session of its own (no controlling terminal), private namespaces (the
// directory then a tmpfs of the run's own), cgroup limits for the whole
// run (memory, processes, a CPU share), RLIMIT_AS, RLIMIT_FSIZE and
// RLIMIT_CPU per process, and the environment PATH=/usr/bin:/bin, HOME and
// TMPDIR set to the directory, LANG=C.UTF-8, PYTHONHASHSEED=0 and one
// BLAS/OpenMP thread; nothing else of this process's environment (no
// proxies, no keys) reaches it. Every process of the run is gone when Grade
// returns, and the directory is removed (a failure to remove it is named in
// the grade's Detail and logged, see Config.Logger). Errors are only for
// machinery: a done ctx (wrapped ctx.Err()), unreadable task files
// (ErrTask), a missing interpreter or a host that cannot hand back what a
// run left (ErrStart), a sandbox the host cannot give under
// RequireIsolation (ErrIsolation).
func (g *Grader) Grade(ctx context.Context, t Task, code string) (gr Grade, err error) {
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
	uid := -1
	if os.Geteuid() == 0 {
		if uid, err = acquireUID(ctx, g.cfg.UIDFirst, g.cfg.UIDCount); err != nil {
			return Grade{}, err
		}
		defer releaseUID(uid)
	}
	dir, err := os.MkdirTemp(g.cfg.TempDir, "lm2lm-grade-")
	if err != nil {
		return Grade{}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	defer func() {
		// Every process of the run is gone: nothing changes the tree now.
		rerr := removeRunDir(dir)
		if rerr == nil {
			return
		}
		g.logger().Warn("grader: run directory not removed", "task", records.Excerpt(t.ID), "dir", dir, "err", rerr)
		if err == nil {
			gr.Detail = boundDetail(strings.TrimPrefix(gr.Detail+"; ", "; ") + fmt.Sprintf("run directory %s not removed: %v", dir, rerr))
		}
	}()
	ids, err := g.stage(t, dir, code, uid, answers)
	if err != nil {
		return Grade{}, err
	}
	gr, err = g.run(ctx, t, dir, uid)
	if err != nil {
		return Grade{}, err
	}
	if gr.Status == "" { // exited 0: look at the submission
		gr.Status = reward.RanNoSubmission
		if m, err := readSubmission(t, dir, answers, ids); err != nil {
			gr.Detail = err.Error()
		} else {
			gr.Status, gr.Metric, gr.Percentile = reward.ValidSubmission, m, t.Percentile(m)
		}
	}
	return finish(t, gr)
}

// logger is where the grader reports what it could not clean up.
func (g *Grader) logger() *slog.Logger {
	if g.cfg.Logger != nil {
		return g.cfg.Logger
	}
	return slog.Default()
}

// maxDetail bounds Grade.Detail and maxErrorType Grade.ErrorType, in
// bytes: both quote what a solution wrote (its submission, its status
// file), and a megabyte of hostile output must not become a megabyte of
// grade. Every value quoted inside Detail is itself cut by
// records.Excerpt.
const (
	maxDetail    = 1 << 10
	maxErrorType = records.MaxExcerpt
)

// boundDetail returns s cut to at most maxDetail bytes (on a rune
// boundary), the cut marked with "…" and the full length.
func boundDetail(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail - 32 // room for the marker
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

func finish(t Task, gr Grade) (Grade, error) {
	s, err := reward.LadderScore(gr.Status, gr.Percentile)
	if err != nil {
		return Grade{}, fmt.Errorf("grader: %s: %w", records.Excerpt(t.ID), err)
	}
	gr.Score = s
	gr.Detail = boundDetail(gr.Detail)
	if len(gr.ErrorType) > maxErrorType {
		gr.ErrorType = records.Excerpt(gr.ErrorType)
	}
	return gr, nil
}

// stage writes the code and t's relabelled inputs into dir and, as root,
// hands dir (mode 0700) to the run's user.
func (g *Grader) stage(t Task, dir, code string, uid int, answers map[string]string) (rowIDs, error) {
	inputs := map[string][]byte{}
	for _, in := range t.Inputs {
		b, err := os.ReadFile(filepath.Join(t.Dir, in))
		if err != nil {
			return rowIDs{}, fmt.Errorf("%w: %s: %w", ErrTask, t.ID, err)
		}
		inputs[in] = b
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return rowIDs{}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	files, ids, err := relabel(rand.New(rand.NewChaCha8(seed)), inputs, answers)
	if err != nil {
		return rowIDs{}, err
	}
	files["solution.py"] = []byte(code)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return rowIDs{}, fmt.Errorf("%w: stage %s: %w", ErrStart, name, err)
		}
	}
	if uid < 0 {
		return ids, nil
	}
	if err := traversable(filepath.Dir(dir)); err != nil {
		return rowIDs{}, err
	}
	return ids, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
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
			return fmt.Errorf("%w: %w", ErrStart, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s is not searchable by the unprivileged user (mode %v); set Config.TempDir", ErrStart, d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func readSubmission(t Task, dir string, answers map[string]string, ids rowIDs) (float64, error) {
	b, err := readRunFile(filepath.Join(dir, Submission), MaxSubmissionBytes)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%w: no %s", ErrSubmission, Submission)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrSubmission, Submission, err)
	}
	sub, err := ReadTable(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	if sub, err = ids.translate(sub); err != nil {
		return 0, err
	}
	return Score(t.Metric, answers, sub)
}

// errNotRegular: a file a run left is not a regular file.
var errNotRegular = errors.New("not a regular file")

// readRunFile reads a file a run wrote, at most max bytes (more is an
// error), as builder.ReadResultFile does: the open neither follows a
// symbolic link (O_NOFOLLOW) nor blocks on a FIFO or device (O_NONBLOCK),
// and what was opened must be a regular file (fstat).
func readRunFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errNotRegular
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}

// env is a run's whole environment.
func env(dir string) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8", "PYTHONHASHSEED=0",
		"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "MPLBACKEND=Agg"}
}

// privateDirs get a fresh tmpfs in a run's mount namespace.
var privateDirs = []string{"/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run"}

// hidden lists what a run must not see: every task directory of the
// grader and of t (their answers), and every task's Hide.
func (g *Grader) hidden(t Task) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil && !seen[abs] {
			seen[abs] = true
			out = append(out, abs)
		}
	}
	for _, tk := range append([]Task{t}, g.sortedTasks()...) {
		add(tk.Dir)
		for _, h := range tk.Hide {
			add(h)
		}
	}
	return out
}

// run starts the runner in dir inside the sandbox and classifies how it
// ended. A Grade with an empty Status means a clean exit.
func (g *Grader) run(ctx context.Context, t Task, dir string, uid int) (Grade, error) {
	cpu := int64(g.cfg.Timeout/time.Second) + 2 // a backstop behind the wall-clock limit
	sp := sandboxSpec{Program: g.cfg.Python, Env: env(dir), Dir: dir, UID: uid, GID: uid,
		Args: []string{"-I", "-c", runnerSource, "solution.py", ".status.json",
			strconv.FormatInt(g.cfg.Memory, 10), strconv.FormatInt(g.cfg.FileSize, 10), strconv.FormatInt(cpu, 10)},
		Private: privateDirs, Hide: g.hidden(t), TmpSize: g.cfg.Memory, Inodes: g.cfg.Inodes,
		Keep: []keepFile{{".status.json", statusMax}, {Submission, MaxSubmissionBytes}}}
	tail := builder.NewTail(g.cfg.LogTail)
	end, err := runSandboxed(ctx, sp, runLimits{memory: g.cfg.Memory, processes: g.cfg.Processes, cpus: g.cfg.CPUs,
		isolate: g.cfg.Isolate, require: g.cfg.RequireIsolation, timeout: g.cfg.Timeout, killGrace: g.cfg.KillGrace}, tail, tail)
	if err != nil {
		return Grade{}, err
	}
	e := end.ending
	gr := Grade{Wall: end.wall, Log: tail.String(), Isolated: end.iso.Network, Sandbox: end.iso}
	st := readStatus(filepath.Join(dir, ".status.json"))
	failed, how := e.failed()
	switch {
	case end.timedOut:
		gr.Status, gr.ErrorType, gr.Detail = reward.RuntimeError, "Timeout", fmt.Sprintf("no exit within %v", g.cfg.Timeout)
	case !failed:
		// clean exit
	case e.code == 10 && st.Status == string(reward.SyntaxError):
		gr.Status, gr.ErrorType, gr.ErrorLine, gr.Detail = reward.SyntaxError, st.ErrorType, st.ErrorLine, st.Message
	default:
		gr.Status, gr.ErrorType, gr.ErrorLine, gr.Detail = reward.RuntimeError, st.ErrorType, st.ErrorLine, st.Message
		if st.Status != string(reward.RuntimeError) || gr.ErrorType == "" {
			gr.ErrorType, gr.ErrorLine, gr.Detail = how, 0, "" // a signal, or an exit the runner did not see
		}
		if end.ooms > 0 {
			gr.ErrorType = "MemoryError"
			gr.Detail = fmt.Sprintf("the run exceeded its memory limit of %d bytes (%s); %s", g.cfg.Memory, how, gr.Detail)
		}
	}
	return gr, nil
}

// runLimits are what the sandbox's core (runSandboxed) is asked for.
type runLimits struct {
	memory           int64   // the cgroup's memory limit; 0: none
	processes        int     // the cgroup's pids.max
	cpus             float64 // the cgroup's CPU quota; 0: none
	isolate, require bool    // namespaces; everything or an error
	timeout          time.Duration
	killGrace        time.Duration
}

// runEnd is how one run of the sandbox went.
type runEnd struct {
	ending
	iso      Isolation
	ooms     int  // processes the kernel killed for memory (cgroup)
	timedOut bool // lim.timeout passed
	wall     time.Duration
}

// runSandboxed is the core of every run, the grader's and Sandbox.Run's:
// it makes the run's cgroups, decides what the host can give (under
// lim.require, all of it or an error wrapping ErrIsolation, nothing run),
// starts the init (startInit) with what it can, dropping what the host
// refused when not required, and reports what isolated the run. sp names
// the program, the run directory, the run's user (sp.UID, -1 for the
// caller's) and the mounts; the init's namespaces, cgroups and Mount are
// set here. Errors: a done ctx (wrapped ctx.Err()), ErrIsolation, and
// ErrStart (a program that could not be started, a host that could not
// hand back what the run left).
func runSandboxed(ctx context.Context, sp sandboxSpec, lim runLimits, stdout, stderr io.Writer) (runEnd, error) {
	var missing []string
	if sp.UID < 0 {
		missing = append(missing, "a user of the run's own (not root)")
	}
	var cg *runCgroup
	if h := detectCgroups(); h.version == "" {
		missing = append(missing, "cgroup limits ("+h.why+")")
	} else if c, err := newRunCgroup(h, lim.memory, lim.processes, lim.cpus); err != nil {
		missing = append(missing, "cgroup limits ("+err.Error()+")")
	} else {
		cg = c
		defer cg.remove()
		sp.Cgroups = cg.dirs
	}
	if lim.require && (len(missing) > 0 || !lim.isolate) {
		if !lim.isolate {
			missing = append(missing, "namespaces (not asked for)")
		}
		return runEnd{}, fmt.Errorf("%w: no %s", ErrIsolation, strings.Join(missing, ", no "))
	}
	if cg != nil && !cg.cpu {
		// Not required: a host with memory and pids limits but no cpu
		// controller still runs, and says so.
		missing = append(missing, "a CPU share ("+cg.noCPU+")")
	}
	rctx := ctx
	if lim.timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, lim.timeout)
		defer cancel()
	}
	ns := lim.isolate
	start := time.Now()
	var e ending
	for {
		sp.Mount = ns
		var err error
		e, err = startInit(rctx, sp, ns, lim.killGrace, stdout, stderr)
		if err == nil && e.setup != "" {
			err = fmt.Errorf("%w: %s", ErrIsolation, e.setup)
		}
		if err == nil || lim.require || !errors.Is(err, ErrIsolation) {
			if err != nil {
				return runEnd{}, err
			}
			break
		}
		// Degrade: drop what the host refused and try again; never a
		// mask (a run without it would see what it must not).
		switch {
		case strings.HasPrefix(e.setup, maskFailure):
			return runEnd{}, err
		case strings.HasPrefix(e.setup, "cgroup") && sp.Cgroups != nil:
			missing, sp.Cgroups, cg = append(missing, "cgroup limits ("+e.setup+")"), nil, nil
		case ns:
			missing, ns = append(missing, "namespaces ("+oneLine(err.Error(), 200)+")"), false
		default:
			return runEnd{}, err
		}
	}
	end := runEnd{ending: e, wall: time.Since(start), timedOut: rctx.Err() != nil && ctx.Err() == nil,
		iso: Isolation{Network: ns, PID: ns, Mount: ns, UID: max(sp.UID, 0), Missing: strings.Join(missing, "; ")}}
	if cg != nil {
		end.iso.Cgroup, end.iso.CPU = cg.version, cg.cpu
		end.ooms = cg.ooms()
	}
	if ctx.Err() != nil {
		return end, fmt.Errorf("grader: %w", ctx.Err())
	}
	if e.start != "" {
		return end, fmt.Errorf("%w: %s: %s", ErrStart, sp.Program, e.start)
	}
	if e.host != "" {
		return end, fmt.Errorf("%w: run directory %s: %s", ErrStart, sp.Dir, e.host)
	}
	return end, nil
}

// statusMax bounds the runner's status file.
const statusMax = 1 << 16

// readStatus reads the runner's status file; anything unusable (missing,
// not a regular file, too long, not JSON) reads as no status.
func readStatus(path string) status {
	var st status
	b, err := readRunFile(path, statusMax)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return status{}
	}
	return st
}

// startInit runs the sandbox's init to completion and returns how the
// interpreter ended; err is for a run that could not start. With ns the
// init gets new PID, network, mount and IPC namespaces (through a user
// namespace when not root). On a done ctx the init is told to end the run
// (SIGTERM: it kills every process of the run) and, after KillGrace,
// killed with its process group.
func startInit(ctx context.Context, sp sandboxSpec, ns bool, killGrace time.Duration, stdout, stderr io.Writer) (ending, error) {
	sp.DropCaps = ns && os.Geteuid() != 0
	spec, err := json.Marshal(sp)
	if err != nil {
		return ending{}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	rep, repW, err := os.Pipe()
	if err != nil {
		return ending{}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	defer rep.Close()
	cmd := exec.Command(sandboxExe)
	cmd.Env = []string{sandboxEnv + "=" + string(spec)}
	// No descriptor of the grader's terminal reaches the run: stdin is
	// /dev/null (a nil Stdin), stdout and stderr are pipes (out is no
	// *os.File), and every other descriptor of this process is close-on-
	// exec.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, stdout, stderr
	cmd.ExtraFiles = []*os.File{repW} // fd 3 (reportFD)
	// A session of its own (it is also its process group's leader): the
	// init and the run have no controlling terminal, so /dev/tty opens to
	// nothing and TIOCSTI cannot queue input to the terminal the grader
	// was started from. No Setctty: the session never gets one.
	attr := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if ns {
		attr.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
		if os.Geteuid() != 0 {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			// The init is root in its namespace (it mounts after its
			// execve); it starts the run with no capabilities (DropCaps).
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
	}
	cmd.SysProcAttr = attr
	cmd.WaitDelay = killGrace
	err = cmd.Start()
	repW.Close()
	if err != nil {
		if ns && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS)) {
			return ending{}, fmt.Errorf("%w: %w", ErrIsolation, err)
		}
		return ending{}, fmt.Errorf("%w: %s: %w", ErrStart, sandboxExe, err)
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-ctx.Done():
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		t := time.NewTimer(killGrace)
		select {
		case werr = <-waited:
			t.Stop()
		case <-t.C:
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			werr = <-waited
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever the init left in its group
	// The report was written before the init exited; a deadline keeps a
	// descendant that holds the pipe open from stalling the read.
	_ = rep.SetReadDeadline(time.Now().Add(killGrace))
	b, _ := io.ReadAll(io.LimitReader(rep, 4<<10))
	e := parseReport(b)
	if !e.ok { // the init was killed, or died, before it reported
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return ending{signal: ws.Signal(), ok: true}, nil
			}
			return ending{code: ee.ExitCode(), ok: true}, nil
		}
		return ending{code: 125, ok: true}, nil
	}
	return e, nil
}
