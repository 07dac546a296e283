package slurm_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/builder/slurm"
)

var trainscript string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lm2lm-slurm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	trainscript = filepath.Join(dir, "trainscript")
	if out, err := exec.Command("go", "build", "-o", trainscript, "github.com/lm2lm/lm2lm/examples/trainscript").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build trainscript: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireSlurm skips when there is no Slurm outside CI, and fails in CI
// (CI set) or when LM2LM_SLURM=1 asks for Slurm and it does not answer.
func requireSlurm(t *testing.T) {
	t.Helper()
	want := os.Getenv("CI") != "" || os.Getenv("LM2LM_SLURM") == "1"
	if _, err := exec.LookPath("sbatch"); err != nil {
		if want {
			t.Fatal("slurm: sbatch is not on PATH but CI or LM2LM_SLURM=1 is set: start a cluster with .ci/setup.sh")
		}
		t.Skip("slurm: sbatch is not on PATH, so there is no Slurm cluster to test against (start one with `bash .ci/setup.sh` as root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%T").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("slurm: sbatch is on PATH but sinfo does not answer (%v): %s; start the cluster with .ci/setup.sh", err, out)
	}
}

func newSlurm(t *testing.T, mod func(*slurm.Config)) *slurm.Executor {
	t.Helper()
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{trainscript}
	cfg.WorkDir = t.TempDir()
	cfg.PollInterval = 100 * time.Millisecond
	cfg.CancelWait = 20 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	x, err := slurm.New(cfg)
	require.NoError(t, err)
	return x
}

func TestSlurmConformance(t *testing.T) {
	requireSlurm(t)
	buildertest.Run(t, func(t *testing.T) builder.Executor { return newSlurm(t, nil) },
		buildertest.Options{Timeout: 6 * time.Second, CancelAfter: 2 * time.Second, Concurrency: 2, SleepMS: 100, Parallel: true})
}

func TestPoolOfSlurmConformance(t *testing.T) {
	requireSlurm(t)
	if testing.Short() {
		t.Skip("the pool over Slurm repeats the Slurm suite; skipped with -short")
	}
	buildertest.Run(t, func(t *testing.T) builder.Executor {
		cfg := builder.DefaultPoolConfig()
		cfg.Slots, cfg.Backoff, cfg.MaxBackoff, cfg.MaxAttempts = 2, time.Millisecond, time.Millisecond, 2
		p, err := builder.NewPool(newSlurm(t, nil), cfg)
		require.NoError(t, err)
		return p
	}, buildertest.Options{Timeout: 6 * time.Second, CancelAfter: 2 * time.Second, Concurrency: 2, SleepMS: 100, Parallel: true})
}

// Slurm's own time limit (whole minutes, enforced with a lag) ends the job
// TIMEOUT, which is infeasible and timed out. About 1.5 minutes.
func TestSlurmTimeLimitIsInfeasible(t *testing.T) {
	requireSlurm(t)
	if testing.Short() {
		t.Skip("a Slurm TIMEOUT takes about 1.5 minutes; skipped with -short")
	}
	x := newSlurm(t, func(c *slurm.Config) { c.TimeLimit = time.Minute; c.PollInterval = time.Second })
	out, err := x.Execute(context.Background(), buildertest.Job(buildertest.Spec{Behaviour: buildertest.Hang}))
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, builder.ErrTimedOut)
	require.Equal(t, "timed out", out.Infeasible)
	require.Greater(t, out.Cost.WallSeconds, 50.0)
}

// TestSlurmRejectedSubmissionIsFailed: a job the cluster rejects is
// ErrFailed, and sbatch's own message is kept: in the outcome's log, the
// error's and the log file under LogDir.
func TestSlurmRejectedSubmissionIsFailed(t *testing.T) {
	requireSlurm(t)
	logs := t.TempDir()
	x := newSlurm(t, func(c *slurm.Config) { c.Partition, c.LogDir = "no-such-partition", logs })
	j := buildertest.Job(buildertest.Spec{})
	o, err := x.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed)
	var re *builder.RunError
	require.ErrorAs(t, err, &re)
	require.Contains(t, re.Log, "invalid partition", "sbatch's message")
	require.Equal(t, re.Log, o.Log)
	require.Equal(t, builder.LogPath(logs, j), o.LogFile)
	b, err := os.ReadFile(o.LogFile)
	require.NoError(t, err)
	require.Equal(t, re.Log, string(b))
}

// TestSlurmKeepsTheWholeLog: a job that crashes has its whole output under
// LogDir after its job folder is gone.
func TestSlurmKeepsTheWholeLog(t *testing.T) {
	requireSlurm(t)
	logs := t.TempDir()
	x := newSlurm(t, func(c *slurm.Config) { c.LogDir = logs })
	j := buildertest.Job(buildertest.Spec{Behaviour: buildertest.Crash})
	o, err := x.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed)
	b, err := os.ReadFile(o.LogFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "trainscript: task ")
	require.Equal(t, o.Log, string(b), "short: the tail is the whole log")
}

