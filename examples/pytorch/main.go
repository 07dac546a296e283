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
	"github.com/lm2lm/lm2lm/lab/setting"
)

// profile is a job's size: the drivers' profile (lab/setting.Profiles:
// steps, states, kept groups, M_0, calibration schedule, evaluation states
// per held-out task) and the number of this example's own tasks
// (tasks.go) it runs on.
type profile struct {
	setting.Profile
	tasks int
}

// exampleTasks is the number of the example's tasks per profile: tiny's 3
// tasks cost 9 reference runs, short's 4 cost 12. Only these two profiles
// fit the example's CPU-sized tasks.
var exampleTasks = map[string]int{"tiny": 3, "short": 4}

// lookupProfile returns the profile of name, or an error wrapping
// errProfile that lists the valid names.
func lookupProfile(name string) (profile, error) {
	n, ok := exampleTasks[name]
	p, err := setting.LookupProfile(name)
	if !ok || err != nil {
		return profile{}, fmt.Errorf("%w %q; valid: tiny, short", errProfile, name)
	}
	return profile{Profile: p, tasks: n}, nil
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
	flag.StringVar(&o.profile, "profile", "tiny", "size of the job (lab/setting.Profiles, the lab drivers' table): tiny | short")
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
	prof, err := lookupProfile(o.profile)
	if err != nil {
		return err
	}
	ex, err := executor(o)
	if err != nil {
		return err
	}
	return method(ctx, w, o, prof, ex)
}
