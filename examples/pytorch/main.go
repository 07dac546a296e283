// Command pytorch runs the full LM2LM method (METHOD.md §1) with real
// PyTorch training runs: train.py, a tiny character-level GPT that speaks
// the builder's subprocess protocol, trains every reference, M_0 and
// calibration run and every evaluation proposal, locally through
// builder.Subprocess or on a cluster through builder/slurm.
//
//	go run ./examples/pytorch -profile tiny                      # local CPU runs
//	go run ./examples/pytorch -executor slurm -gres gpu:1        # one GPU per run under Slurm
//
// The Builder maps the example's own mechanism cards (cards.go) to the
// script's hyperparameters; the embedded world model and log-linear policy
// are the library's. Real runs are kept in -out/records.jsonl through an
// idempotent builder.Pool, so a second invocation pays for nothing twice
// (delete the directory after editing train.py or the tasks).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/slurm"
	"github.com/lm2lm/lm2lm/calibrate"
)

// profile is a scaled-down version of the paper's schedule (METHOD.md §1).
type profile struct {
	tasks, steps, states, quota, m0, evalStates int
	schedule                                    calibrate.Schedule
}

var profiles = map[string]profile{
	// tiny: 3 tasks (9 reference runs), 8 M_0 runs, 4 calibration runs,
	// 2 × 4 evaluation runs; the end-to-end test's profile.
	"tiny": {tasks: 3, steps: 16, states: 12, quota: 8, m0: 8, evalStates: 1,
		schedule: calibrate.Schedule{Steps: []int{8}, Budgets: []int{4}}},
	// short: 4 tasks, 24 M_0 runs, two calibrations of 8.
	"short": {tasks: 4, steps: 24, states: 48, quota: 32, m0: 24, evalStates: 2,
		schedule: calibrate.Schedule{Steps: []int{8, 16}, Budgets: []int{8, 8}}},
}

type options struct {
	executor, profile, python, script, out, device string
	gres, partition                                string
	parallel, threads                              int
	seed                                           uint64
	timeout                                        time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.executor, "executor", "subprocess", "subprocess (local processes) | slurm (sbatch on the cluster)")
	flag.StringVar(&o.profile, "profile", "tiny", "tiny | short")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "Python interpreter with torch")
	flag.StringVar(&o.script, "script", "", "train.py (default: examples/pytorch/train.py under the working directory)")
	flag.StringVar(&o.out, "out", "out/pytorch", "directory for corpora, records, Slurm job directories")
	flag.StringVar(&o.device, "device", "auto", "train.py device: auto (CUDA when present) | cpu | cuda")
	flag.StringVar(&o.gres, "gres", "", "Slurm --gres per run, e.g. gpu:1")
	flag.StringVar(&o.partition, "partition", "", "Slurm partition")
	flag.IntVar(&o.parallel, "parallel", 2, "real runs at once")
	flag.IntVar(&o.threads, "threads", 1, "CPU threads per run")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the trainer, M_0 and the evaluation")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "time limit of one run (infeasible past it)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "pytorch:", err)
		os.Exit(1)
	}
}

// executor returns the executor of o: train.py as a local subprocess or as
// a Slurm batch job, each with o.timeout.
func executor(o options) (builder.Executor, error) {
	script := o.script
	if script == "" {
		script = filepath.Join("examples", "pytorch", "train.py")
	}
	script, err := filepath.Abs(script)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("train.py: %w (run from the repository root or set -script)", err)
	}
	cmd := []string{o.python, script}
	switch o.executor {
	case "subprocess":
		cfg := builder.DefaultSubprocessConfig()
		cfg.Command, cfg.Timeout = cmd, o.timeout
		return builder.NewSubprocess(cfg)
	case "slurm":
		work, err := filepath.Abs(filepath.Join(o.out, "slurm"))
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(work, 0o755); err != nil {
			return nil, err
		}
		cfg := slurm.DefaultConfig()
		cfg.Command, cfg.WorkDir, cfg.Timeout = cmd, work, o.timeout
		cfg.GRES, cfg.Partition, cfg.JobName = o.gres, o.partition, "lm2lm-pytorch"
		return slurm.New(cfg)
	}
	return nil, fmt.Errorf("unknown -executor %q", o.executor)
}

var errProfile = errors.New("unknown -profile")

func run(ctx context.Context, w io.Writer, o options) error {
	prof, ok := profiles[o.profile]
	if !ok {
		return fmt.Errorf("%w %q", errProfile, o.profile)
	}
	ex, err := executor(o)
	if err != nil {
		return err
	}
	return method(ctx, w, o, prof, ex)
}
