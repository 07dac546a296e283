package grader

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Program string   `json:"program"` // the program to run; "" for a probe
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	// UID and GID are the run's user (root only; -1: keep the grader's).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Mount asks for the private mounts (the init is in a new mount
	// namespace): fresh tmpfs on Private and on Dir (holding a copy of
	// what the grader staged), Hide and the terminals masked, a fresh
	// /proc (setupMounts).
	Mount   bool     `json:"mount"`
	Private []string `json:"private"`
	Hide    []string `json:"hide"`
	TmpSize int64    `json:"tmp_size"` // size= of the private tmpfs; 0: the kernel's default
	Inodes  int      `json:"inodes"`   // nr_inodes= of the private tmpfs; 0: the kernel's default
	// Keep are the files of the run directory that the init copies back to
	// the grader's directory (Dir on the host) when the run has ended; with
	// Mount the run writes to a tmpfs of its own mounted over Dir.
	Keep []keepFile `json:"keep"`
	// Cgroups are directories the init joins before starting the run.
	Cgroups []string `json:"cgroups"`
	// DropCaps: the init is root in a user namespace of its own; the run,
	// which keeps that user id, must start with no capabilities (else it
	// could undo the mounts).
	DropCaps bool `json:"drop_caps"`
	// ReadOnlyRoot (with Mount) makes every mount of the run's view
	// read-only before the private tmpfs are mounted: the run directory and
	// the private directories are then the only places it can write.
	ReadOnlyRoot bool `json:"read_only_root"`
	// ReadOnly (with Mount) are host paths bound read-only at the same
	// path after the private tmpfs are mounted, so that a path below /tmp
	// (a task's data) stays visible.
	ReadOnly []string `json:"read_only"`
	// Rlimits are set by the init on itself before it starts the program,
	// which inherits them.
	Rlimits []rlimitSpec `json:"rlimits"`
}

// rlimitSpec is one resource limit (setrlimit(2)), soft and hard alike.
type rlimitSpec struct {
	Resource int    `json:"resource"`
	Max      uint64 `json:"max"`
}

// keepFile is a file the grader reads after a run, and the most bytes it
// reads of it.
type keepFile struct {
	Name string `json:"name"`
	Max  int64  `json:"max"`
}

// The init's report on fd 3, one line: "exit N", "signal N", "setup
// <message>" when the sandbox could not be set up (nothing ran), "start
// <message>" when the interpreter could not be started, or "host
// <message>" when what the run left could not be handed back to the
// grader (a host failure, not the run's).
const reportFD = 3

// runSandbox is the init of one run, started by the grader in a session
// of its own (no controlling terminal). It becomes a child subreaper, sets
// up the mounts and joins the cgroups it is given, starts the interpreter
// as its child (as the run's user, in a process group of its own inside
// that session, with no_new_privs), waits for it, kills every remaining
// process of the run, copies the kept files out of the run's tmpfs (with
// Mount) and reports how the interpreter ended. In a new PID namespace it
// is PID 1: its exit would kill whatever is left in the namespace.
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
	host, run, err := confine(sp)
	if err != nil {
		return say("setup %v", err)
	}
	if sp.Program == "" { // a probe: the sandbox is set up, nothing runs
		return say("exit 0")
	}
	cmd, err := startAndWait(sp)
	if err != nil {
		return say("start %v", err)
	}
	if os.Getpid() == 1 {
		// PID 1 of a namespace: kill(-1) reaches every other process of
		// the namespace and nothing outside it (a scan of /proc could miss
		// them where /proc is the host's). They are gone before what the
		// run left is copied back.
		killNamespace()
	} else {
		reap.KillDescendants()
	}
	if sp.Mount {
		if err := copyOut(run, host, sp.Keep); err != nil {
			return say("host %v", err)
		}
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return say("signal %d", int(ws.Signal()))
	}
	return say("exit %d", ws.ExitStatus())
}

