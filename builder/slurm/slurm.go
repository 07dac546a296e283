package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// Sentinel errors of the package.
var (
	// ErrParse: Slurm printed something the parsers do not understand.
	ErrParse = errors.New("slurm: cannot parse output")
	// ErrUnknownJob: Slurm no longer (or never) knew the job ID.
	ErrUnknownJob = errors.New("slurm: unknown job")
)

// Config parameterises New.
type Config struct {
	// Command is the training script's command line on the compute node;
	// the job and result file paths are appended as the last two
	// arguments, exactly as for builder.Subprocess. Required. Fixed by
	// configuration; it is written into the batch script shell-quoted.
	Command []string
	// WorkDir is where private job directories are made. It must be
	// visible at the same path on the compute nodes (a shared file
	// system). Default os.TempDir() (enough for a one-node cluster).
	WorkDir string
	// Partition, Account and QOS are passed as --partition, --account and
	// --qos when set. Default "" (the cluster's defaults).
	Partition, Account, QOS string
	// GRES is passed as --gres when set, e.g. "gpu:a100:1". SlotGRES, when
	// set, requests --gres=<SlotGRES>:<Job.Slots> instead, e.g. "gpu".
	// Default "".
	GRES, SlotGRES string
	// CPUsPerTask is passed as --cpus-per-task when > 0. Default 0.
	CPUsPerTask int
	// Mem is passed as --mem when set, e.g. "8G". Default "" (the
	// cluster's DefMemPerCPU).
	Mem string
	// TimeLimit is Slurm's --time, rounded up to whole minutes; 0 = the
	// partition's default. A job that reaches it ends TIMEOUT, reported as
	// infeasible and timed out. Slurm enforces it with a lag of up to a
	// minute or more. Default 0.
	TimeLimit time.Duration
	// Timeout is this executor's own limit: past it the job is cancelled
	// and reported as timed out. 0 = none. Default 0.
	Timeout time.Duration
	// ExtraArgs are more sbatch options, fixed by configuration (e.g.
	// "--constraint=a100"). Default none.
	ExtraArgs []string
	// JobName is sbatch's --job-name. Default "lm2lm".
	JobName string
	// PassEnv names variables copied from this process's environment into
	// the job besides PATH and HOME; Env holds extra "NAME=value" entries.
	// sbatch itself runs with only these and Slurm's settings (SubmitEnv),
	// and the script starts the command with exactly these and NodeEnv
	// (library choice: no secret of the submitting process reaches Slurm
	// or a proposal's run).
	PassEnv, Env []string
	// NodeEnv names variables the script keeps from the job's own
	// environment on the compute node when Slurm set them there: the
	// devices of the allocation, which a run must see to use the GPUs it
	// was given rather than another job's. Default DeviceEnv.
	NodeEnv []string
	// PollInterval is the time between state polls. Default 1 s
	// (library choice: near Slurm's own scheduling latency with
	// batch_sched_delay=0, cheap for slurmctld at a few hundred jobs).
	PollInterval time.Duration
	// MaxPollErrors is how many polls in a row may fail (slurmctld busy or
	// restarting) before the run is given up as transient. Default 30.
	MaxPollErrors int
	// CancelWait bounds how long a cancelled run waits for Slurm to end
	// the job before returning. Default 30 s (Slurm's default KillWait).
	CancelWait time.Duration
	// ScancelAttempts is how many times scancel is tried, PollInterval
	// apart, before a job that must be cancelled is given up: then the run
	// is ErrFailed, naming the job, never transient, because the job may
	// still run and a retry would pay for it twice. "Invalid job id" (the
	// job is gone) counts as success. Default 3 (library choice: rides out
	// a busy slurmctld without holding a run for long).
	ScancelAttempts int
	// LogTail is how many bytes of the job's output are kept. Default 8 KiB.
	LogTail int
	// KeepDirs keeps job directories after the run. Default false.
	KeepDirs bool
	// LogDir, when set, keeps every job's whole output (its slurm.log, or
	// sbatch's message when the job was never submitted) at
	// builder.LogPath(LogDir, job) once the job ends (Outcome.LogFile).
	// Default "" (only the tail is kept).
	LogDir string
	// Sbatch, Scontrol, Squeue and Scancel are the Slurm commands.
	// Defaults "sbatch", "scontrol", "squeue", "scancel" (found in PATH).
	Sbatch, Scontrol, Squeue, Scancel string
	// Sleep waits d or until ctx is done; nil = a timer. Tests inject it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultConfig returns the defaults; Command must still be set.
func DefaultConfig() Config {
	return Config{JobName: "lm2lm", PollInterval: time.Second, MaxPollErrors: 30, CancelWait: 30 * time.Second, ScancelAttempts: 3,
		LogTail: 8 << 10, Sbatch: "sbatch", Scontrol: "scontrol", Squeue: "squeue", Scancel: "scancel",
		NodeEnv: DeviceEnv()}
}

// DeviceEnv returns the variables through which Slurm's GRES plugins give a
// job its devices (NVIDIA, AMD, Intel GPUs): CUDA_VISIBLE_DEVICES,
// GPU_DEVICE_ORDINAL, ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES,
// ZE_AFFINITY_MASK.
func DeviceEnv() []string {
	return []string{"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case len(c.Command) == 0 || c.Command[0] == "":
		return errors.New("slurm: Config.Command is empty")
	case c.GRES != "" && c.SlotGRES != "":
		return errors.New("slurm: set Config.GRES or Config.SlotGRES, not both")
	case c.TimeLimit < 0 || c.Timeout < 0:
		return errors.New("slurm: negative Config.TimeLimit or Config.Timeout")
	case c.PollInterval <= 0:
		return fmt.Errorf("slurm: Config.PollInterval = %v, want > 0", c.PollInterval)
	case c.MaxPollErrors < 1:
		return fmt.Errorf("slurm: Config.MaxPollErrors = %d, want ≥ 1", c.MaxPollErrors)
	case c.CancelWait <= 0:
		return fmt.Errorf("slurm: Config.CancelWait = %v, want > 0", c.CancelWait)
	case c.ScancelAttempts < 1:
		return fmt.Errorf("slurm: Config.ScancelAttempts = %d, want ≥ 1", c.ScancelAttempts)
	case c.LogTail < 1:
		return fmt.Errorf("slurm: Config.LogTail = %d, want ≥ 1", c.LogTail)
	case c.JobName == "" || strings.ContainsAny(c.JobName, "\n\r\x00"):
		return fmt.Errorf("slurm: Config.JobName = %q", c.JobName)
	case c.Sbatch == "" || c.Scontrol == "" || c.Squeue == "" || c.Scancel == "":
		return errors.New("slurm: empty Slurm command name")
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("slurm: Config.Env entry %q is not NAME=value", e)
		}
	}
	for _, n := range c.NodeEnv {
		if !builder.EnvName(n) {
			return fmt.Errorf("slurm: Config.NodeEnv entry %q is not a variable name", n)
		}
	}
	for _, s := range append(append([]string{c.WorkDir}, c.Command...), c.Env...) {
		if strings.ContainsRune(s, 0) {
			return errors.New("slurm: NUL byte in configuration")
		}
	}
	return nil
}

