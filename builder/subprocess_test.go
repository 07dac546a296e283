package builder_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// trainscript is the example training script, built once for the tests.
var trainscript string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lm2lm-builder-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	trainscript = filepath.Join(dir, "trainscript")
	out, err := exec.Command("go", "build", "-o", trainscript, "github.com/lm2lm/lm2lm/examples/trainscript").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build trainscript: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newSubprocess(t *testing.T, mod func(*builder.SubprocessConfig)) *builder.Subprocess {
	t.Helper()
	cfg := builder.DefaultSubprocessConfig()
	cfg.Command = []string{trainscript}
	cfg.TempDir = t.TempDir()
	cfg.KillGrace = 500 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	s, err := builder.NewSubprocess(cfg)
	require.NoError(t, err)
	return s
}

func TestSubprocessConformance(t *testing.T) {
	buildertest.Run(t, func(t *testing.T) builder.Executor { return newSubprocess(t, nil) },
		buildertest.Options{Timeout: time.Second, CancelAfter: 300 * time.Millisecond})
}

func TestPoolOfSubprocessConformance(t *testing.T) {
	buildertest.Run(t, func(t *testing.T) builder.Executor {
		return newPool(t, newSubprocess(t, nil), func(c *builder.PoolConfig) { c.Store = records.NewMemStore() })
	}, buildertest.Options{Timeout: time.Second, CancelAfter: 300 * time.Millisecond})
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestSubprocessKillsWholeProcessGroup(t *testing.T) {
	for _, c := range []struct {
		name       string
		ignoreTerm bool
		timeout    bool
	}{{"cancel", false, false}, {"cancel/ignores-SIGTERM", true, false}, {"timeout", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			s := newSubprocess(t, func(cfg *builder.SubprocessConfig) {
				if c.timeout {
					cfg.Timeout = 500 * time.Millisecond
				}
			})
			j := buildertest.Job(buildertest.Spec{Behaviour: buildertest.Hang, ChildPIDFile: pidFile, IgnoreTerm: c.ignoreTerm})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				for {
					if _, err := os.Stat(pidFile); err == nil {
						time.Sleep(50 * time.Millisecond)
						if !c.timeout {
							cancel()
						}
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			out, err := s.Execute(ctx, j)
			if c.timeout {
				require.ErrorIs(t, err, builder.ErrTimedOut)
				require.ErrorIs(t, err, builder.ErrInfeasible)
				require.Equal(t, "timed out", out.Infeasible)
			} else {
				require.ErrorIs(t, err, builder.ErrCancelled)
			}
			require.Contains(t, out.Log, "trainscript: hanging")
			b, rerr := os.ReadFile(pidFile)
			require.NoError(t, rerr)
			pid, perr := strconv.Atoi(string(b))
			require.NoError(t, perr)
			require.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond,
				"child %d of the training script survived", pid)
		})
	}
}

func TestSubprocessMinimalEnvironment(t *testing.T) {
	t.Setenv("LM2LM_TEST_SECRET", "hunter2")
	t.Setenv("LM2LM_TEST_PASSED", "yes")
	s := newSubprocess(t, func(c *builder.SubprocessConfig) {
		c.Command = []string{"/bin/sh", "-c", `env; printf '{"loss": 1.25}' > "$2"`, "sh"}
		c.PassEnv = []string{"LM2LM_TEST_PASSED"}
		c.Env = []string{"LM2LM_EXTRA=1"}
	})
	out, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.NoError(t, err)
	require.Equal(t, 1.25, out.Loss)
	require.Equal(t, 1.5-1.25, out.Gain, "gain defaults to b_e − ℓ")
	require.NotContains(t, out.Log, "hunter2")
	require.Contains(t, out.Log, "LM2LM_TEST_PASSED=yes")
	require.Contains(t, out.Log, "LM2LM_EXTRA=1")
	require.Contains(t, out.Log, "PATH=")
}

func TestMinimalEnv(t *testing.T) {
	got := builder.MinimalEnv([]string{"PATH=/bin", "HOME=/h", "AWS_SECRET=x", "KEEP=1", "bogus"}, []string{"KEEP"}, []string{"X=2"})
	require.Equal(t, []string{"PATH=/bin", "HOME=/h", "KEEP=1", "X=2"}, got)
}

func TestSubprocessExitWithoutResultFile(t *testing.T) {
	s := newSubprocess(t, func(c *builder.SubprocessConfig) { c.Command = []string{"/bin/sh", "-c", "echo done", "sh"} })
	_, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.ErrorIs(t, err, builder.ErrFailed)
	require.ErrorIs(t, err, builder.ErrBadResult)
}

func TestSubprocessSignalIsFailed(t *testing.T) {
	s := newSubprocess(t, func(c *builder.SubprocessConfig) { c.Command = []string{"/bin/sh", "-c", "kill -9 $$", "sh"} })
	_, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.ErrorIs(t, err, builder.ErrFailed)
	require.Contains(t, err.Error(), "signal")
}

func TestSubprocessKeepsLogTail(t *testing.T) {
	s := newSubprocess(t, func(c *builder.SubprocessConfig) {
		c.Command = []string{"/bin/sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 1`, "sh"}
		c.LogTail = 64
	})
	_, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	var re *builder.RunError
	require.ErrorAs(t, err, &re)
	require.LessOrEqual(t, len(re.Log), 64+len("…"))
	require.True(t, strings.HasSuffix(re.Log, "line 1999\n"), "log %q", re.Log)
}

func TestSubprocessConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*builder.SubprocessConfig){
		"command": func(c *builder.SubprocessConfig) { c.Command = nil },
		"timeout": func(c *builder.SubprocessConfig) { c.Timeout = -1 },
		"grace":   func(c *builder.SubprocessConfig) { c.KillGrace = 0 },
		"tail":    func(c *builder.SubprocessConfig) { c.LogTail = 0 },
		"env":     func(c *builder.SubprocessConfig) { c.Env = []string{"NOEQUALS"} },
	} {
		c := builder.DefaultSubprocessConfig()
		c.Command = []string{"/bin/true"}
		mod(&c)
		require.Error(t, c.Validate(), name)
	}
	_, err := builder.NewSubprocess(builder.SubprocessConfig{Command: []string{"/no/such/program"}, KillGrace: 1, LogTail: 1})
	require.Error(t, err)
}