// confine sets up the init itself, on the thread that will start the run:
// it becomes a child subreaper, joins sp.Cgroups, sets up the mounts (with
// sp.Mount: host and run as setupMounts returns them), drops every
// capability from the bounding set (with sp.DropCaps), sets no_new_privs
// and sp.Rlimits. Its error names the step that failed.
func confine(sp sandboxSpec) (host, run *os.File, err error) {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return nil, nil, fmt.Errorf("subreaper: %w", e)
	}
	// Joined first: /sys may be read-only after the mounts, and what
	// the init copies into the run's tmpfs is charged to the run.
	for _, cg := range sp.Cgroups {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte("0"), 0); err != nil {
			return nil, nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	if sp.Mount {
		if host, run, err = setupMounts(sp); err != nil {
			return nil, nil, fmt.Errorf("mount: %w", err)
		}
	}
	if sp.DropCaps {
		// With an empty bounding set (and the empty inheritable set every
		// process starts with), execve gives even user id 0 no capability.
		for c := 0; c < 64; c++ {
			if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapBSetDrop, uintptr(c), 0); e != 0 && e != syscall.EINVAL {
				return nil, nil, fmt.Errorf("drop capabilities: %w", e)
			}
		}
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); e != 0 {
		return nil, nil, fmt.Errorf("no_new_privs: %w", e)
	}
	for _, r := range sp.Rlimits {
		if err := unix.Setrlimit(r.Resource, &unix.Rlimit{Cur: r.Max, Max: r.Max}); err != nil {
			return nil, nil, fmt.Errorf("rlimit %d: %w", r.Resource, err)
		}
	}
	return host, run, nil
}

// startAndWait starts sp.Program as the init's child (as sp's user when
// it names one, in a process group of its own, killed if the init dies)
// and waits for it to end. A SIGTERM or SIGINT to the init kills the
// program's process group first. The error is the start's.
func startAndWait(sp sandboxSpec) (*exec.Cmd, error) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	cmd := exec.Command(sp.Program, sp.Args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = sp.Dir, sp.Env, os.Stdout, os.Stderr
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if sp.UID >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(sp.UID), Gid: uint32(sp.GID), Groups: []uint32{}}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-term:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	return cmd, nil
}

// prctl(2) options.
const (
	prCapBSetDrop       = 24
	prSetChildSubreaper = 36
	prSetNoNewPrivs     = 38
)

// setupMounts runs in the init's new mount namespace: nothing it mounts
// propagates back to the host. With sp.ReadOnlyRoot every mount of the
// view is first made read-only (mount_setattr, recursively). Every
// directory of sp.Private gets a fresh tmpfs (so /tmp, /dev/shm, /run and
// what lives there, host Unix sockets included, are out of sight, and what
// the run writes there dies with the namespace), the terminals are masked
// (maskTerminals), the run directory gets a tmpfs of its own holding a
// copy of the tree staged there, every path of sp.ReadOnly is bound
// read-only at its own path, /proc is remounted for the new PID
// namespace, and last every path of sp.Hide is masked (hidePaths: a
// directory by an empty read-only tmpfs, a file by /dev/null), so that no
// later mount brings a hidden path back. Every tmpfs has size=sp.TmpSize and
// nr_inodes=sp.Inodes (the run directory's that much beyond its staged
// files), so what a run writes cannot fill a file system another run or
// the host uses, and disappears with the namespace however many files it
// made. It returns the host's run directory (host: with ReadOnlyRoot, on a
// detached writable clone of its mount) and the run's tmpfs (run), for
// copyOut.
func setupMounts(sp sandboxSpec) (host, run *os.File, err error) {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return nil, nil, fmt.Errorf("make / private: %w", err)
	}
	ro, err := openReadOnlySources(sp.ReadOnly)
	defer func() {
		for _, f := range ro {
			f.Close()
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	if host, err = openHostDir(sp.Dir, sp.ReadOnlyRoot); err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			host.Close()
			if run != nil {
				run.Close()
			}
		}
	}()
	top, err := openDirAt(host, ".") // a directory stream of its own: copyTreeAt reads host's
	if err != nil {
		return nil, nil, fmt.Errorf("read run directory: %w", err)
	}
	stagedBytes, stagedFiles, err := treeSize(top, 0)
	top.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read run directory: %w", err)
	}
	if err := mountPrivate(sp.Private, sp.TmpSize, sp.Inodes); err != nil {
		return nil, nil, err
	}
	if err := maskTerminals(); err != nil {
		return nil, nil, err
	}
	if run, err = mountRunDir(sp, stagedBytes, stagedFiles); err != nil {
		return nil, nil, err
	}
	if err := copyTreeAt(host, run, sp.UID, sp.GID, 0); err != nil {
		return nil, nil, fmt.Errorf("copy into the run directory: %w", err)
	}
	for _, f := range ro {
		if err := bindReadOnly(f); err != nil {
			return nil, nil, err
		}
	}
	// A fresh /proc shows the run's own PID namespace only. Some kernels
	// refuse it inside containers; the run then sees the host's /proc,
	// where it can signal nothing outside its namespace.
	_ = syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	// The masks come last, over everything mounted above (a read-only
	// bind of a folder that holds a hidden file, the run directory's
	// copy, /proc), and fail closed.
	if err := hidePaths(sp.Hide); err != nil {
		return nil, nil, err
	}
	return host, run, nil
}

