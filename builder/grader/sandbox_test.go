package grader

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/reward"
)

// unprivilegedEnv marks a re-execution of the test binary as an
// unprivileged user (TestRequireIsolation).
const unprivilegedEnv = "LM2LM_GRADER_TEST_UNPRIVILEGED"

func TestRequireIsolation(t *testing.T) {
	c := DefaultConfig()
	c.Isolate, c.RequireIsolation = false, true
	require.Error(t, c.Validate(), "RequireIsolation without Isolate")

	if os.Geteuid() == 0 {
		// As root the host gives everything here; an unprivileged user is
		// the host that cannot: run this test again as nobody.
		runAsNobody(t, "^TestRequireIsolation$")
		return
	}
	// Not root: no user of the run's own, no cgroups. Required, that is
	// ErrIsolation naming what is missing; not required, a run without it.
	g, tk := newToyGrader(t, func(c *Config) { c.RequireIsolation = true })
	_, err := g.Grade(context.Background(), tk, solExact)
	require.ErrorIs(t, err, ErrIsolation)
	require.Contains(t, err.Error(), "a user of the run's own")
	require.Contains(t, err.Error(), "cgroup limits")

	g, tk = newToyGrader(t, nil)
	gr, err := g.Grade(context.Background(), tk, solExact)
	require.NoError(t, err)
	t.Logf("unprivileged: %s; sandbox %+v", gr.Summary(), gr.Sandbox)
	require.Equal(t, reward.ValidSubmission, gr.Status)
	require.Zero(t, gr.Sandbox.UID)
	require.Empty(t, gr.Sandbox.Cgroup)
	require.Contains(t, gr.Sandbox.Missing, "a user of the run's own")
	require.Equal(t, gr.Sandbox.Network, gr.Isolated)
	if gr.Sandbox.Mount {
		requireMountsStay(t, g, tk)
	}
}

// undoMounts tries to unmount the run's private /tmp (a solution with a
// capability left could show itself the host's /tmp) and exits 0 only if
// it has no capability and the unmount fails.
const undoMounts = `import ctypes, sys
caps = int([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1], 16)
libc = ctypes.CDLL(None, use_errno=True)
r = libc.umount2(b'/tmp', 2)
print('CapEff %x umount2 %d' % (caps, r))
sys.exit(0 if caps == 0 and r != 0 else 5)
`

func requireMountsStay(t *testing.T, g *Grader, tk Task) {
	t.Helper()
	gr, err := g.Grade(context.Background(), tk, undoMounts)
	require.NoError(t, err)
	require.Equal(t, reward.RanNoSubmission, gr.Status, "%s\n%s", gr.Summary(), gr.Log)
}

func TestHostileUndoesMounts(t *testing.T) {
	needSandbox(t)
	g, tk := newToyGrader(t, nil)
	requireMountsStay(t, g, tk)
}

// runAsNobody runs the tests matching pattern in a copy of the test binary
// as user and group 65534 and fails t if they fail.
func runAsNobody(t *testing.T, pattern string) {
	t.Helper()
	if os.Getenv(unprivilegedEnv) != "" {
		t.Fatal("still root after dropping privileges")
	}
	dir, err := os.MkdirTemp("", "lm2lm-grader-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.Open("/proc/self/exe")
	require.NoError(t, err)
	defer self.Close()
	bin := filepath.Join(dir, "grader.test")
	out, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, self)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + os.TempDir(), "HOME=" + dir, unprivilegedEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	b, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", b)
	require.NoError(t, err)
	require.Contains(t, string(b), "--- PASS")
}

func TestCgroupMounts(t *testing.T) {
	// Lines of this host's kind of /proc/self/mountinfo (cgroup v1 with a
	// cgroup2 mount beside it), a container's (cgroup2 at a non-root
	// path) and an escaped space.
	info := strings.Join([]string{
		`30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755`,
		`35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory`,
		`36 30 0:32 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids`,
		`37 30 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct`,
		`38 30 0:34 /docker/abc /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw`,
		`39 30 0:35 / /mnt/with\040space rw - cgroup2 cgroup2 rw`,
		`garbage`,
	}, "\n")
	v2, v1 := cgroupMounts([]byte(info))
	require.Equal(t, &cgroupMount{root: "/docker/abc", point: "/sys/fs/cgroup/unified"}, v2)
	require.Equal(t, "/sys/fs/cgroup/memory", v1["memory"].point)
	require.Equal(t, "/sys/fs/cgroup/pids", v1["pids"].point)
	require.Equal(t, "/sys/fs/cgroup/cpu,cpuacct", v1["cpu"].point)
	require.Len(t, v1, 3)
	require.Equal(t, "/sys/fs/cgroup/unified/x", v2.join("/docker/abc/x"))
	require.Equal(t, "/sys/fs/cgroup/unified", v2.join("/elsewhere"), "outside the mounted root")
	require.Equal(t, "/mnt/with space", unescapeMount(`/mnt/with\040space`))
}

