//go:build linux

// Package reap kills and reaps a subreaper's descendants: the shared end of
// builder.Subprocess's reaper and builder/grader's sandbox init, each a
// process that set PR_SET_CHILD_SUBREAPER and so inherits the orphans of
// whatever it kills.
package reap

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillDescendants kills and reaps every child of this process until none
// is left: as a subreaper it inherits the orphans of each one it kills. It
// never blocks in wait: a child that appeared after a scan of /proc (a fork
// in flight) is found by the next scan, 10 ms later.
func KillDescendants() {
	self := os.Getpid()
	for {
		for _, pid := range ChildrenOf(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.ECHILD) {
				return
			}
			if pid <= 0 {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ChildrenOf lists the processes whose parent is ppid, from /proc.
func ChildrenOf(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	want := strconv.Itoa(ppid)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == want {
			out = append(out, pid)
		}
	}
	return out
}