func TestTail(t *testing.T) {
	tl := builder.NewTail(5)
	fmt.Fprint(tl, "ab")
	require.Equal(t, "ab", tl.String())
	fmt.Fprint(tl, "cdef")
	require.Equal(t, "…bcdef", tl.String())
	fmt.Fprint(tl, "0123456789")
	require.Equal(t, "…56789", tl.String())
}

// A background child that keeps the script's stderr open neither blocks
// the run nor survives it.
func TestSubprocessChildHoldingOutput(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	s := newSubprocess(t, func(c *builder.SubprocessConfig) {
		c.Command = []string{"/bin/sh", "-c", `sleep 300 >&2 & echo $! > "$0"; printf '{"loss": 1}' > "$2"`, pidFile}
		c.KillGrace = 200 * time.Millisecond
	})
	out, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.NoError(t, err)
	require.Equal(t, 1.0, out.Loss)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond)
}

// With neither PATH nor HOME in this process's environment the script must
// still get the minimal environment, not this process's whole one (a nil
// exec.Cmd.Env would pass everything on).
func TestSubprocessMinimalEnvironmentWithoutPathOrHome(t *testing.T) {
	t.Setenv("LM2LM_TEST_SECRET", "hunter2")
	for _, k := range []string{"PATH", "HOME"} {
		t.Setenv(k, "") // restored after the test
		require.NoError(t, os.Unsetenv(k))
	}
	s := newSubprocess(t, func(c *builder.SubprocessConfig) {
		c.Command = []string{"/bin/sh", "-c", `export -p; printf '{"loss": 1}' > "$2"`, "sh"}
	})
	out, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.NoError(t, err)
	require.NotContains(t, out.Log, "hunter2")
	require.NotContains(t, out.Log, "LM2LM_TEST_SECRET")
	require.NotNil(t, builder.MinimalEnv(nil, nil, nil))
	require.Empty(t, builder.MinimalEnv([]string{"SECRET=x"}, nil, nil))
}

// A script that writes a huge result file (here a sparse one) gets a bad
// result, and the executor reads no more than MaxResultBytes+1 of it.
func TestSubprocessHugeResultFileIsNotReadWhole(t *testing.T) {
	const size = 256 << 20
	s := newSubprocess(t, func(c *builder.SubprocessConfig) {
		c.Command = []string{"/bin/sh", "-c", `truncate -s ` + strconv.Itoa(size) + ` "$2"`, "sh"}
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, builder.ErrFailed)
	require.ErrorIs(t, err, builder.ErrBadResult)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(size/4), "the whole result file was read into memory")
}

// A training script that cannot be started for a passing reason (here: its
// file is still open for writing, ETXTBSY, as while it is being deployed)
// is a transient failure that the pool retries, not a permanent one.
func TestSubprocessStartTextBusyIsTransient(t *testing.T) {
	script := filepath.Join(t.TempDir(), "train.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nprintf '{\"loss\": 1}' > \"$2\"\n"), 0o755))
	s := newSubprocess(t, func(c *builder.SubprocessConfig) { c.Command = []string{script} })
	w, err := os.OpenFile(script, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.ErrorIs(t, err, builder.ErrTransient)
	require.NoError(t, w.Close())
	out, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.NoError(t, err)
	require.Equal(t, 1.0, out.Loss)
}