func TestParseReport(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want ending
		how  string
	}{
		{"exit 0\n", ending{ok: true}, ""},
		{"exit 11\n", ending{code: 11, ok: true}, "exit status 11"},
		{"signal 9\n", ending{signal: syscall.SIGKILL, ok: true}, "signal: killed"},
		{"setup mount: tmpfs on /tmp: operation not permitted\n", ending{setup: "mount: tmpfs on /tmp: operation not permitted", ok: true}, ""},
		{"start fork/exec /nope: no such file", ending{start: "fork/exec /nope: no such file", ok: true}, ""},
		{"host copy out submission.csv: no space left on device", ending{host: "copy out submission.csv: no space left on device", ok: true}, ""},
		{"exit 300", ending{}, ""},
		{"exit -1", ending{}, ""},
		{"", ending{}, ""},
		{"hello", ending{}, ""},
	} {
		got := parseReport([]byte(tt.in))
		require.Equal(t, tt.want, got, "%q", tt.in)
		_, how := got.failed()
		require.Equal(t, tt.how, how, "%q", tt.in)
	}
}

func FuzzParseReport(f *testing.F) {
	for _, s := range []string{"exit 0\n", "signal 9", "setup x", "start y", "exit 256", "exit 1\nexit 2\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := parseReport([]byte(s))
		if !e.ok && (e != ending{}) {
			t.Fatalf("%q: an unread report with content %+v", s, e)
		}
		if e.code < 0 || e.code > 255 || e.signal < 0 || e.signal > 255 || len(e.setup) > 400 || len(e.start) > 400 || len(e.host) > 400 {
			t.Fatalf("%q: out of range %+v", s, e)
		}
	})
}

func TestIsolationRefused(t *testing.T) {
	// A host whose mounts cannot be set up: the run directory lies below
	// a masked path, so the init cannot bind it back (a read-only mask).
	// The directory is made here, outside the private /tmp.
	wd, err := os.Getwd()
	require.NoError(t, err)
	for _, d := range privateDirs {
		if wd == d || strings.HasPrefix(wd, d+"/") {
			t.Skipf("the checkout %s lies under %s, which the sandbox replaces with its own tmpfs: no directory outside it to mask", wd, d)
		}
	}
	hidden, err := os.MkdirTemp(wd, "hidden-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(hidden) })
	require.NoError(t, os.Chmod(hidden, 0o755))
	edit := func(c *Config) { c.TempDir = hidden }

	g, tk := newToyGrader(t, func(c *Config) { edit(c); c.RequireIsolation = true })
	tk.Hide = []string{hidden}
	g.tasks[tk.ID] = tk
	_, err = g.Grade(context.Background(), tk, solExact)
	if os.Geteuid() == 0 {
		require.ErrorIs(t, err, ErrIsolation)
		require.Contains(t, err.Error(), "run directory")
	} else {
		require.ErrorIs(t, err, ErrIsolation) // no own user, no cgroups, before any mount
	}

	// Not required: the run goes ahead without namespaces and says so.
	g, tk = newToyGrader(t, edit)
	tk.Hide = []string{hidden}
	g.tasks[tk.ID] = tk
	gr, err := g.Grade(context.Background(), tk, solExact)
	require.NoError(t, err)
	t.Logf("%s; sandbox %+v", gr.Summary(), gr.Sandbox)
	require.Equal(t, reward.ValidSubmission, gr.Status)
	require.False(t, gr.Sandbox.Mount || gr.Sandbox.PID || gr.Sandbox.Network || gr.Isolated)
	require.Contains(t, gr.Sandbox.Missing, "namespaces")
}
