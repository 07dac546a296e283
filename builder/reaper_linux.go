//go:build linux

package builder

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/internal/reap"
)

// reaperEnv, when set in a process's environment, makes that process (a
// re-execution of the executor's own binary, see Subprocess) the reaper of
// one training script: its value is the kill grace in nanoseconds and its
// arguments are the script's command line.
const reaperEnv = "LM2LM_BUILDER_REAPER"

// reaperPath is the binary Subprocess re-executes as the reaper: this
// process's own executable, which works even if the file was replaced.
const reaperPath = "/proc/self/exe"

func init() {
	if v, ok := os.LookupEnv(reaperEnv); ok {
		os.Exit(runReaper(v, os.Args[1:]))
	}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// runReaper runs the script command as a child subreaper (prctl(2)
// PR_SET_CHILD_SUBREAPER): every descendant of the script that is orphaned,
// whether or not it left the process group with setsid, is re-parented to
// the reaper instead of to init. When the script exits, or when the reaper
// gets SIGTERM (then the script has grace to exit before it is killed),
// every remaining descendant is killed and reaped; the reaper then exits
// as the script did.
func runReaper(graceNs string, args []string) int {
	grace, err := strconv.ParseInt(graceNs, 10, 64)
	if err != nil || len(args) == 0 {
		os.Stderr.WriteString("lm2lm reaper: bad invocation\n")
		return 125
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		os.Stderr.WriteString("lm2lm reaper: prctl: " + e.Error() + "\n")
		return 125
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = withoutVar(os.Environ(), reaperEnv)
	if err := cmd.Start(); err != nil {
		os.Stderr.WriteString("lm2lm reaper: start: " + err.Error() + "\n")
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ETXTBSY) {
			return ExitTransient
		}
		return 126
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-term:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(time.Duration(grace))
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			_ = cmd.Process.Kill()
			<-done
		}
	}
	reap.KillDescendants()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		signal.Reset()
		_ = syscall.Kill(os.Getpid(), ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func withoutVar(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// reaperCommand returns the command that runs path with args under a
// reaper, and true; see runReaper.
func reaperCommand(path string, args []string, grace time.Duration) (string, []string, []string, bool) {
	return reaperPath, append([]string{path}, args...), []string{reaperEnv + "=" + strconv.FormatInt(int64(grace), 10)}, true
}