// TestSlurmSubmitToResultLatency reports the time from submission to a
// parsed result of a job that does nothing, polled every 50 ms. Compare it
// with the cluster's scheduling: with batch_sched_delay=0 a job is
// scheduled on submission; otherwise the main scheduler runs every
// sched_interval (60 s by default) and backfill every bf_interval (30 s).
func TestSlurmSubmitToResultLatency(t *testing.T) {
	requireSlurm(t)
	x := newSlurm(t, func(c *slurm.Config) { c.PollInterval = 50 * time.Millisecond })
	const n = 5
	var total time.Duration
	for range n {
		start := time.Now()
		_, err := x.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
		require.NoError(t, err)
		total += time.Since(start)
	}
	t.Logf("slurm: submit-to-result latency %.0f ms per job (mean of %d, poll interval 50 ms)", float64(total.Milliseconds())/n, n)
}

// The batch script is built from configuration only and quotes every word,
// even a job directory holding quotes and $(…).
func TestScriptQuotesEverything(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, `it's $(touch pwned) "x" `+"`touch pwned2`")
	require.NoError(t, os.Mkdir(dir, 0o700))
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{"/bin/sh", "-c", `env > "$1.env"; printf '{"loss": 2}' > "$2"`, "sh"}
	cfg.Env = []string{"NOTE=a 'b' $(touch pwned3)"}
	x, err := slurm.New(cfg)
	require.NoError(t, err)
	script := x.Script(dir, []string{"PATH=/usr/bin:/bin", "HOME=/root", "SECRET=x"})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job.json"), []byte("{}"), 0o600))
	cmd := exec.Command("/bin/sh", filepath.Join(dir, "job.sh"))
	cmd.Dir = base
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", out, script)
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	require.NoError(t, err)
	require.JSONEq(t, `{"loss": 2}`, string(b))
	env, err := os.ReadFile(filepath.Join(dir, "job.json.env"))
	require.NoError(t, err)
	require.Contains(t, string(env), "NOTE=a 'b' $(touch pwned3)\n")
	require.NotContains(t, string(env), "SECRET")
	for _, p := range []string{"pwned", "pwned2", "pwned3"} {
		for _, d := range []string{base, dir} {
			_, err := os.Stat(filepath.Join(d, p))
			require.True(t, os.IsNotExist(err), "%s was created", p)
		}
	}
}

func TestSbatchArgs(t *testing.T) {
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{"/bin/true"}
	cfg.Partition, cfg.Account, cfg.Mem, cfg.SlotGRES = "gpu", "lab", "8G", "gpu"
	cfg.TimeLimit = 90 * time.Second
	cfg.CPUsPerTask = 4
	cfg.ExtraArgs = []string{"--constraint=a100"}
	x, err := slurm.New(cfg)
	require.NoError(t, err)
	j := buildertest.Job(buildertest.Spec{})
	j.Slots = 2
	j.Proposal.Text = "--partition=evil"
	got := x.SbatchArgs(j, "/w/d")
	require.Equal(t, []string{"--parsable", "--job-name=lm2lm", "--output=/w/d/slurm.log", "--chdir=/w/d", "--export=ALL",
		"--no-requeue", "--ntasks=1", "--partition=gpu", "--account=lab", "--mem=8G", "--gres=gpu:2", "--cpus-per-task=4",
		"--time=2", "--constraint=a100", "/w/d/job.sh"}, got)
}

func TestConfigValidate(t *testing.T) {
	ok := slurm.DefaultConfig()
	ok.Command = []string{"x"}
	require.NoError(t, ok.Validate())
	for name, mod := range map[string]func(*slurm.Config){
		"command":  func(c *slurm.Config) { c.Command = nil },
		"gres":     func(c *slurm.Config) { c.GRES, c.SlotGRES = "gpu:1", "gpu" },
		"poll":     func(c *slurm.Config) { c.PollInterval = 0 },
		"errors":   func(c *slurm.Config) { c.MaxPollErrors = 0 },
		"wait":     func(c *slurm.Config) { c.CancelWait = 0 },
		"tail":     func(c *slurm.Config) { c.LogTail = 0 },
		"name":     func(c *slurm.Config) { c.JobName = "a\nb" },
		"env":      func(c *slurm.Config) { c.Env = []string{"x"} },
		"nul":      func(c *slurm.Config) { c.Command = []string{"a\x00b"} },
		"timeout":  func(c *slurm.Config) { c.Timeout = -1 },
		"commands": func(c *slurm.Config) { c.Sbatch = "" },
	} {
		c := ok
		mod(&c)
		require.Error(t, c.Validate(), name)
	}
}

