// Command lm2lm-serve runs LM2LM's environment service (package serve)
// over the embedded lab: an outside RL trainer (verl, TRL, OpenRLHF, slime,
// prime-rl) samples completions from its LLM policy and gets rewards from
// the embedded world model, with calibration runs on real tiny-LM
// trainings in the background. See docs/service.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servelab"
)

const usage = `lm2lm-serve: the LM2LM environment service for RL trainers (verl, TRL, OpenRLHF, slime, prime-rl).

It hands out research states as chat prompts (a dataset file or a JSON API),
assembles each group of completions however the trainer sends it (whole,
per sample, split across processes), scores it with the embedded world
model (parse, predict, shape, group-relative advantages, dynamic sampling),
follows the trainer's step, runs the calibration points in the background as
real tiny-LM trainings on the embedded lab, evaluates proposals on held-out
states with real runs, and reports the reliability monitors and Prometheus
metrics.

Routes: GET /v1/info, GET /v1/health, POST /v1/states, POST /v1/dataset,
POST /v1/score, POST /v1/advance, GET /v1/calibrations, POST /v1/evaluate,
GET /v1/monitors, POST /get_reward (OpenRLHF), GET /metrics. State lives in
-dir: a killed service restarted on the same -dir and -store resumes with
nothing lost and no run paid twice.

It binds loopback by default; any other -addr needs a bearer token, read from
$LM2LM_TOKEN or -token-file (never from the command line). See
docs/service.md for each framework's configuration.

Usage: lm2lm-serve [flags]
`

type options struct {
	addr, tokenFile, dir, store string
	train, test, m0             int
	seed                        uint64
	parallel, maxInFlight       int
	groupSize                   int
	groupDeadline               time.Duration
	stepLag, maxStepJump        int
	countSteps                  bool
	schedule                    calibrate.Schedule
}

// maxSchedulePoints bounds the calibration points of -schedule.
const maxSchedulePoints = 10000

// parseSchedule reads -schedule: comma-separated points STEP:BUDGET, or
// FIRST-LAST/EVERY:BUDGET for a point every EVERY steps from FIRST to
// LAST (e.g. "16:31,40:38,64:31", or "20-2000/20:31"). The steps must
// increase strictly (calibrate.Schedule.Validate).
func parseSchedule(text string) (calibrate.Schedule, error) {
	var s calibrate.Schedule
	for _, item := range strings.Split(text, ",") {
		item = strings.TrimSpace(item)
		at, budget, ok := strings.Cut(item, ":")
		if !ok {
			return s, fmt.Errorf("schedule point %q: want STEP:BUDGET or FIRST-LAST/EVERY:BUDGET", item)
		}
		b, err := strconv.Atoi(budget)
		if err != nil {
			return s, fmt.Errorf("schedule point %q: budget: %w", item, err)
		}
		first, last, every := 0, 0, 1
		if span, step, periodic := strings.Cut(at, "/"); periodic {
			lo, hi, ok := strings.Cut(span, "-")
			if !ok {
				return s, fmt.Errorf("schedule point %q: want FIRST-LAST/EVERY", item)
			}
			if first, err = strconv.Atoi(lo); err == nil {
				if last, err = strconv.Atoi(hi); err == nil {
					every, err = strconv.Atoi(step)
				}
			}
			if err != nil {
				return s, fmt.Errorf("schedule point %q: %w", item, err)
			}
			if every < 1 || last < first {
				return s, fmt.Errorf("schedule point %q: want FIRST ≤ LAST and EVERY ≥ 1", item)
			}
		} else {
			if first, err = strconv.Atoi(at); err != nil {
				return s, fmt.Errorf("schedule point %q: step: %w", item, err)
			}
			last = first
		}
		if first < 0 || last > serve.MaxStep {
			return s, fmt.Errorf("schedule point %q: steps must be in 0..%d", item, serve.MaxStep)
		}
		if (last-first)/every+1 > maxSchedulePoints-len(s.Steps) {
			return s, fmt.Errorf("schedule: more than %d points", maxSchedulePoints)
		}
		for st := first; st <= last; st += every {
			s.Steps, s.Budgets = append(s.Steps, st), append(s.Budgets, b)
		}
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("schedule %q: %w", text, err)
	}
	return s, nil
}

