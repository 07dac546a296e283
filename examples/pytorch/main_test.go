package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTinyMethod runs the whole method (METHOD.md §1) on the tiny profile
// with real PyTorch runs, then again on the same records: the second
// invocation reuses every run and appends nothing.
func TestTinyMethod(t *testing.T) {
	if testing.Short() {
		t.Skip("about 30 real PyTorch runs; skipped with -short")
	}
	requireTorch(t)
	out := t.TempDir()
	o := options{executor: "subprocess", profile: "tiny", python: python, script: script(t, "train.py"), out: out,
		device: "cpu", parallel: 2, threads: 1, seed: 1, timeout: 5 * time.Minute}
	var w bytes.Buffer
	require.NoError(t, run(context.Background(), &w, o), "output:\n%s", w.String())
	t.Logf("tiny profile:\n%s", w.String())
	for _, s := range []string{"gpt-prose/slow", "gpt-code/base", "gpt-prose/base", "M_0: 8 real records",
		"calibration at step 8: 4 real runs", "held-out tasks (J_test)", "Base ", "trained "} {
		require.Contains(t, w.String(), s)
	}
	recs := filepath.Join(out, "records.jsonl")
	before, err := os.ReadFile(recs)
	require.NoError(t, err)
	// 9 reference runs, 8 M_0 runs, 4 calibration runs and up to 8
	// evaluation runs (the evaluations may share runs).
	n := strings.Count(string(before), "\n")
	require.GreaterOrEqual(t, n, 9+8+4)
	require.LessOrEqual(t, n, 9+8+4+8)

	w.Reset()
	require.NoError(t, run(context.Background(), &w, o))
	after, err := os.ReadFile(recs)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "a second invocation must reuse every real run")
}

func TestUnknownProfileAndExecutor(t *testing.T) {
	var w bytes.Buffer
	require.ErrorIs(t, run(context.Background(), &w, options{profile: "huge"}), errProfile)
	o := options{profile: "tiny", executor: "kubernetes", script: "train.py", python: python}
	require.ErrorContains(t, run(context.Background(), &w, o), "unknown -executor")
}