// openReadOnlySources opens every path of paths (O_PATH, not following a
// final symbolic link), before any mount covers them, for bindReadOnly.
// On an error it returns the files opened so far, for the caller to close.
func openReadOnlySources(paths []string) ([]*os.File, error) {
	var ro []*os.File
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return ro, fmt.Errorf("read-only path %s: %w", p, err)
		}
		ro = append(ro, os.NewFile(uintptr(fd), p))
	}
	return ro, nil
}

// openHostDir opens the host's run directory dir. With readOnlyRoot it
// is reached through a detached clone of its mount, which stays writable
// for copyOut, and then every mount of the view is made read-only
// (mount_setattr, recursively).
func openHostDir(dir string, readOnlyRoot bool) (*os.File, error) {
	if !readOnlyRoot {
		host, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, fmt.Errorf("open run directory: %w", err)
		}
		return host, nil
	}
	tfd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("clone the run directory's mount: %w", err)
	}
	fd, err := unix.Openat(tfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(tfd)
	if err != nil {
		return nil, fmt.Errorf("open run directory: %w", err)
	}
	host := os.NewFile(uintptr(fd), dir)
	if err := unix.MountSetattr(-1, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		host.Close()
		return nil, fmt.Errorf("make / read-only: %w", err)
	}
	return host, nil
}

// mountPrivate mounts a fresh tmpfs of size and inodes (tmpfsLimits) on
// every directory of private; a path that is absent, or not a directory
// (a symbolic link into another private directory, /var/run → /run), is
// passed over.
func mountPrivate(private []string, size int64, inodes int) error {
	opts := "mode=1777" + tmpfsLimits(size, inodes)
	for _, p := range private {
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := syscall.Mount("tmpfs", p, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", p, err)
		}
	}
	return nil
}

// mountRunDir mounts the run's own tmpfs on sp.Dir, owned by the run's
// user, with room for the staged tree (stagedBytes in stagedFiles files)
// beyond sp.TmpSize and sp.Inodes, and opens it. The directory is made
// again when a private tmpfs covers it; one below a path of sp.Hide could
// not be reached, and is an error.
func mountRunDir(sp sandboxSpec, stagedBytes int64, stagedFiles int) (*os.File, error) {
	for _, p := range sp.Hide {
		if within(sp.Dir, p) {
			return nil, fmt.Errorf("the run directory %s lies below the hidden path %s", sp.Dir, p)
		}
	}
	if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	size := sp.TmpSize
	if size > 0 {
		size += stagedBytes
	}
	inodes := sp.Inodes
	if inodes > 0 {
		inodes += stagedFiles + 1
	}
	ropts := "mode=0700" + tmpfsLimits(size, inodes)
	if sp.UID >= 0 {
		ropts += fmt.Sprintf(",uid=%d,gid=%d", sp.UID, sp.GID)
	}
	if err := syscall.Mount("tmpfs", sp.Dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, ropts); err != nil {
		return nil, fmt.Errorf("tmpfs on the run directory: %w", err)
	}
	run, err := os.OpenFile(sp.Dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open the run directory's tmpfs: %w", err)
	}
	return run, nil
}

// maskFailure begins the init's setup report when a hidden path could
// not be masked (hidePaths): runSandboxed never degrades past it.
const maskFailure = "mount: hide "

