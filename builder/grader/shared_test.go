package grader

// Hostile solutions aimed at what a run shares with the grader and with
// other runs: the terminal the grader was started from, the CPUs, the
// temporary file system, the grader's own descriptors, and the grade it
// reports (docs/sandbox.md, "What the tests check").

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// ttyHelperEnv marks a re-execution of the test binary that grades under
// a pseudo-terminal (TestHostileTerminal); its value is the mode
// ("namespaces" or "none"), and ttyTokenEnv holds the token the solution
// tries to put on the terminal.
const (
	ttyHelperEnv = "LM2LM_GRADER_TEST_TTY"
	ttyTokenEnv  = "LM2LM_GRADER_TEST_TTY_TOKEN"
)

// ttySolution tries every way to the terminal of the grader: open
// /dev/tty, queue a command with TIOCSTI there and on its own descriptors,
// open the pseudo-terminal slaves, and write the token wherever it got.
// Its last line lists what it reached.
const ttySolution = `import fcntl, os, termios
tok = %q
seen = []
def inject(fd, what):
    try:
        for c in ('echo ' + tok + '\n').encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        seen.append('injected through ' + what)
    except OSError as e:
        print('TIOCSTI on', what, e)
def reach(path):
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        print(path, e)
        return
    seen.append('opened ' + path)
    inject(fd, path)
    os.write(fd, (tok + ' written\n').encode())
reach('/dev/tty')
for fd in (0, 1, 2):
    inject(fd, 'fd %%d' %% fd)
if os.path.isdir('/dev/pts'):
    for n in os.listdir('/dev/pts'):
        if n.isdigit():
            reach('/dev/pts/' + n)
print('REACHED', seen)
`

func TestHostileTerminal(t *testing.T) {
	// A grader started from a terminal: the run once shared its session,
	// opened /dev/tty and queued a command with TIOCSTI that the
	// operator's shell ran after the grader exited.
	if mode := os.Getenv(ttyHelperEnv); mode != "" {
		ttyHelper(t, mode)
		return
	}
	for _, mode := range []string{"namespaces", "none"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "namespaces" {
				needSandbox(t)
			}
			if _, err := os.Stat("/usr/bin/python3"); err != nil {
				t.Skip("no /usr/bin/python3")
			}
			master, slave := openPTY(t)
			tok := token(t)
			cmd := exec.Command("/proc/self/exe", "-test.run=^TestHostileTerminal$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), ttyHelperEnv+"="+mode, ttyTokenEnv+"="+tok)
			var out bytes.Buffer
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, &out, &out
			// The helper leads a session whose controlling terminal is the
			// slave (its fd 0), as a shell started from a terminal does.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			got := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(master); got <- b }()
			err := cmd.Run()
			slave.Close()
			// Once no slave descriptor is left the master reads EIO; the
			// deadline is only there so a leaked descriptor cannot hang
			// the test.
			_ = master.SetReadDeadline(time.Now().Add(5 * time.Second))
			screen := <-got
			t.Logf("helper:\n%s\nterminal: %q", out.String(), screen)
			require.NoError(t, err, "the helper failed")
			require.Contains(t, out.String(), "--- PASS")
			require.NotContains(t, string(screen), tok, "the run reached the terminal")
		})
	}
}

// ttyHelper is TestHostileTerminal inside the helper: it grades
// ttySolution and checks that nothing reached its terminal, fd 0.
func ttyHelper(t *testing.T, mode string) {
	g, tk := newToyGrader(t, func(c *Config) { c.Isolate = mode == "namespaces" })
	gr := gradeWithin(t, g, tk, fmt.Sprintf(ttySolution, os.Getenv(ttyTokenEnv)))
	t.Logf("run's output:\n%s", gr.Log)
	queued, err := unix.IoctlGetInt(0, unix.TIOCINQ)
	require.NoError(t, err)
	require.Zero(t, queued, "the run queued input on the grader's terminal")
	require.Contains(t, gr.Log, "REACHED", gr.Summary())
	reached := gr.Log[strings.LastIndex(gr.Log, "REACHED"):]
	if mode == "none" && os.Geteuid() != 0 {
		// Without namespaces a grader that is not root runs the solution
		// as itself, the owner of its terminal's slave (docs/sandbox.md).
		require.NotContains(t, reached, "/dev/tty")
		require.NotContains(t, reached, "injected")
		return
	}
	require.Equal(t, "REACHED []", strings.TrimSpace(reached))
}

