package builder_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

func TestFileName(t *testing.T) {
	for in, want := range map[string]string{"": "_", "gpt-4o": "gpt-4o", "org/m:1": "org_m_1", "..": "_.", "../x": "_._x", "a b\x00": "a_b_"} {
		require.Equal(t, want, builder.FileName(in), "%q", in)
	}
}

// TestLogPath: a log's path is under the directory whatever the task and
// proposal say, and differs by task, proposal and seed.
func TestLogPath(t *testing.T) {
	j := buildertest.Job(buildertest.Spec{})
	j.Task.ID, j.Proposal = "../../etc", records.Proposal{Mechanism: "../passwd", Params: map[string]string{"k": "1"}}
	p := builder.LogPath("/logs", j)
	require.True(t, strings.HasPrefix(p, "/logs/_._.._etc/_._passwd-"), p)
	require.True(t, strings.HasSuffix(p, fmt.Sprintf("-seed%d.log", j.Seed)), p)
	seen := map[string]bool{p: true}
	j2 := j
	j2.Seed++
	j3 := j
	j3.Proposal = records.Proposal{Mechanism: "../passwd", Params: map[string]string{"k": "2"}}
	j4 := j
	j4.Task.ID = "other"
	for _, x := range []builder.Job{j2, j3, j4} {
		q := builder.LogPath("/logs", x)
		require.False(t, seen[q], q)
		seen[q] = true
	}
}

// TestSubprocessLogDir: with LogDir the whole output is kept, longer than
// the tail, and the outcome names it; a command that cannot start leaves
// the reason there.
func TestSubprocessLogDir(t *testing.T) {
	logs := t.TempDir()
	dir := t.TempDir()
	script := filepath.Join(dir, "noisy.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nfor i in $(seq 1 500); do echo line $i; done\necho oops >&2\nexit 1\n"), 0o755))
	x := newSubprocess(t, func(c *builder.SubprocessConfig) { c.Command, c.LogDir, c.LogTail = []string{script}, logs, 100 })
	j := buildertest.Job(buildertest.Spec{})
	o, err := x.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed)
	require.Equal(t, builder.LogPath(logs, j), o.LogFile)
	b, err := os.ReadFile(o.LogFile)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "line 1\nline 2\n"))
	require.True(t, strings.HasSuffix(string(b), "line 500\noops\n"))
	require.True(t, strings.HasPrefix(o.Log, "…"), "the tail is cut: %q", o.Log)
	require.True(t, strings.HasSuffix(o.Log, "oops\n"))

	require.NoError(t, os.Chmod(script, 0o644)) // not executable: the start fails
	o, err = x.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed)
	b, err = os.ReadFile(o.LogFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "permission denied")
	require.Equal(t, string(b), o.Log)
}

// TestInfeasibleRecordKeepsItsLog: an infeasible outcome's record keeps
// the tail of its log (at most records.MaxLog bytes) and its log file; a
// feasible one only the file.
func TestInfeasibleRecordKeepsItsLog(t *testing.T) {
	j := buildertest.Job(buildertest.Spec{})
	long := strings.Repeat("x", records.MaxLog) + "the end"
	r := builder.Outcome{Infeasible: "diverged", Log: long, LogFile: "/l"}.Record(j)
	require.Len(t, r.Log, records.MaxLog)
	require.True(t, strings.HasSuffix(r.Log, "the end"))
	require.Equal(t, "/l", r.LogFile)
	r = builder.Outcome{Loss: 1, Log: long, LogFile: "/l"}.Record(j)
	require.Empty(t, r.Log)
	require.Equal(t, "/l", r.LogFile)
}