// hidePaths masks every path of hide in the run's view, once every other
// mount is in place: a directory by an empty read-only tmpfs, anything
// else by /dev/null. A path absent from the view (below a private tmpfs
// and no read-only bind) is out of sight already. It fails closed: a path
// that cannot be looked up or masked, or that is neither absent nor
// masked afterwards (checkHidden), is an error, and nothing runs.
func hidePaths(hide []string) error {
	for _, p := range hide {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("hide %s: %w", p, err)
		case fi.IsDir():
			err = syscall.Mount("tmpfs", p, "tmpfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0555,size=4k")
		default:
			err = syscall.Mount("/dev/null", p, "", syscall.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	for _, p := range hide {
		if err := checkHidden(p); err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	return nil
}

// errNotMasked: a hidden path is still visible in the run's view.
var errNotMasked = errors.New("still visible after masking")

// checkHidden reports whether p is out of the run's sight: absent, an
// empty directory on a tmpfs, or /dev/null.
func checkHidden(p string) error {
	var st unix.Stat_t
	err := unix.Stat(p, &st)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return nil
	case err != nil:
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		var fs unix.Statfs_t
		if err := unix.Statfs(p, &fs); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(1)
		f.Close()
		if fs.Type != unix.TMPFS_MAGIC || len(names) > 0 || (err != nil && err != io.EOF) {
			return errNotMasked
		}
		return nil
	}
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != null.Rdev {
		return errNotMasked
	}
	return nil
}

// maxTreeDepth bounds the depth of the tree staged in a run directory
// (the caller's, not the run's: a code directory is shallow).
const maxTreeDepth = 64

// treeSize returns the bytes of the regular files and the number of
// entries of the tree below dir.
func treeSize(dir *os.File, depth int) (bytes int64, entries int, err error) {
	if depth > maxTreeDepth {
		return 0, 0, fmt.Errorf("%s: deeper than %d levels", dir.Name(), maxTreeDepth)
	}
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		entries++
		switch {
		case e.Type().IsRegular():
			var st unix.Stat_t
			if err := unix.Fstatat(int(dir.Fd()), e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
				bytes += st.Size
			}
		case e.IsDir():
			sub, err := openDirAt(dir, e.Name())
			if err != nil {
				return 0, 0, err
			}
			b, n, err := treeSize(sub, depth+1)
			sub.Close()
			if err != nil {
				return 0, 0, err
			}
			bytes, entries = bytes+b, entries+n
		}
	}
	return bytes, entries, nil
}

// openDirAt opens the directory name below dir without following a
// symbolic link.
func openDirAt(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/%s: %w", dir.Name(), name, err)
	}
	return os.NewFile(uintptr(fd), dir.Name()+"/"+name), nil
}

// copyTreeAt copies the regular files and directories below from into
// to, owned by uid and gid (-1: the init's), keeping each one's
// permission bits; anything else (a link, a FIFO) is left out.
func copyTreeAt(from, to *os.File, uid, gid, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: deeper than %d levels", from.Name(), maxTreeDepth)
	}
	ents, err := from.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range ents {
		// Not e.Info(): it stats by path, and the path is the run's
		// tmpfs now.
		var st unix.Stat_t
		if err := unix.Fstatat(int(from.Fd()), e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		perm := st.Mode & 0o777
		switch {
		case e.Type().IsRegular():
			if err := copyAt(from, to, e.Name(), -1, uid, gid, perm); err != nil {
				return fmt.Errorf("%s: %w", e.Name(), err)
			}
		case e.IsDir():
			if err := unix.Mkdirat(int(to.Fd()), e.Name(), perm|0o700); err != nil {
				return fmt.Errorf("%s: %w", e.Name(), err)
			}
			src, err := openDirAt(from, e.Name())
			if err != nil {
				return err
			}
			dst, err := openDirAt(to, e.Name())
			if err != nil {
				src.Close()
				return err
			}
			err = copyTreeAt(src, dst, uid, gid, depth+1)
			if err == nil && uid >= 0 {
				err = dst.Chown(uid, gid)
			}
			if err == nil {
				err = dst.Chmod(os.FileMode(perm | 0o700))
			}
			src.Close()
			dst.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// bindReadOnly binds the host path that f (an O_PATH descriptor opened
// before the private tmpfs covered it) names, read-only, at the same path
// in the run's view, making the mount point first when a private tmpfs
// hides it.
func bindReadOnly(f *os.File) error {
	p := f.Name()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("read-only path %s: %w", p, err)
	}
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("read-only path %s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o444)
		}
		if err != nil {
			return fmt.Errorf("read-only path %s: %w", p, err)
		}
	}
	src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := syscall.Mount(src, p, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	const ro = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if err := unix.MountSetattr(-1, p, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: ro}); err != nil {
		return fmt.Errorf("bind %s read-only: %w", p, err)
	}
	return nil
}

// tmpfsLimits is the size= and nr_inodes= options of a tmpfs (none for 0:
// the kernel's defaults).
func tmpfsLimits(size int64, inodes int) string {
	var o string
	if size > 0 {
		o += ",size=" + strconv.FormatInt(size, 10)
	}
	if inodes > 0 {
		o += ",nr_inodes=" + strconv.Itoa(inodes)
	}
	return o
}

// maskTerminals hides the terminals from the run in its mount namespace,
// behind the new session that already leaves it no controlling terminal:
// /dev/tty becomes a read-only empty file of mode 0, which the run (no
// capability, and not its owner as a root grader's run; on a read-only
// mount either way) cannot open, and /dev/pts an empty read-only tmpfs:
// no pseudo-terminal slave can be opened, and /dev/ptmx, which finds its
// devpts at /dev/pts, makes none. The mask file lives on a first tmpfs on
// /dev/pts that the empty one then covers.
func maskTerminals() error {
	const flags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	fi, err := os.Stat("/dev/pts")
	if err != nil || !fi.IsDir() {
		return nil // no pseudo-terminals here, and nowhere for the mask file
	}
	if err := syscall.Mount("tmpfs", "/dev/pts", "tmpfs", flags, "mode=0555,size=4k,nr_inodes=4"); err != nil {
		return fmt.Errorf("tmpfs on /dev/pts: %w", err)
	}
	if _, err := os.Lstat("/dev/tty"); err == nil {
		const mask = "/dev/pts/tty"
		fd, err := syscall.Open(mask, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("mask /dev/tty: %w", err)
		}
		syscall.Close(fd)
		if err := syscall.Mount(mask, "/dev/tty", "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask /dev/tty: %w", err)
		}
		if err := syscall.Mount("", "/dev/tty", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|flags, ""); err != nil {
			return fmt.Errorf("mask /dev/tty read-only: %w", err)
		}
	}
	if err := syscall.Mount("tmpfs", "/dev/pts", "tmpfs", syscall.MS_RDONLY|flags, "mode=0555,size=4k,nr_inodes=4"); err != nil {
		return fmt.Errorf("read-only tmpfs on /dev/pts: %w", err)
	}
	return nil
}