func TestQuote(t *testing.T) {
	for _, s := range []string{"", "a b", "it's", `"$(x)"`, "`x`", "a\nb", `\`} {
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+slurm.Quote(s)).Output()
		require.NoError(t, err)
		require.Equal(t, s, string(out))
	}
}

// BenchmarkSlurmSubmitToResult reports submit-to-result latency of a job
// that does nothing (ms/job), polled every 50 ms; see
// TestSlurmSubmitToResultLatency for what to compare it with.
func BenchmarkSlurmSubmitToResult(b *testing.B) {
	if _, err := exec.LookPath("sbatch"); err != nil {
		b.Skip("slurm: sbatch is not on PATH")
	}
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{trainscript}
	cfg.WorkDir = b.TempDir()
	cfg.PollInterval = 50 * time.Millisecond
	x, err := slurm.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	n := 0
	for b.Loop() {
		if _, err := x.Execute(context.Background(), buildertest.Job(buildertest.Spec{})); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(n), "ms/job")
}

// A node that goes down under a running job ends it NODE_FAIL, which is
// transient. The test downs the (only) node, so it runs without -short
// only and needs the right to run scontrol update.
func TestSlurmNodeFailIsTransient(t *testing.T) {
	requireSlurm(t)
	if testing.Short() {
		t.Skip("downs the cluster's node; skipped with -short")
	}
	name := fmt.Sprintf("lm2lm-nodefail-%d", os.Getpid())
	x := newSlurm(t, func(c *slurm.Config) { c.JobName = name })
	res := make(chan error, 1)
	go func() {
		_, err := x.Execute(context.Background(), buildertest.Job(buildertest.Spec{Behaviour: buildertest.Hang}))
		res <- err
	}()
	var node string
	require.Eventually(t, func() bool {
		out, err := exec.Command("squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%N").Output()
		node = strings.TrimSpace(string(out))
		return err == nil && node != ""
	}, time.Minute, 100*time.Millisecond, "the job never ran")
	if out, err := exec.Command("scontrol", "update", "NodeName="+node, "State=DOWN", "Reason=lm2lm-test").CombinedOutput(); err != nil {
		t.Skipf("cannot down node %s (%v: %s); NODE_FAIL is covered by TestClassify", node, err, out)
	}
	defer func() {
		// ReturnToService=2 brings a responding node back by itself; RESUME
		// covers clusters configured otherwise.
		_ = exec.Command("scontrol", "update", "NodeName="+node, "State=RESUME").Run()
		require.Eventually(t, func() bool {
			out, _ := exec.Command("sinfo", "-h", "-n", node, "-o", "%T").Output()
			return strings.HasPrefix(strings.TrimSpace(string(out)), "idle") || strings.HasPrefix(strings.TrimSpace(string(out)), "mix")
		}, time.Minute, 250*time.Millisecond, "node %s did not come back", node)
	}()
	err := <-res
	require.ErrorIs(t, err, builder.ErrTransient)
	require.Contains(t, err.Error(), "NODE_FAIL")
}

func TestSubmitEnv(t *testing.T) {
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{"/bin/true"}
	cfg.PassEnv = []string{"CUDA_HOME"}
	x, err := slurm.New(cfg)
	require.NoError(t, err)
	got := x.SubmitEnv([]string{"PATH=/bin", "OPENAI_API_KEY=sk-x", "SLURM_CONF=/etc/slurm/slurm.conf",
		"SBATCH_ACCOUNT=lab", "CUDA_HOME=/cuda", "USER=me", "AWS_SECRET_ACCESS_KEY=y"})
	require.Equal(t, []string{"PATH=/bin", "CUDA_HOME=/cuda", "USER=me", "SLURM_CONF=/etc/slurm/slurm.conf", "SBATCH_ACCOUNT=lab"}, got)
}

// The script keeps the devices Slurm gave the job (NodeEnv) and nothing
// else of the node's environment; a value is passed on literally.
func TestScriptKeepsNodeDevices(t *testing.T) {
	dir := t.TempDir()
	cfg := slurm.DefaultConfig()
	cfg.Command = []string{"/bin/sh", "-c", `env > "$1.env"; printf '{"loss": 2}' > "$2"`, "sh"}
	x, err := slurm.New(cfg)
	require.NoError(t, err)
	script := x.Script(dir, []string{"PATH=/usr/bin:/bin", "HOME=/root"})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o700))
	cmd := exec.Command("/bin/sh", filepath.Join(dir, "job.sh"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CUDA_VISIBLE_DEVICES=2,3", "ZE_AFFINITY_MASK=a b $(touch pwned) 'q'",
		"SLURM_JOB_ID=7", "SECRET=x"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", out, script)
	env, err := os.ReadFile(filepath.Join(dir, "job.json.env"))
	require.NoError(t, err)
	require.Contains(t, string(env), "CUDA_VISIBLE_DEVICES=2,3\n")
	require.Contains(t, string(env), "ZE_AFFINITY_MASK=a b $(touch pwned) 'q'\n")
	require.NotContains(t, string(env), "ROCR_VISIBLE_DEVICES", "unset on the node: not set for the run")
	require.NotContains(t, string(env), "SECRET")
	require.NotContains(t, string(env), "SLURM_JOB_ID")
	_, err = os.Stat(filepath.Join(dir, "pwned"))
	require.True(t, os.IsNotExist(err))

	cfg.NodeEnv = []string{"CUDA_VISIBLE_DEVICES", "BAD NAME"}
	_, err = slurm.New(cfg)
	require.Error(t, err)
}