// openPTY opens a pseudo-terminal pair; the master is non-blocking (read
// deadlines work), the slave is no controlling terminal of this process.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	rc, err := master.SyscallConn()
	require.NoError(t, err)
	var n uint32
	var ierr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
		}
	}))
	require.NoError(t, ierr)
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("cannot open the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

func TestHostileStarvesCPU(t *testing.T) {
	// A fork bomb up to the process limit (about 250 processes spinning)
	// once took nearly all of the CPUs from an honest run beside it, which
	// then timed out.
	needSandbox(t)
	g, tk := newToyGrader(t, func(c *Config) { c.Timeout = 8 * time.Second })
	if gr := gradeWithin(t, g, tk, "pass\n"); !gr.Sandbox.CPU {
		t.Skipf("no CPU share of its own for a run on this host: %s", gr.Sandbox.Missing)
	}
	bomb := `import os
while True:
    try:
        if os.fork() == 0:
            break
    except OSError:
        break
while True:
    pass
`
	// Half a second of CPU in CPython, then the exact answer.
	honest := "n = 0\nfor i in range(10 ** 7):\n    n += i\n" + solExact
	var wg sync.WaitGroup
	var bad, good Grade
	var badErr, goodErr error
	wg.Add(2)
	go func() { defer wg.Done(); bad, badErr = g.Grade(context.Background(), tk, bomb) }()
	go func() {
		defer wg.Done()
		time.Sleep(time.Second) // the bomb is up
		good, goodErr = g.Grade(context.Background(), tk, honest)
	}()
	wg.Wait()
	require.NoError(t, badErr)
	require.NoError(t, goodErr)
	t.Logf("hostile: %s; honest: %s", bad.Summary(), good.Summary())
	require.Equal(t, reward.ValidSubmission, good.Status, "the honest run was starved: %s", good.Summary())
	require.InDelta(t, 0.5+0.5*(2.5/3), good.Score, 1e-12)
}

// deepTree makes n nested directories in the run directory, or as many as
// it can, and prints how far it got.
const deepTree = `import os
k = 0
try:
    for k in range(%d):
        os.mkdir('d')
        os.chdir('d')
except OSError as e:
    print('stopped at', k)
    raise
`

// openTempDir returns a fresh directory that a run's user can reach (as
// Config.TempDir).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return dir
}

func TestHostileDeepTree(t *testing.T) {
	// Nested directories deeper than the descriptors the grader may hold
	// once made the cleanup (os.RemoveAll, one descriptor a level) fail
	// with "too many open files"; the failure was ignored and the run
	// directory stayed. The host's 593,139 levels are 2,000 here, under a
	// descriptor limit of 256.
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = min(lim.Cur, 256)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })

	for _, mode := range []string{"namespaces", "none"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "namespaces" {
				needSandbox(t)
			}
			tmp := openTempDir(t)
			g, tk := newToyGrader(t, func(c *Config) { c.Isolate, c.TempDir = mode == "namespaces", tmp })
			gr := gradeWithin(t, g, tk, fmt.Sprintf(deepTree, 2000))
			require.Equal(t, reward.RanNoSubmission, gr.Status, "%s\n%s", gr.Summary(), gr.Log)
			require.NotContains(t, gr.Detail, "not removed")
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			require.Empty(t, left, "the run directory outlived the grade")
		})
	}

	t.Run("inodes", func(t *testing.T) {
		// With a mount namespace the run directory is a tmpfs of its own,
		// nr_inodes = Config.Inodes beyond the staged files.
		needSandbox(t)
		g, tk := newToyGrader(t, func(c *Config) { c.Inodes = 500 })
		gr := gradeWithin(t, g, tk, fmt.Sprintf(deepTree, 5000))
		if !gr.Sandbox.Mount {
			t.Skipf("no mount namespace: %s", gr.Sandbox.Missing)
		}
		require.Equal(t, reward.RuntimeError, gr.Status, "%s\n%s", gr.Summary(), gr.Log)
		require.Equal(t, "OSError", gr.ErrorType)
		require.Contains(t, gr.Detail, "No space left on device")
	})

	t.Run("failure reported", func(t *testing.T) {
		// A cleanup that fails says so in the grade and in the log.
		saved := removeRunDir
		t.Cleanup(func() { removeRunDir = saved })
		removeRunDir = func(dir string) error {
			_ = removeTree(dir)
			return errors.New("injected failure")
		}
		var logged bytes.Buffer
		g, tk := newToyGrader(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logged, nil)) })
		gr := gradeWithin(t, g, tk, solExact)
		require.Equal(t, reward.ValidSubmission, gr.Status)
		require.Contains(t, gr.Detail, "not removed: injected failure")
		require.Contains(t, logged.String(), "injected failure")
	})
}