// killNamespace, in PID 1 of a PID namespace, kills every other process
// of the namespace and reaps them all: as PID 1 (a subreaper too) it is
// the parent of every orphan.
func killNamespace() {
	_ = syscall.Kill(-1, syscall.SIGKILL)
	for {
		_, err := syscall.Wait4(-1, nil, 0, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return // ECHILD: none left
		}
	}
}

// notRegular is the target of the symbolic link copyOut leaves in place
// of a kept file that was not a regular file: the grader's read (no
// symbolic link followed) reports errNotRegular, as it would have on the
// run's own file.
const notRegular = "(not a regular file)"

// copyOut copies each kept file of the run's tmpfs (every process of the
// run is gone) into the grader's run directory: at most its Max+1 bytes
// (so that the grader still sees a file too large), opened without
// following a symbolic link or blocking on a FIFO, and only a regular
// file; anything else there is left as a symbolic link to notRegular. An
// error is the host's: the grader's directory refused a write.
func copyOut(run, host *os.File, keep []keepFile) error {
	for _, k := range keep {
		err := unix.Unlinkat(int(host.Fd()), k.Name, 0)
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("copy out %s: %w", k.Name, err)
		}
		err = copyAt(run, host, k.Name, k.Max+1, -1, -1, 0o600)
		switch {
		case err == nil || errors.Is(err, syscall.ENOENT):
		case errors.Is(err, errNotRegular):
			if err := unix.Symlinkat(notRegular, int(host.Fd()), k.Name); err != nil {
				return fmt.Errorf("copy out %s: %w", k.Name, err)
			}
		default:
			return fmt.Errorf("copy out %s: %w", k.Name, err)
		}
	}
	return nil
}

// copyAt copies the regular file name of directory from to a new file of
// that name in directory to, at most max bytes (-1: all), owned by uid and
// gid (-1: the init's) with mode perm. The source is opened without
// following a symbolic link or blocking on a FIFO; anything but a regular
// file there is errNotRegular, and an absent one ENOENT.
func copyAt(from, to *os.File, name string, max int64, uid, gid int, perm uint32) error {
	sfd, err := unix.Openat(int(from.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return err
	case err != nil: // ELOOP (a symbolic link), ENXIO (a socket), EACCES...
		return errNotRegular
	}
	src := os.NewFile(uintptr(sfd), name)
	defer src.Close()
	if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
		return errNotRegular
	}
	dfd, err := unix.Openat(int(to.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(dfd), name)
	defer dst.Close()
	var r io.Reader = src
	if max >= 0 {
		r = io.LimitReader(src, max)
	}
	if _, err := io.Copy(dst, r); err != nil {
		return err
	}
	if uid >= 0 {
		if err := dst.Chown(uid, gid); err != nil {
			return err
		}
	}
	if err := dst.Chmod(os.FileMode(perm)); err != nil { // whatever the umask took
		return err
	}
	return dst.Close()
}

// ending is how a run's interpreter ended, from the init's report.
type ending struct {
	setup  string // non-empty: the sandbox could not be set up
	start  string // non-empty: the interpreter could not be started
	host   string // non-empty: what the run left could not be handed back
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
	case "host":
		return ending{host: oneLine(rest, 300), ok: true}
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