func formatSchedule(s calibrate.Schedule) string {
	parts := make([]string, len(s.Steps))
	for i := range s.Steps {
		parts[i] = fmt.Sprintf("%d:%d", s.Steps[i], s.Budgets[i])
	}
	return strings.Join(parts, ",")
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	d := serve.DefaultConfig()
	fs := flag.NewFlagSet("lm2lm-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.addr, "addr", d.Addr, "listen address; a non-loopback address needs a token")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token every request must carry (default: $"+serve.TokenEnv+", or none)")
	fs.StringVar(&o.dir, "dir", "out/serve", "state directory (checkpoint, journal, lock)")
	fs.StringVar(&o.store, "store", "out/serve-records.jsonl", "records store of every real run (reference runs, M_0, calibrations, evaluations)")
	fs.IntVar(&o.train, "train", 1, "training tasks per family of the lab's V2 suite")
	fs.IntVar(&o.test, "test", 1, "held-out tasks per family")
	fs.IntVar(&o.m0, "m0", 8, "initial real records M_0 (catalogue proposals drawn uniformly)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the loop and of M_0's draws")
	fs.IntVar(&o.parallel, "parallel", d.Parallel, "concurrent world-model calls and real runs")
	fs.IntVar(&o.maxInFlight, "max-in-flight", d.MaxInFlight, "requests in process at once, waiting samples included (503 beyond; GET /v1/health reports it)")
	fs.IntVar(&o.groupSize, "group-size", d.GroupSize, "G for requests that do not state it (OpenRLHF's /get_reward)")
	fs.DurationVar(&o.groupDeadline, "group-deadline", d.GroupDeadline, "how long a group waits for its last sample before it is scored partial")
	fs.IntVar(&o.stepLag, "step-lag", d.StepLag, "how many steps behind the service's step a request may be (asynchronous trainers)")
	fs.IntVar(&o.maxStepJump, "max-step-jump", d.MaxStepJump, "how far one request may move the step forward")
	fs.BoolVar(&o.countSteps, "count-steps", false, "take a score request without a step as the count of score requests before it (opt-in)")
	schedule := fs.String("schedule", formatSchedule(d.Schedule),
		"calibration points in the trainer's steps: STEP:BUDGET,... or FIRST-LAST/EVERY:BUDGET (e.g. 20-2000/20:31)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	sch, err := parseSchedule(*schedule)
	if err != nil {
		return o, err
	}
	o.schedule = sch
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lm2lm-serve:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lm2lm-serve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, getenv func(string) string, w io.Writer) error {
	cfg := serve.DefaultConfig()
	tok, err := serve.Token(o.tokenFile, getenv)
	if err != nil {
		return err
	}
	cfg.Addr, cfg.Token, cfg.Dir, cfg.Parallel, cfg.MaxInFlight = o.addr, tok, o.dir, o.parallel, o.maxInFlight
	cfg.GroupSize, cfg.GroupDeadline, cfg.StepLag, cfg.MaxStepJump, cfg.CountSteps = o.groupSize, o.groupDeadline, o.stepLag, o.maxStepJump, o.countSteps
	cfg.Seed = o.seed
	if len(o.schedule.Steps) > 0 {
		cfg.Schedule = o.schedule
	}
	cfg.Log = slog.New(slog.NewTextHandler(w, nil))
	// Check the configuration, the port and the state directory before
	// the lab's minutes of reference runs.
	ln, err := serve.Bind(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := os.MkdirAll(filepath.Dir(o.store), 0o700); err != nil {
		return err
	}
	store, err := records.OpenFile(o.store, records.DefaultFileConfig())
	if err != nil {
		return err
	}
	defer store.Close()
	c, _, err := servelab.Components(ctx, servelab.Config{Train: o.train, Test: o.test, M0: o.m0, Seed: o.seed, Parallel: o.parallel}, store, w)
	if err != nil {
		return err
	}
	s, err := serve.New(cfg, c)
	if err != nil {
		return err
	}
	defer s.Close()
	in := s.Info()
	fmt.Fprintf(w, "serving %s on http://%s (step %d, %d calibrations, M %d records)\n", serve.APIVersion, ln.Addr(), in.Step, in.Calibrations, in.Evidence)
	return s.Serve(ctx, ln)
}