// Executor runs jobs on Slurm under the builder's subprocess protocol. It
// is safe for concurrent use.
type Executor struct {
	cfg Config
}

var _ builder.Executor = (*Executor)(nil)

// New returns an executor for cfg.
func New(cfg Config) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Sleep == nil {
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	cfg.Command = append([]string(nil), cfg.Command...)
	return &Executor{cfg: cfg}, nil
}

// Quote returns s as one single-quoted POSIX shell word.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Script returns the batch script of a job whose directory is dir: it
// changes into dir and execs the configured command with a minimal
// environment (and the NodeEnv variables the node set for the job) and the
// job and result file paths. Every word comes from
// configuration or from dir and is shell-quoted; nothing comes from the
// job, which the command reads from the job file.
func (x *Executor) Script(dir string, environ []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString("# Generated by lm2lm builder/slurm. The job is data in job.json beside this\n")
	b.WriteString("# script; no word of this file comes from the proposal.\n")
	fmt.Fprintf(&b, "cd %s || exit %d\n", Quote(dir), builder.ExitTransient)
	b.WriteString("exec /usr/bin/env -i")
	for _, kv := range builder.MinimalEnv(environ, x.cfg.PassEnv, x.cfg.Env) {
		b.WriteString(" " + Quote(kv))
	}
	for _, n := range x.cfg.NodeEnv {
		// Expands to the one word NAME=value when the node set NAME, to
		// nothing otherwise; n is a checked variable name.
		fmt.Fprintf(&b, ` ${%s+"%s=$%s"}`, n, n, n)
	}
	for _, a := range x.cfg.Command {
		b.WriteString(" " + Quote(a))
	}
	b.WriteString(" " + Quote(filepath.Join(dir, "job.json")) + " " + Quote(filepath.Join(dir, "result.json")) + "\n")
	return b.String()
}