func TestRemoveTree(t *testing.T) {
	// What a run may leave: deep and wide trees, unreadable directories,
	// links, FIFOs.
	dir := t.TempDir()
	root := filepath.Join(dir, "run")
	require.NoError(t, os.Mkdir(root, 0o700))
	p, locked := root, ""
	for i := range 300 {
		p = filepath.Join(p, "d")
		require.NoError(t, os.Mkdir(p, 0o755))
		if i%50 == 0 {
			for j := range 20 {
				require.NoError(t, os.WriteFile(filepath.Join(p, fmt.Sprintf("f%d", j)), []byte("x"), 0o644))
				require.NoError(t, os.Mkdir(filepath.Join(p, fmt.Sprintf("e%d", j)), 0o755))
			}
			require.NoError(t, os.Symlink("/", filepath.Join(p, "root")))
			require.NoError(t, syscall.Mkfifo(filepath.Join(p, "fifo"), 0o644))
		}
		if i == 100 {
			locked = p
		}
	}
	require.NoError(t, os.Chmod(locked, 0)) // unreadable to a grader that is not root, which owns it
	require.NoError(t, removeTree(root))
	_, err := os.Lstat(root)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, removeTree(root), "an absent directory is removed")
}

func TestHostileFillsDisk(t *testing.T) {
	// A run that filled the temporary file system once made an honest
	// grade beside it fail to stage its files. The file system here is a
	// tmpfs of 16 MiB made for the test.
	needSandbox(t)
	disk := openTempDir(t)
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=16m,mode=0755"); err != nil {
		t.Skipf("cannot mount a small file system for the test: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	g, tk := newToyGrader(t, func(c *Config) { c.TempDir, c.Memory = disk, 256<<20 })
	fill := `import time
for k in range(16):
    try:
        with open('blob%d' % k, 'wb') as f:
            f.write(b'x' * (4 << 20))
    except OSError as e:
        print('full after', k, e)
        break
time.sleep(3)
`
	var bad Grade
	var badErr error
	done := make(chan struct{})
	go func() { defer close(done); bad, badErr = g.Grade(context.Background(), tk, fill) }()
	// Wait until the disk is full, or for long enough that a run writing
	// there would have filled it.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var st syscall.Statfs_t
		require.NoError(t, syscall.Statfs(disk, &st))
		if st.Bavail*uint64(st.Bsize) < 1<<20 {
			t.Log("the shared file system is full")
			break
		}
	}
	good, err := g.Grade(context.Background(), tk, solExact)
	<-done
	require.NoError(t, badErr)
	t.Logf("hostile: %s (%s); honest: %s, %v", bad.Summary(), strings.TrimSpace(bad.Log), good.Summary(), err)
	require.NoError(t, err, "the honest grade could not stage its files")
	require.Equal(t, reward.ValidSubmission, good.Status, good.Summary())
	require.True(t, bad.Sandbox.Mount, "the hostile run had no mount namespace: %s", bad.Sandbox.Missing)
}

func TestHostileHugeDetail(t *testing.T) {
	// An 8 MB header, or an id of 7 MB, was quoted whole in Grade.Detail;
	// a forged status file's error type and message too.
	g, tk := newToyGrader(t, nil)
	huge := "'x' * (8 << 20)"
	for name, tc := range map[string]struct{ code, want string }{
		"header": {"open('submission.csv', 'w').write(" + huge + " + ',target\\n')\n", "lacks id or target"},
		"repeated id": {"f = open('submission.csv', 'w')\nf.write('id,target\\n')\n" +
			"for _ in range(2):\n    f.write('y' * (7 << 20) + ',1\\n')\n", "repeated"},
		"forged status": {"import json, os\njson.dump({'status': 'runtime_err', 'error_type': 'E' * 30000, " +
			"'error_line': 1, 'message': 'm' * 30000}, open('.status.json', 'w'))\nos._exit(11)\n", "mmm"},
	} {
		t.Run(name, func(t *testing.T) {
			gr := gradeWithin(t, g, tk, tc.code)
			require.Contains(t, gr.Detail, tc.want)
			require.LessOrEqual(t, len(gr.Detail), maxDetail)
			require.LessOrEqual(t, len(gr.ErrorType), records.MaxExcerpt+32)
			require.Less(t, len(gr.Summary()), 400)
		})
	}
}
