package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/slurm"
	"github.com/lm2lm/lm2lm/records"
)

// requireSlurm skips when there is no Slurm outside CI, and fails in CI
// (CI set) or when LM2LM_SLURM=1 asks for Slurm and it does not answer
// (as builder/slurm's tests; start a cluster with .ci/setup.sh).
func requireSlurm(t *testing.T) {
	t.Helper()
	want := os.Getenv("CI") != "" || os.Getenv("LM2LM_SLURM") == "1"
	if _, err := exec.LookPath("sbatch"); err != nil {
		if want {
			t.Fatal("sbatch is not on PATH but CI or LM2LM_SLURM=1 is set: start a cluster with .ci/setup.sh")
		}
		t.Skip("sbatch is not on PATH, so there is no Slurm cluster to run train.py on (start one with `bash .ci/setup.sh` as root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%T").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("sbatch is on PATH but sinfo does not answer (%v): %s; start the cluster with .ci/setup.sh", err, out)
	}
}

func newSlurm(t *testing.T, dir string, timeout time.Duration) *slurm.Executor {
	t.Helper()
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{python, script(t, "train.py")}
	cfg.WorkDir, cfg.Timeout, cfg.JobName = dir, timeout, "lm2lm-pytorch-test"
	cfg.PollInterval, cfg.CancelWait = 200*time.Millisecond, 20*time.Second
	x, err := slurm.New(cfg)
	require.NoError(t, err)
	return x
}

// The same job gives the same loss bit for bit under Slurm as as a local
// subprocess; a timeout and a cancellation end the Slurm job and leave no
// process behind.
func TestSlurmTrain(t *testing.T) {
	requireTorch(t)
	requireSlurm(t)
	b := newTestBuilder(t, nil)
	none := records.Proposal{Mechanism: records.NoChange}
	t.Run("same loss as a subprocess", func(t *testing.T) {
		j := jobWith(t, b, prop("width", "factor", "0.5"), func(s *Spec) { s.ReferenceLosses = map[string]float64{"1": 4.6} })
		got, err := newSlurm(t, t.TempDir(), 0).Execute(context.Background(), j)
		require.NoError(t, err, "log:\n%s", got.Log)
		local, err := newSubprocess(t, t.TempDir(), 0).Execute(context.Background(), j)
		require.NoError(t, err)
		require.Equal(t, local.Loss, got.Loss)
		require.Equal(t, 4.6-got.Loss, got.Gain)
	})
	long := func(s *Spec) { s.Recipe.Steps = 10_000_000 }
	t.Run("timeout", func(t *testing.T) {
		dir := t.TempDir()
		out, err := newSlurm(t, dir, 8*time.Second).Execute(context.Background(), jobWith(t, b, none, long))
		require.ErrorIs(t, err, builder.ErrTimedOut)
		require.ErrorIs(t, err, builder.ErrInfeasible)
		require.Equal(t, "timed out", out.Infeasible)
		requireNoProcesses(t, dir)
	})
	t.Run("cancel", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go cancelWhenTraining(dir, cancel)
		_, err := newSlurm(t, dir, 0).Execute(ctx, jobWith(t, b, none, long))
		require.ErrorIs(t, err, builder.ErrCancelled)
		requireNoProcesses(t, dir)
	})
}
