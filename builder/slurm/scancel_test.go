package slurm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/builder/slurm"
)

// fakeSlurm writes fake sbatch, scontrol, squeue and scancel commands into
// a directory: sbatch counts its calls and submits job 4242, scontrol shows
// it RUNNING forever (or fails when pollFails), and scancel counts its calls
// and fails as a busy slurmctld does. It returns the commands' directory.
func fakeSlurm(t *testing.T, pollFails bool) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755))
	}
	write("sbatch", `echo x >> "`+dir+`/sbatch.calls"; echo 4242`+"\n")
	if pollFails {
		write("scontrol", "echo 'slurm_load_jobs error: Socket timed out on send/recv operation' >&2; exit 1\n")
		write("squeue", "echo 'squeue: error: Socket timed out on send/recv operation' >&2; exit 1\n")
	} else {
		write("scontrol", "echo 'JobId=4242 JobName=lm2lm JobState=RUNNING Reason=None ExitCode=0:0 RunTime=00:00:05'\n")
		write("squeue", "echo '4242|RUNNING|None|0:05'\n")
	}
	write("scancel", `echo x >> "`+dir+`/scancel.calls"; echo 'scancel: error: Kill job error on job id 4242: Socket timed out on send/recv operation' >&2; exit 1`+"\n")
	return dir
}

func calls(t *testing.T, dir, name string) int {
	b, err := os.ReadFile(filepath.Join(dir, name+".calls"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "x")
}

func fakeExecutor(t *testing.T, dir string) *slurm.Executor {
	return newSlurm(t, func(c *slurm.Config) {
		c.Sbatch, c.Scontrol, c.Squeue, c.Scancel = dir+"/sbatch", dir+"/scontrol", dir+"/squeue", dir+"/scancel"
		c.PollInterval, c.CancelWait, c.MaxPollErrors = 5*time.Millisecond, 100*time.Millisecond, 3
	})
}

// TestScancelFailureIsFailedNamingTheJob: when scancel keeps failing, the
// run is ErrFailed naming the job (never transient or a plain cancel or
// timeout), after ScancelAttempts tries, on every path that cancels: a
// cancelled caller, a timeout, and polls that keep failing. Through a Pool
// the job is submitted once: nothing is paid twice.
func TestScancelFailureIsFailedNamingTheJob(t *testing.T) {
	check := func(t *testing.T, dir string, err error) {
		t.Helper()
		require.ErrorIs(t, err, builder.ErrFailed)
		require.NotErrorIs(t, err, builder.ErrTransient)
		require.NotErrorIs(t, err, builder.ErrCancelled)
		require.NotErrorIs(t, err, builder.ErrInfeasible)
		require.Equal(t, builder.ErrFailed, builder.Class(err))
		require.Contains(t, err.Error(), "Slurm job 4242")
		require.Contains(t, err.Error(), "Socket timed out")
		require.Equal(t, slurm.DefaultConfig().ScancelAttempts, calls(t, dir, "scancel"))
	}
	t.Run("cancel", func(t *testing.T) {
		dir := fakeSlurm(t, false)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := fakeExecutor(t, dir).Execute(ctx, buildertest.Job(buildertest.Spec{}))
		check(t, dir, err)
	})
	t.Run("timeout", func(t *testing.T) {
		dir := fakeSlurm(t, false)
		x := newSlurm(t, func(c *slurm.Config) {
			c.Sbatch, c.Scontrol, c.Squeue, c.Scancel = dir+"/sbatch", dir+"/scontrol", dir+"/squeue", dir+"/scancel"
			c.PollInterval, c.CancelWait, c.Timeout = 5*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
		})
		_, err := x.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
		check(t, dir, err)
		require.NotErrorIs(t, err, builder.ErrTimedOut)
	})
	t.Run("polls fail", func(t *testing.T) {
		dir := fakeSlurm(t, true)
		_, err := fakeExecutor(t, dir).Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
		check(t, dir, err)
	})
	t.Run("pool", func(t *testing.T) {
		dir := fakeSlurm(t, true)
		cfg := builder.DefaultPoolConfig()
		cfg.MaxAttempts, cfg.Backoff, cfg.MaxBackoff = 3, time.Millisecond, time.Millisecond
		p, err := builder.NewPool(fakeExecutor(t, dir), cfg)
		require.NoError(t, err)
		_, err = p.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
		check(t, dir, err)
		require.Equal(t, 1, calls(t, dir, "sbatch"), "submitted once")
	})
}
