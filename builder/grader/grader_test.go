package grader

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// toyTask writes a tiny classification task: target = 1 when f0 ≥ 5. Its
// leaderboard (accuracy) is 0.5, 0.75, 1.
func toyTask(t testing.TB) Task {
	t.Helper()
	dir := t.TempDir()
	var train, test, answers strings.Builder
	train.WriteString("id,f0,target\n")
	test.WriteString("id,f0\n")
	answers.WriteString("id,target\n")
	for i := 0; i < 40; i++ {
		f := i % 10
		y := 0
		if f >= 5 {
			y = 1
		}
		if i%5 == 0 { // every fifth row is a test row: 8 rows, 4 of each class
			fmt.Fprintf(&test, "%d,%d\n", i, f)
			fmt.Fprintf(&answers, "%d,%d\n", i, y)
		} else {
			fmt.Fprintf(&train, "%d,%d,%d\n", i, f, y)
		}
	}
	for name, s := range map[string]string{"train.csv": train.String(), "test.csv": test.String(), "answers.csv": answers.String()} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644))
	}
	tk := Task{ID: "toy", Description: "toy", Dir: dir, Inputs: []string{"train.csv", "test.csv"}, Answers: "answers.csv",
		Metric: Accuracy, Leaderboard: []Entry{{"constant", 0.5}, {"rough", 0.75}, {"exact", 1}}}
	require.NoError(t, tk.Validate())
	return tk
}

// Solutions hitting each rung of the ladder (METHOD.md §2), in plain
// Python so that they start fast.
const (
	readTest = "import csv\nrows = list(csv.DictReader(open('test.csv')))\n"
	solExact = readTest + "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n')\n" +
		"    for r in rows:\n        f.write('%s,%d\\n' % (r['id'], int(r['f0']) >= 5))\n"
	solConstant = readTest + "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n')\n" +
		"    for r in rows:\n        f.write('%s,0\\n' % r['id'])\n"
)

func newToyGrader(t *testing.T, edit func(*Config)) (*Grader, Task) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	cfg := DefaultConfig()
	cfg.Timeout = 20 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	tk := toyTask(t)
	g, err := New(cfg, tk)
	require.NoError(t, err)
	return g, tk
}

func TestGradeRungs(t *testing.T) {
	// METHOD.md §2: syntax error 0.0, runtime error 0.1, no submission 0.2,
	// valid 0.5 + 0.5·q. The toy task's test ids are 0, 5, ..., 35 with f0
	// 0 or 5, so "exact" scores accuracy 1 and "constant" 0.5.
	t.Setenv("LM2LM_SECRET_FOR_TEST", "do-not-leak")
	t.Setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
	tests := []struct {
		name      string
		code      string
		status    reward.Status
		score     float64
		errorType string
		errorLine int
	}{
		{"empty", "  \n\t", reward.Malformed, 0, "", 0},
		{"syntax error", "import csv\ndef f(:\n    pass\n", reward.SyntaxError, 0, "SyntaxError", 2},
		{"NUL byte", "x = 1\x00\n", reward.SyntaxError, 0, "", 0},
		{"runtime error", "import csv\nx = 1\ny = x / 0\n", reward.RuntimeError, 0.1, "ZeroDivisionError", 3},
		{"missing file", "open('nope.csv')\n", reward.RuntimeError, 0.1, "FileNotFoundError", 1},
		{"exit code", "import sys\nsys.exit(3)\n", reward.RuntimeError, 0.1, "SystemExit", 0},
		{"killed by a signal", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", reward.RuntimeError, 0.1, "signal: killed", 0},
		{"environment is minimal", "import os\nfor k in os.environ:\n    assert 'SECRET' not in k and 'PROXY' not in k.upper(), k\nraise RuntimeError('env ok')\n",
			reward.RuntimeError, 0.1, "RuntimeError", 4},
		{"no submission", "print('trained, forgot to write')\n", reward.RanNoSubmission, 0.2, "", 0},
		{"submission lacks rows", "open('submission.csv','w').write('id,target\\n0,0\\n')\n", reward.RanNoSubmission, 0.2, "", 0},
		{"submission without header", "open('submission.csv','w').write('0,0\\n')\n", reward.RanNoSubmission, 0.2, "", 0},
		// Percentiles on the board {0.5, 0.75, 1}: accuracy 0.5 ties one
		// entry, q = 0.5/3; accuracy 1 beats two and ties one, q = 2.5/3.
		{"answers are hidden", "import os\nassert not os.path.exists('answers.csv')\n" + solConstant, reward.ValidSubmission, 0.5 + 0.5*(0.5/3), "", 0},
		{"valid, constant", solConstant, reward.ValidSubmission, 0.5 + 0.5*(0.5/3), "", 0},
		{"valid, exact", solExact, reward.ValidSubmission, 0.5 + 0.5*(2.5/3), "", 0},
	}
	g, tk := newToyGrader(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gr, err := g.Grade(context.Background(), tk, tt.code)
			require.NoError(t, err)
			t.Logf("%-26s %v wall %v sandbox %+v", tt.name, gr.Summary(), gr.Wall.Round(time.Millisecond), gr.Sandbox)
			require.Equal(t, tt.status, gr.Status, "log: %s", gr.Log)
			require.InDelta(t, tt.score, gr.Score, 1e-12)
			if tt.errorType != "" {
				require.Equal(t, tt.errorType, gr.ErrorType)
			}
			require.Equal(t, tt.errorLine, gr.ErrorLine)
		})
	}
}

func TestGradeLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timeouts")
	}
	fast, tk := newToyGrader(t, func(c *Config) { c.Timeout = 3 * time.Second })
	// Touching memory is slow on a loaded machine: the memory tests get time.
	small, _ := newToyGrader(t, func(c *Config) { c.Memory = 128 << 20 })
	tests := []struct {
		name, code, errorType string
		g                     *Grader
	}{
		{"timeout", "while True:\n    pass\n", "Timeout", fast},
		{"sleeping past the timeout", "import time\ntime.sleep(60)\n", "Timeout", fast},
		{"memory blow-up", "x = bytearray(1 << 30)\n", "MemoryError", small},
		{"memory blow-up, slowly", "xs = []\nwhile True:\n    xs.append(bytearray(8 << 20))\n", "MemoryError", small},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gr, err := tt.g.Grade(context.Background(), tk, tt.code)
			require.NoError(t, err)
			t.Logf("%-26s %v wall %v", tt.name, gr.Summary(), gr.Wall.Round(time.Millisecond))
			require.Equal(t, reward.RuntimeError, gr.Status)
			require.Equal(t, 0.1, gr.Score)
			require.Equal(t, tt.errorType, gr.ErrorType)
		})
	}
}

func TestGradeNoNetwork(t *testing.T) {
	g, tk := newToyGrader(t, nil)
	code := "import socket\ns = socket.create_connection(('127.0.0.1', 9), timeout=2)\n"
	gr, err := g.Grade(context.Background(), tk, code)
	require.NoError(t, err)
	require.Equal(t, reward.RuntimeError, gr.Status)
	if !gr.Isolated {
		t.Skip("the kernel refused a network namespace")
	}
	// In the private namespace even loopback is down: unreachable, not refused.
	require.Equal(t, "OSError", gr.ErrorType, gr.Detail)
	require.Contains(t, gr.Detail, "unreachable")
}