// SbatchArgs returns the sbatch arguments for job j in dir.
func (x *Executor) SbatchArgs(j builder.Job, dir string) []string {
	c := x.cfg
	args := []string{"--parsable", "--job-name=" + c.JobName, "--output=" + filepath.Join(dir, "slurm.log"),
		"--chdir=" + dir, "--export=ALL", "--no-requeue", "--ntasks=1"}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	add("--partition", c.Partition)
	add("--account", c.Account)
	add("--qos", c.QOS)
	add("--mem", c.Mem)
	add("--gres", c.GRES)
	if c.SlotGRES != "" {
		add("--gres", c.SlotGRES+":"+strconv.FormatInt(max(j.Slots, 1), 10))
	}
	if c.CPUsPerTask > 0 {
		add("--cpus-per-task", strconv.Itoa(c.CPUsPerTask))
	}
	if c.TimeLimit > 0 {
		add("--time", strconv.FormatInt(int64((c.TimeLimit+time.Minute-1)/time.Minute), 10))
	}
	args = append(args, c.ExtraArgs...)
	return append(args, filepath.Join(dir, "job.sh"))
}

// Execute submits j with sbatch, polls its state until it ends, and reads
// the result under the protocol. On ctx done it scancels the job and waits
// (at most CancelWait) for Slurm to end it.
func (x *Executor) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	if ctx.Err() != nil {
		return builder.DoneOutcome(ctx, j, records.Cost{}, "")
	}
	if x.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = builder.WithTimeout(ctx, x.cfg.Timeout)
		defer cancel()
	}
	dir, err := os.MkdirTemp(x.cfg.WorkDir, "lm2lm-slurm-")
	if err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "make job directory", Err: err}
	}
	keep := x.cfg.KeepDirs
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	if err := builder.WriteJobFile(filepath.Join(dir, "job.json"), j, filepath.Join(dir, "result.json")); err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "write job file", Err: err}
	}
	if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(x.Script(dir, os.Environ())), 0o700); err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "write batch script", Err: err}
	}
	o, err, ended := x.submit(ctx, j, dir)
	if !ended {
		keep = true // the job may still write there
	}
	if x.cfg.LogDir != "" {
		o.LogFile = x.keepLog(j, dir, err)
	}
	return o, err
}

// submit submits the job of dir and waits for it to end (wait).
func (x *Executor) submit(ctx context.Context, j builder.Job, dir string) (builder.Outcome, error, bool) {
	// sbatch runs detached from ctx: killed halfway, it might have
	// submitted a job whose ID we would never learn.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	out, stderr, err := runEnv(sctx, x.SubmitEnv(os.Environ()), x.cfg.Sbatch, x.SbatchArgs(j, dir)...)
	scancel()
	if err != nil {
		return builder.Outcome{Log: stderr}, sbatchError(err, stderr), true
	}
	id, err := ParseSbatch(out)
	if err != nil {
		return builder.Outcome{Log: stderr}, &builder.RunError{Class: builder.ErrFailed, Reason: "sbatch output", Err: err, Log: stderr}, true
	}
	return x.wait(ctx, j, id, dir)
}

