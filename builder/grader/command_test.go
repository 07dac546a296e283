package grader

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
)

// runDir makes a run directory holding sub/a.txt, and a data file beside
// it (below /tmp, which the run sees only through a read-only bind).
func runDir(t *testing.T) (dir, data string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "run")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "a.txt"), []byte("tree-A\n"), 0o644))
	data = filepath.Join(base, "data.txt")
	require.NoError(t, os.WriteFile(data, []byte("data-D\n"), 0o644))
	return dir, data
}

func newSandbox(t *testing.T, edit func(*SandboxConfig)) *Sandbox {
	t.Helper()
	c := DefaultSandboxConfig()
	if edit != nil {
		edit(&c)
	}
	s, err := NewSandbox(c)
	require.NoError(t, err)
	return s
}

// A command sees a copy of its directory's tree, its data through a
// read-only bind, the minimal environment and Env; it writes only its
// copy, and only the kept file comes back.
func TestSandboxRun(t *testing.T) {
	needSandbox(t)
	t.Setenv("LM2LM_SECRET_KEY", "sk-not-for-runs")
	dir, data := runDir(t)
	out := builder.NewTail(4 << 10)
	s := newSandbox(t, nil)
	script := `set -e
cat sub/a.txt; cat ` + data + `
echo kept > out.txt; echo junk > junk.txt; echo changed > sub/a.txt
echo "uid $(id -u)"
if echo x > ` + data + ` 2>/dev/null; then echo "data writable"; fi
env | sort | sed 's/^/env /'`
	r, err := s.Run(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", script}, Dir: dir,
		Env: []string{"OMP_NUM_THREADS=1"}, ReadOnly: []string{data}, Keep: []string{"out.txt"}, Stdout: out, Stderr: out})
	require.NoError(t, err)
	log := out.String()
	require.Zero(t, r.ExitCode, log)
	require.Contains(t, log, "tree-A\ndata-D\n")
	require.NotContains(t, log, "data writable")
	require.Contains(t, log, "uid "+strconv.Itoa(r.Sandbox.UID))
	var env []string
	for _, l := range strings.Split(log, "\n") {
		if k, ok := strings.CutPrefix(l, "env "); ok {
			env = append(env, strings.SplitN(k, "=", 2)[0])
		}
	}
	sort.Strings(env)
	require.Equal(t, []string{"HOME", "LANG", "OMP_NUM_THREADS", "PATH", "PWD", "TMPDIR"}, env)

	require.True(t, r.Sandbox.Network && r.Sandbox.PID && r.Sandbox.Mount, "%+v", r.Sandbox)
	require.GreaterOrEqual(t, r.Sandbox.UID, DefaultSandboxConfig().UIDFirst)
	require.NotEmpty(t, r.Sandbox.Cgroup)
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	require.NoError(t, err)
	require.Equal(t, "kept\n", string(b))
	require.NoFileExists(t, filepath.Join(dir, "junk.txt"))
	b, err = os.ReadFile(filepath.Join(dir, "sub", "a.txt"))
	require.NoError(t, err)
	require.Equal(t, "tree-A\n", string(b), "the run changed its copy, not the directory")
	b, err = os.ReadFile(data)
	require.NoError(t, err)
	require.Equal(t, "data-D\n", string(b))

	iso, err := s.Probe(context.Background())
	require.NoError(t, err)
	require.Equal(t, r.Sandbox.Cgroup, iso.Cgroup)
	require.True(t, iso.Mount)
}

// How a command ends is a Result: an exit code, a signal, a timeout (and
// nothing of it left), a cancellation is an error.
func TestSandboxEndings(t *testing.T) {
	needSandbox(t)
	tests := []struct {
		name, script string
		timeout      time.Duration
		want         Result
	}{
		{"exit", "exit 7", 0, Result{ExitCode: 7}},
		{"signal", "kill -9 $$", 0, Result{ExitCode: -1, Signal: syscall.SIGKILL}},
		{"timeout", "setsid sleep 300 & sleep 300", 500 * time.Millisecond, Result{ExitCode: -1, Signal: syscall.SIGKILL, TimedOut: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := runDir(t)
			s := newSandbox(t, func(c *SandboxConfig) { c.Timeout = tt.timeout })
			start := time.Now()
			r, err := s.Run(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", tt.script}, Dir: dir})
			require.NoError(t, err)
			require.Equal(t, tt.want.ExitCode, r.ExitCode)
			require.Equal(t, tt.want.Signal, r.Signal)
			require.Equal(t, tt.want.TimedOut, r.TimedOut)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
	t.Run("cancel", func(t *testing.T) {
		dir, _ := runDir(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := newSandbox(t, nil).Run(ctx, Command{Path: "/bin/sleep", Args: []string{"300"}, Dir: dir})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// Without namespaces (not required) the command works in its directory
// itself, and the Result says what it lacked.
func TestSandboxWithoutNamespaces(t *testing.T) {
	needSandbox(t)
	dir, _ := runDir(t)
	// Here the run's user reaches the directory through the host's
	// directories (t.TempDir makes them 0700).
	for d := filepath.Dir(dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	s := newSandbox(t, func(c *SandboxConfig) { c.Isolate, c.RequireIsolation = false, false })
	r, err := s.Run(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", "echo junk > junk.txt"}, Dir: dir})
	require.NoError(t, err)
	require.Zero(t, r.ExitCode)
	require.False(t, r.Sandbox.Mount || r.Sandbox.Network)
	require.FileExists(t, filepath.Join(dir, "junk.txt"))

	_, err = NewSandbox(func() SandboxConfig {
		c := DefaultSandboxConfig()
		c.Isolate = false
		return c
	}())
	require.Error(t, err, "RequireIsolation without Isolate")
}

func TestSandboxBadCommand(t *testing.T) {
	dir, data := runDir(t)
	s := newSandbox(t, nil)
	tests := []struct {
		name string
		c    Command
	}{
		{"no program", Command{Dir: dir}},
		{"relative program", Command{Path: "sh", Dir: dir}},
		{"no directory", Command{Path: "/bin/sh", Dir: filepath.Join(dir, "missing")}},
		{"a file for a directory", Command{Path: "/bin/sh", Dir: data}},
		{"read-only below hidden", Command{Path: "/bin/sh", Dir: dir, ReadOnly: []string{data}, Hide: []string{filepath.Dir(data)}}},
		{"run directory below hidden", Command{Path: "/bin/sh", Dir: dir, Hide: []string{filepath.Dir(dir)}}},
		{"read-only in the run directory", Command{Path: "/bin/sh", Dir: dir, ReadOnly: []string{filepath.Join(dir, "sub")}}},
		{"missing read-only", Command{Path: "/bin/sh", Dir: dir, ReadOnly: []string{data + ".missing"}}},
		{"kept path", Command{Path: "/bin/sh", Dir: dir, Keep: []string{"sub/a.txt"}}},
		{"environment", Command{Path: "/bin/sh", Dir: dir, Env: []string{"NOVALUE"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), tt.c)
			require.ErrorIs(t, err, ErrBadCommand)
		})
	}
}