func TestGradeCancel(t *testing.T) {
	g, tk := newToyGrader(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	_, err := g.Grade(ctx, tk, "import time\ntime.sleep(60)\n")
	require.ErrorIs(t, err, context.Canceled)

	_, err = g.Execute(ctx, builder.Job{Task: tk.Record(), Proposal: records.Proposal{Mechanism: "x", Text: "pass"}})
	require.ErrorIs(t, err, builder.ErrCancelled)
}

func TestExecute(t *testing.T) {
	g, tk := newToyGrader(t, nil)
	rt := tk.Record()
	require.NoError(t, rt.Validate())
	j, err := g.Build(context.Background(), rt, records.Proposal{Mechanism: "threshold", Text: solExact})
	require.NoError(t, err)
	out, err := g.Execute(context.Background(), j)
	require.NoError(t, err)
	want := 0.5 + 0.5*(2.5/3)
	require.InDelta(t, want, out.Gain, 1e-12)
	require.InDelta(t, 1-want, out.Loss, 1e-12)
	require.InDelta(t, rt.RefLoss-out.Loss, out.Gain, 1e-12) // g = b_e − ℓ (METHOD.md §1 Vocabulary)
	require.True(t, strings.HasPrefix(out.Log, "valid score"), out.Log)
	require.Greater(t, out.Cost.WallSeconds, 0.0)

	// A broken solution is a ladder rung, not an error.
	j.Proposal.Text = "def f(:"
	out, err = g.Execute(context.Background(), j)
	require.NoError(t, err)
	require.Zero(t, out.Gain)
	require.Equal(t, 1.0, out.Loss)

	other := rt
	other.ID = "unknown"
	_, err = g.Build(context.Background(), other, j.Proposal)
	require.ErrorIs(t, err, builder.ErrFailed)
	_, err = g.Execute(context.Background(), builder.Job{Task: other, Proposal: j.Proposal})
	require.ErrorIs(t, err, ErrTask)
	require.ErrorIs(t, err, builder.ErrFailed)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	// The grader's limits over the sandbox's defaults (one source for the
	// rest: inodes, isolation, the user ids, the kill grace).
	sb := DefaultSandboxConfig()
	sb.Timeout, sb.Memory, sb.FileSize, sb.Processes, sb.CPUs, sb.RequireIsolation = 120*time.Second, 1<<30, 64<<20, 256, 1, false
	require.Equal(t, Config{Python: "/usr/bin/python3", SandboxConfig: sb, LogTail: 4096}, DefaultConfig())
	require.Equal(t, SandboxConfig{Timeout: 120 * time.Second, Memory: 1 << 30, FileSize: 64 << 20, Processes: 256, CPUs: 1, Inodes: 65536,
		Isolate: true, UIDFirst: 2_000_000_000, UIDCount: 1000, KillGrace: time.Second}, sb)
	for _, edit := range []func(*Config){
		func(c *Config) { c.Python = "python3" },
		func(c *Config) { c.Timeout = 0 },
		func(c *Config) { c.Memory = -1 },
		func(c *Config) { c.LogTail = 0 },
		func(c *Config) { c.Processes = 0 },
		func(c *Config) { c.CPUs = -1 },
		func(c *Config) { c.CPUs = math.NaN() },
		func(c *Config) { c.Inodes = -1 },
		func(c *Config) { c.RequireIsolation, c.Isolate = true, false },
		func(c *Config) { c.KillGrace = 0 },
		func(c *Config) { c.UIDCount = 0 },
	} {
		c := DefaultConfig()
		edit(&c)
		require.Error(t, c.Validate())
	}
}

func TestHiddenTempDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs drop privileges only as root")
	}
	hidden := t.TempDir()
	require.NoError(t, os.Chmod(hidden, 0o700))
	g, tk := newToyGrader(t, func(c *Config) { c.TempDir = hidden })
	_, err := g.Grade(context.Background(), tk, solConstant)
	require.ErrorIs(t, err, ErrStart, "a host problem is an error, not the solution's runtime error")
	_, err = g.Execute(context.Background(), builder.Job{Task: tk.Record(), Proposal: records.Proposal{Mechanism: "c", Text: solConstant}})
	require.ErrorIs(t, err, builder.ErrTransient)
}