// keepLog copies the job's whole output to its log file under LogDir, or,
// when the job never ran, the log of its error (sbatch's message), and
// returns the file's path; "" when there was nothing to keep or it could
// not be kept (the tail is still in the outcome).
func (x *Executor) keepLog(j builder.Job, dir string, runErr error) string {
	src, err := os.Open(filepath.Join(dir, "slurm.log"))
	var from io.Reader
	if err == nil {
		defer src.Close()
		from = src
	} else {
		var re *builder.RunError
		if !errors.As(runErr, &re) || re.Log == "" {
			return ""
		}
		from = strings.NewReader(re.Log)
	}
	f, err := builder.CreateLog(x.cfg.LogDir, j)
	if err != nil {
		return ""
	}
	_, cerr := io.Copy(f, from)
	if err := f.Close(); err != nil || cerr != nil {
		return ""
	}
	return f.Name()
}

// sbatchError classifies a failed submission: a request the cluster
// rejects (bad account, partition, GRES, impossible resources) is
// ErrFailed; anything else (slurmctld unreachable, busy) is transient.
func sbatchError(err error, stderr string) error {
	for _, m := range []string{"Invalid", "invalid", "not available", "not allowed", "Unable to allocate", "unrecognized option"} {
		if strings.Contains(stderr, m) {
			return &builder.RunError{Class: builder.ErrFailed, Reason: "sbatch rejected the job", Log: stderr, Err: err}
		}
	}
	return &builder.RunError{Class: builder.ErrTransient, Reason: "sbatch", Log: stderr, Err: err}
}

// wait polls job id until it ends and returns its outcome. ended reports
// whether Slurm saw the job end (false only when a cancelled job outlived
// CancelWait).
func (x *Executor) wait(ctx context.Context, j builder.Job, id, dir string) (builder.Outcome, error, bool) {
	errs := 0
	var lastErr error
	for first := true; ; first = false {
		if !first {
			if x.cfg.Sleep(ctx, x.cfg.PollInterval) != nil {
				return x.cancel(ctx, j, id, dir)
			}
		} else if ctx.Err() != nil {
			return x.cancel(ctx, j, id, dir)
		}
		info, err := x.Poll(ctx, id)
		if errors.Is(err, ErrUnknownJob) {
			o, rerr := x.vanished(j, id, dir)
			return o, rerr, true
		}
		if err != nil {
			if ctx.Err() != nil {
				return x.cancel(ctx, j, id, dir)
			}
			errs++
			lastErr = err
			if errs >= x.cfg.MaxPollErrors {
				if serr := x.scancel(id); serr != nil {
					return builder.Outcome{}, scancelFailed(id, errors.Join(lastErr, serr)), false
				}
				return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient,
					Reason: fmt.Sprintf("Slurm job %s: %d polls failed", id, errs), Err: lastErr}, false
			}
			continue
		}
		errs = 0
		act, rerr := Classify(info)
		if act == Wait {
			continue
		}
		o, err := x.finish(j, info, act, rerr, dir)
		if act == Fail && info.State == "PENDING" {
			if serr := x.scancel(id); serr != nil {
				return o, scancelFailed(id, errors.Join(err, serr)), false
			}
		}
		return o, err, true
	}
}

// cancel scancels the job after ctx is done and waits for it to end. When
// scancel failed and the job was not seen to end, the run is ErrFailed
// naming the job (see Config.ScancelAttempts).
func (x *Executor) cancel(ctx context.Context, j builder.Job, id, dir string) (builder.Outcome, error, bool) {
	serr := x.scancel(id)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.cfg.CancelWait)
	defer cancel()
	ended := false
	var info JobInfo
	for wctx.Err() == nil {
		i, err := x.Poll(wctx, id)
		if errors.Is(err, ErrUnknownJob) {
			ended = true
			break
		}
		if err == nil {
			if act, _ := Classify(i); act != Wait {
				ended, info = true, i
				break
			}
		}
		if x.cfg.Sleep(wctx, x.cfg.PollInterval) != nil {
			break
		}
	}
	cost := x.cost(j, info)
	if serr != nil && !ended {
		return builder.Outcome{Cost: cost, Log: x.log(dir)}, scancelFailed(id, serr), false
	}
	o, err := builder.DoneOutcome(ctx, j, cost, x.log(dir))
	return o, err, ended
}

