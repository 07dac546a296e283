package grader

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lm2lm/lm2lm/internal/reap"
)

// A run is started as a re-execution of this process's own binary (the
// sandbox's init, see runSandbox) with the environment variable sandboxEnv
// holding its sandboxSpec; the init sets the run up and starts the
// interpreter as its child. The same idea as builder.Subprocess's reaper,
// with namespaces, mounts and cgroups added.
const sandboxEnv = "LM2LM_GRADER_SANDBOX"

// sandboxExe is the binary re-executed as the init: this process's own
// executable, which works even if the file was replaced.
const sandboxExe = "/proc/self/exe"

func init() {
	if v, ok := os.LookupEnv(sandboxEnv); ok {
		os.Exit(runSandbox(v))
	}
}

// sandboxSpec is what the init is told, as JSON in sandboxEnv.
type sandboxSpec struct {
	Python string   `json:"python"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	// UID and GID are the run's user (root only; -1: keep the grader's).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Mount asks for the private mounts (the init is in a new mount
	// namespace): fresh tmpfs on Private, Hide masked, a fresh /proc.
	Mount   bool     `json:"mount"`
	Private []string `json:"private"`
	Hide    []string `json:"hide"`
	TmpSize int64    `json:"tmp_size"` // size= of the private tmpfs; 0: the kernel's default
	// Cgroups are directories the init joins before starting the run.
	Cgroups []string `json:"cgroups"`
	// DropCaps: the init is root in a user namespace of its own; the run,
	// which keeps that user id, must start with no capabilities (else it
	// could undo the mounts).
	DropCaps bool `json:"drop_caps"`
}

// The init's report on fd 3, one line: "exit N", "signal N", or
// "setup <message>" when the sandbox could not be set up (nothing ran).
const reportFD = 3

// runSandbox is the init of one run. It becomes a child subreaper, sets
// up the mounts and joins the cgroups it is given, starts the interpreter
// as its child (as the run's user, in a process group of its own, with
// no_new_privs), waits for it, kills every remaining descendant and
// reports how the interpreter ended. In a new PID namespace it is PID 1:
// its exit kills whatever is left in the namespace.
func runSandbox(specJSON string) int {
	report := os.NewFile(reportFD, "report")
	syscall.CloseOnExec(reportFD)
	say := func(format string, a ...any) int {
		if report != nil {
			fmt.Fprintf(report, format+"\n", a...)
		}
		return 0
	}
	var sp sandboxSpec
	if err := json.Unmarshal([]byte(specJSON), &sp); err != nil {
		return say("setup spec: %v", err)
	}
	runtime.LockOSThread() // prctl below is per thread; the run is started from this one
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return say("setup subreaper: %v", e)
	}
	if sp.Mount {
		if err := setupMounts(sp); err != nil {
			return say("setup mount: %v", err)
		}
	}
	for _, cg := range sp.Cgroups {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte("0"), 0); err != nil {
			return say("setup cgroup: %v", err)
		}
	}
	if sp.DropCaps {
		// With an empty bounding set (and the empty inheritable set every
		// process starts with), execve gives even user id 0 no capability.
		for c := 0; c < 64; c++ {
			if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapBSetDrop, uintptr(c), 0); e != 0 && e != syscall.EINVAL {
				return say("setup drop capabilities: %v", e)
			}
		}
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); e != 0 {
		return say("setup no_new_privs: %v", e)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	cmd := exec.Command(sp.Python, sp.Args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = sp.Dir, sp.Env, os.Stdout, os.Stderr
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if sp.UID >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(sp.UID), Gid: uint32(sp.GID), Groups: []uint32{}}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return say("start %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-term:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if os.Getpid() != 1 {
		// PID 1 of a namespace needs no scan: its exit kills every process
		// left in the namespace, and the grader's wait for it returns once
		// they are gone. (A scan could miss them where /proc is the host's.)
		reap.KillDescendants()
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return say("signal %d", int(ws.Signal()))
	}
	return say("exit %d", ws.ExitStatus())
}

// prctl(2) options.
const (
	prCapBSetDrop       = 24
	prSetChildSubreaper = 36
	prSetNoNewPrivs     = 38
)

// setupMounts runs in the init's new mount namespace: nothing it mounts
// propagates back to the host. Every directory of sp.Private gets a fresh
// tmpfs (so /tmp, /dev/shm, /run and what lives there, host Unix sockets
// included, are out of sight, and what the run writes there dies with the
// namespace), every path of sp.Hide is masked (a directory by an empty
// read-only tmpfs, a file by /dev/null), the run directory is bound back
// at its own path when a mask covered it, and /proc is remounted for the
// new PID namespace.
func setupMounts(sp sandboxSpec) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	dirFD, err := syscall.Open(sp.Dir, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open run directory: %w", err)
	}
	defer syscall.Close(dirFD)
	var before syscall.Stat_t
	if err := syscall.Fstat(dirFD, &before); err != nil {
		return err
	}
	opts := "mode=1777"
	if sp.TmpSize > 0 {
		opts += ",size=" + strconv.FormatInt(sp.TmpSize, 10)
	}
	for _, p := range sp.Private {
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // absent, or a symbolic link into another private directory (/var/run → /run)
		}
		if err := syscall.Mount("tmpfs", p, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", p, err)
		}
	}
	for _, p := range sp.Hide {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			err = syscall.Mount("tmpfs", p, "tmpfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0555,size=4k")
		default:
			err = syscall.Mount("/dev/null", p, "", syscall.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	var now syscall.Stat_t
	if err := syscall.Stat(sp.Dir, &now); err != nil || now.Dev != before.Dev || now.Ino != before.Ino {
		if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
			return fmt.Errorf("run directory: %w", err)
		}
		if err := syscall.Mount("/proc/self/fd/"+strconv.Itoa(dirFD), sp.Dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind run directory: %w", err)
		}
	}
	// A fresh /proc shows the run's own PID namespace only. Some kernels
	// refuse it inside containers; the run then sees the host's /proc,
	// where it can signal nothing outside its namespace.
	_ = syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	return nil
}

// ending is how a run's interpreter ended, from the init's report.
type ending struct {
	setup  string // non-empty: the sandbox could not be set up
	start  string // non-empty: the interpreter could not be started
	code   int
	signal syscall.Signal
	ok     bool // a report was read
}

// parseReport reads the init's one-line report.
func parseReport(b []byte) ending {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case "setup":
		return ending{setup: oneLine(rest, 300), ok: true}
	case "start":
		return ending{start: oneLine(rest, 300), ok: true}
	case "exit", "signal":
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 || n > 255 {
			return ending{}
		}
		if kind == "exit" {
			return ending{code: n, ok: true}
		}
		return ending{signal: syscall.Signal(n), ok: true}
	}
	return ending{}
}

// failed reports a non-zero exit or a death by signal, described as
// os/exec does ("exit status 3", "signal: killed").
func (e ending) failed() (bool, string) {
	switch {
	case e.signal != 0:
		return true, "signal: " + e.signal.String()
	case e.code != 0:
		return true, "exit status " + strconv.Itoa(e.code)
	}
	return false, ""
}
