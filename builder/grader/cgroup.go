package grader

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroupHost is where this host lets the grader make a run's cgroups: a
// cgroup v2 directory with the memory and pids controllers enabled for
// its children, else the cgroup v1 memory and pids hierarchies, else none.
// The cpu controller is optional: cpu (v1: its hierarchy's parent) is ""
// and noCPU says why when the host does not give it.
type cgroupHost struct {
	version string // "v2", "v1" or ""
	v2      string // the parent of v2 run cgroups
	memory  string // v1: the parents of run cgroups in the memory and pids hierarchies
	pids    string
	cpu     string // v2: the same as v2; v1: the parent in the cpu hierarchy
	noCPU   string
	why     string // why there is none
}

var (
	hostCgroupsOnce sync.Once
	hostCgroups     cgroupHost
	cgroupSeq       atomic.Uint64
)

// detectCgroups finds the cgroups of this process (/proc/self/cgroup) and
// where their hierarchies are mounted (/proc/self/mountinfo). Run cgroups
// are made beside this process's own cgroup in v2 (its parent already
// delegates the controllers this cgroup has, and a cgroup with processes
// cannot delegate them itself) and below it in v1.
func detectCgroups() cgroupHost {
	hostCgroupsOnce.Do(func() { hostCgroups = findCgroups() })
	return hostCgroups
}

func findCgroups() cgroupHost {
	if os.Geteuid() != 0 {
		return cgroupHost{why: "not root"}
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return cgroupHost{why: err.Error()}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cgroupHost{why: err.Error()}
	}
	v2mount, v1mounts := cgroupMounts(mounts)
	paths := map[string]string{} // controller ("" for v2) → path in its hierarchy
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			paths[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = f[2]
		}
	}
	if v2mount != nil && paths[""] != "" {
		own := v2mount.join(paths[""])
		ctl, _ := os.ReadFile(filepath.Join(own, "cgroup.controllers"))
		if hasWords(string(ctl), "memory", "pids") && own != v2mount.point {
			h := cgroupHost{version: "v2", v2: filepath.Dir(own)}
			if hasWords(string(ctl), "cpu") { // the parent delegates it to its children, run cgroups included
				h.cpu = h.v2
			} else {
				h.noCPU = "the cgroup v2 parent " + h.v2 + " does not delegate the cpu controller"
			}
			return h
		}
		if own == v2mount.point { // the root cgroup may delegate with processes in it
			subFile := filepath.Join(own, "cgroup.subtree_control")
			sub, _ := os.ReadFile(subFile)
			if hasWords(string(sub), "memory", "pids") ||
				os.WriteFile(subFile, []byte("+memory +pids"), 0) == nil {
				h := cgroupHost{version: "v2", v2: own}
				if err := os.WriteFile(subFile, []byte("+cpu"), 0); err == nil || hasWords(string(sub), "cpu") {
					h.cpu = own
				} else {
					h.noCPU = "cannot enable the cgroup v2 cpu controller: " + err.Error()
				}
				return h
			}
		}
	}
	mem, pids := v1mounts["memory"], v1mounts["pids"]
	if mem != nil && pids != nil && paths["memory"] != "" && paths["pids"] != "" {
		h := cgroupHost{version: "v1", memory: mem.join(paths["memory"]), pids: pids.join(paths["pids"])}
		if cpu := v1mounts["cpu"]; cpu != nil && paths["cpu"] != "" {
			h.cpu = cpu.join(paths["cpu"])
		} else {
			h.noCPU = "no cgroup v1 cpu hierarchy"
		}
		return h
	}
	return cgroupHost{why: "no cgroup v2 with the memory and pids controllers, and no cgroup v1 memory and pids hierarchies"}
}

// cgroupMount is a mounted cgroup hierarchy: root is the path inside the
// hierarchy that is mounted at point.
type cgroupMount struct{ root, point string }

func (m *cgroupMount) join(p string) string {
	rel, err := filepath.Rel(m.root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = "."
	}
	return filepath.Join(m.point, rel)
}