// scancel cancels job id, trying up to ScancelAttempts times. A job Slurm
// no longer knows counts as cancelled.
func (x *Executor) scancel(id string) error {
	var err error
	for a := range x.cfg.ScancelAttempts {
		if a > 0 {
			_ = x.cfg.Sleep(context.Background(), x.cfg.PollInterval)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, stderr, e := run(ctx, x.cfg.Scancel, id)
		cancel()
		if e == nil || strings.Contains(stderr, "Invalid job id") {
			return nil
		}
		err = fmt.Errorf("scancel %s (attempt %d of %d): %w: %s", id, a+1, x.cfg.ScancelAttempts, e,
			records.Excerpt(strings.TrimSpace(stderr)))
	}
	return err
}

// scancelFailed is the error of a run whose job could not be cancelled:
// ErrFailed, never transient, so that no retry pays for it twice.
func scancelFailed(id string, err error) *builder.RunError {
	return &builder.RunError{Class: builder.ErrFailed,
		Reason: fmt.Sprintf("Slurm job %s could not be cancelled and may still be running; cancel it by hand", id), Err: err}
}

// vanished handles a job that Slurm no longer knows before we saw it end
// (purged after MinJobAge, or slurmctld lost its state): a result file that
// parses is the outcome; anything else is transient.
func (x *Executor) vanished(j builder.Job, id, dir string) (builder.Outcome, error) {
	log := x.log(dir)
	b, err := builder.ReadResultFile(filepath.Join(dir, "result.json"))
	if err == nil {
		if r, perr := builder.ParseResult(b); perr == nil {
			return r.Outcome(j, records.Cost{}, log)
		}
	}
	return builder.Outcome{Log: log}, &builder.RunError{Class: builder.ErrTransient,
		Reason: fmt.Sprintf("Slurm job %s vanished before it was seen to end", id), Log: log, Err: ErrUnknownJob}
}

func (x *Executor) cost(j builder.Job, info JobInfo) records.Cost {
	w := info.RunTime.Seconds()
	return records.Cost{WallSeconds: w, DeviceSeconds: w * float64(max(j.Slots, 1))}
}

func (x *Executor) finish(j builder.Job, info JobInfo, act Action, rerr *builder.RunError, dir string) (builder.Outcome, error) {
	log := x.log(dir)
	cost := x.cost(j, info)
	resultBytes, readErr := builder.ReadResultFile(filepath.Join(dir, "result.json"))
	switch act {
	case ReadResult:
		if readErr != nil {
			return builder.Outcome{Cost: cost, Log: log}, &builder.RunError{Class: builder.ErrFailed, Reason: "no result file",
				Log: log, Err: fmt.Errorf("%w: %w", builder.ErrBadResult, readErr)}
		}
		r, err := builder.ParseResult(resultBytes)
		if err != nil {
			return builder.Outcome{Cost: cost, Log: log}, &builder.RunError{Class: builder.ErrFailed, Reason: "parse result", Log: log, Err: err}
		}
		return r.Outcome(j, cost, log)
	case ReadExit:
		if info.Signal != 0 {
			return builder.Outcome{Cost: cost, Log: log}, &builder.RunError{Class: builder.ErrFailed,
				Reason: fmt.Sprintf("Slurm job %s killed by signal %d", info.ID, info.Signal), Log: log}
		}
		if !info.HasExit {
			if reason := builder.InfeasibleReason(resultBytes); reason != "" {
				return builder.Outcome{Infeasible: reason, Seeds: []uint64{j.Seed}, Cost: cost, Log: log},
					builder.ExitError(builder.ExitInfeasible, reason, log)
			}
			return builder.Outcome{Cost: cost, Log: log}, &builder.RunError{Class: builder.ErrFailed,
				Reason: fmt.Sprintf("Slurm job %s failed with an unknown exit code", info.ID), Log: log}
		}
		e := builder.ExitError(info.ExitCode, builder.InfeasibleReason(resultBytes), log)
		if errors.Is(e, builder.ErrInfeasible) {
			return builder.Outcome{Infeasible: e.Reason, Seeds: []uint64{j.Seed}, Cost: cost, Log: log}, e
		}
		return builder.Outcome{Cost: cost, Log: log}, e
	default:
		rerr.Log = log
		if errors.Is(rerr, builder.ErrInfeasible) {
			return builder.Outcome{Infeasible: rerr.Reason, Seeds: []uint64{j.Seed}, Cost: cost, Log: log}, rerr
		}
		return builder.Outcome{Cost: cost, Log: log}, rerr
	}
}

// log returns the tail of the job's output file.
func (x *Executor) log(dir string) string {
	f, err := os.Open(filepath.Join(dir, "slurm.log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > int64(x.cfg.LogTail) {
		if _, err := f.Seek(fi.Size()-int64(x.cfg.LogTail), io.SeekStart); err != nil {
			return ""
		}
		b, _ := io.ReadAll(io.LimitReader(f, int64(x.cfg.LogTail)))
		return "…" + string(b)
	}
	b, _ := io.ReadAll(io.LimitReader(f, int64(x.cfg.LogTail)))
	return string(b)
}

// Poll returns the job's state from `scontrol show job -o`, falling back to
// squeue when scontrol fails for another reason than an unknown job. It
// returns an error wrapping ErrUnknownJob when Slurm does not know id.
func (x *Executor) Poll(ctx context.Context, id string) (JobInfo, error) {
	out, stderr, err := run(ctx, x.cfg.Scontrol, "show", "job", "-o", id)
	if err == nil {
		return ParseScontrolJob(out)
	}
	if strings.Contains(stderr, "Invalid job id") {
		return JobInfo{}, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	out, stderr2, err2 := run(ctx, x.cfg.Squeue, "-h", "-t", "all", "-j", id, "-o", SqueueFormat)
	if err2 != nil {
		if strings.Contains(stderr2, "Invalid job id") {
			return JobInfo{}, fmt.Errorf("%w: %s", ErrUnknownJob, id)
		}
		return JobInfo{}, fmt.Errorf("slurm: poll job %s: scontrol: %w: %s; squeue: %w: %s", id, err, strings.TrimSpace(stderr), err2, strings.TrimSpace(stderr2))
	}
	if strings.TrimSpace(out) == "" {
		return JobInfo{}, fmt.Errorf("%w: %s (squeue lists nothing)", ErrUnknownJob, id)
	}
	return ParseSqueue(out)
}

var envOnce sync.Once
var slurmEnv []string

// SubmitEnv returns the environment sbatch runs with, which --export=ALL
// hands to the job: PATH, HOME, USER, LOGNAME, the PassEnv names, and
// Slurm's own SLURM_* and SBATCH_* settings, taken from environ. Library
// choice: --export=NONE would keep secrets out as well but makes slurmd
// load the user's login environment, about 0.6 s per job on the CI
// cluster; this way nothing else of the submitting process reaches Slurm's
// job record, and the script still starts the command with env -i.
func (x *Executor) SubmitEnv(environ []string) []string {
	env := builder.MinimalEnv(environ, append([]string{"USER", "LOGNAME"}, x.cfg.PassEnv...), nil)
	for _, kv := range environ {
		if strings.HasPrefix(kv, "SLURM_") || strings.HasPrefix(kv, "SBATCH_") {
			env = append(env, kv)
		}
	}
	return env
}

// run runs a Slurm command with this process's environment and returns
// its stdout and stderr.
func run(ctx context.Context, name string, args ...string) (string, string, error) {
	envOnce.Do(func() { slurmEnv = os.Environ() })
	return runEnv(ctx, slurmEnv, name, args...)
}

func runEnv(ctx context.Context, env []string, name string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}