// cgroupMounts parses mountinfo(5): the first cgroup2 mount and the
// cgroup v1 mount of the memory, pids and cpu controllers.
func cgroupMounts(mountinfo []byte) (*cgroupMount, map[string]*cgroupMount) {
	var v2 *cgroupMount
	v1 := map[string]*cgroupMount{}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		m := &cgroupMount{root: unescapeMount(f[3]), point: unescapeMount(f[4])}
		switch g[0] {
		case "cgroup2":
			if v2 == nil {
				v2 = m
			}
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o == "memory" || o == "pids" || o == "cpu" {
					v1[o] = m
				}
			}
		}
	}
	return v2, v1
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasWords(s string, words ...string) bool {
	have := strings.Fields(s)
	for _, w := range words {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// runCgroup is the cgroup (v2) or cgroups (v1: memory, pids and cpu) of
// one run.
type runCgroup struct {
	version string
	dirs    []string // to join, and to remove afterwards
	memDir  string
	cpu     bool   // the run has a CPU share of its own
	noCPU   string // else why not
}

// cpuPeriod is the period of a run's CPU quota, in microseconds (the
// kernel's default).
const cpuPeriod = 100_000

// newRunCgroup makes a run's cgroup with a memory limit of memory bytes
// (0: none; swap included where the host accounts it), a limit of procs
// processes and threads and, where the host gives the cpu controller, the
// same CPU weight as every other run and a quota of cpus CPUs (0: none).
// Without the cpu controller the run gets the other limits, and noCPU
// says why.
func newRunCgroup(h cgroupHost, memory int64, procs int, cpus float64) (*runCgroup, error) {
	name := fmt.Sprintf("lm2lm-grade-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	rc := &runCgroup{version: h.version}
	if err := rc.limitMemory(h, name, memory, procs); err != nil {
		rc.remove()
		return nil, fmt.Errorf("cgroup %s: %w", h.version, err)
	}
	if h.cpu == "" {
		rc.noCPU = h.noCPU
		return rc, nil
	}
	if err := rc.limitCPU(h, name, cpus); err != nil {
		if h.version == "v1" && len(rc.dirs) == 3 { // the cpu cgroup was made: drop it alone
			_ = syscall.Rmdir(rc.dirs[2])
			rc.dirs = rc.dirs[:2]
		}
		rc.noCPU = fmt.Sprintf("cgroup %s cpu: %v", h.version, err)
		return rc, nil
	}
	rc.cpu = true
	return rc, nil
}

// mkdir makes the run's cgroup name below parent and records it among
// the run's directories.
func (rc *runCgroup) mkdir(parent, name string) (string, error) {
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", err
	}
	rc.dirs = append(rc.dirs, d)
	return d, nil
}

// setControl writes v to the control file file of the cgroup dir; the
// error names the file.
func setControl(dir, file string, v string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// limitMemory makes the run's memory cgroup (v2: its one cgroup; v1: the
// memory and the pids cgroups) with a memory limit of memory bytes (0:
// none), swap included where the host accounts it, and a limit of procs
// processes and threads. On a host without cgroups it returns h.why.
func (rc *runCgroup) limitMemory(h cgroupHost, name string, memory int64, procs int) error {
	mem := "max"
	if memory > 0 {
		mem = strconv.FormatInt(memory, 10)
	}
	switch h.version {
	case "v2":
		d, err := rc.mkdir(h.v2, name)
		if err != nil {
			return err
		}
		rc.memDir = d
		if err := setControl(d, "memory.max", mem); err != nil {
			return err
		}
		if err := setControl(d, "memory.swap.max", "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return setControl(d, "pids.max", strconv.Itoa(procs))
	case "v1":
		d, err := rc.mkdir(h.memory, name)
		if err != nil {
			return err
		}
		rc.memDir = d
		if memory > 0 {
			if err := setControl(d, "memory.limit_in_bytes", mem); err != nil {
				return err
			}
			if err := setControl(d, "memory.memsw.limit_in_bytes", mem); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		p, err := rc.mkdir(h.pids, name)
		if err != nil {
			return err
		}
		return setControl(p, "pids.max", strconv.Itoa(procs))
	}
	return errors.New(h.why)
}

// limitCPU gives the run the same CPU weight as every other run and a
// quota of cpus CPUs (0: none): on v2 in the cgroup limitMemory made, on
// v1 in a cpu cgroup of its own (the run's third directory).
func (rc *runCgroup) limitCPU(h cgroupHost, name string, cpus float64) error {
	quota := "max"
	if cpus > 0 {
		quota = strconv.FormatInt(max(int64(cpus*cpuPeriod+0.5), 1000), 10)
	}
	if h.version == "v2" { // the run's one cgroup, made by limitMemory
		if err := setControl(rc.memDir, "cpu.weight", "100"); err != nil {
			return err
		}
		return setControl(rc.memDir, "cpu.max", quota+" "+strconv.Itoa(cpuPeriod))
	}
	d, err := rc.mkdir(h.cpu, name)
	if err != nil {
		return err
	}
	if quota == "max" {
		quota = "-1"
	}
	if err := setControl(d, "cpu.shares", "1024"); err != nil {
		return err
	}
	if err := setControl(d, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
		return err
	}
	return setControl(d, "cpu.cfs_quota_us", quota)
}

// ooms is how many processes of the run the kernel killed for memory.
func (rc *runCgroup) ooms() int {
	file, key := "memory.events", "oom_kill"
	if rc.version == "v1" {
		file = "memory.oom_control"
	}
	b, _ := os.ReadFile(filepath.Join(rc.memDir, file))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// remove deletes the run's cgroups, waiting up to a second for their last
// processes to be gone.
func (rc *runCgroup) remove() {
	for i := len(rc.dirs) - 1; i >= 0; i-- {
		for try := 0; try < 100; try++ {
			err := syscall.Rmdir(rc.dirs[i])
			if err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
