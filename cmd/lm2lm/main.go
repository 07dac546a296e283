// Command lm2lm runs LM2LM's pipeline on a team's own training code from
// one config file (package envconfig; docs/own-environment.md): the tasks'
// reference runs (b_e, σ_e), the initial real records M_0, the
// environment service that an RL trainer trains an LLM proposer against,
// and the held-out evaluation of the trained proposer.
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
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/yamlenv"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/serve"
)

const usage = `lm2lm: LM2LM on your own training code, from one config file.

Usage: lm2lm -config FILE [-progress auto|bar|lines] VERB [verb flags]

Verbs:
  print-config  print the config with every default filled in
  reference     run each task's reference recipe for its seeds: b_e and σ_e
                (<out>/reference.json); stored runs are never paid again
  m0            reference, then M_0: catalogue changes drawn over the
                training tasks and run for real (<out>/m0.json)
  serve         reference, M_0, then the environment service over them
                (docs/service.md); flags: -addr HOST:PORT, -token-file FILE
                (default: serve.addr and serve.token_file of the file, the
                token else from $LM2LM_TOKEN), -log-every 30s (progress on
                stderr). The world model's server is checked first, and
                asked one prediction before serving
  evaluate      reference, then the trained proposer of evaluate.proposer on
                the held-out tasks (without one, the embedded policy,
                untrained: no server needed): k proposals per state run for
                real, Avg@K and Best@K with bootstrap intervals
                (<out>/evaluate.json, kept as
                <out>/evaluations/<model>-seed<seed>.json)
  plan          what each stage would run and pay now, before anything is
                paid: per stage (reference, M_0, serve's calibrations,
                evaluate) the runs it needs, those the store holds (reused)
                or holds as failed (not paid again), those to pay, and an
                estimate of device-hours and money from the durations the
                store measured and price_per_device_hour; runs nothing,
                asks no server; -json prints every run
  runs          every stored run: task, change, seed, status (ok, reference,
                infeasible, failed), loss, gain, version and log file;
                -task ID, -status S select
  forget        take stored runs out of the store, so that the next verb
                that needs them runs them again (after fixing the script):
                -failed (runs that gave no outcome), -infeasible, -task ID,
                -version V (runs of training.version V; "" = unversioned),
                -all; combined, a run must match all given. The runs are
                kept in <store name>.forgotten.jsonl
  report        tables and charts of what is in the store and under <out>:
                real runs, device-hours and money by stage, per-task gains,
                every kept evaluation (<out>/report.md, report.json,
                report-*.png); runs nothing

Every real run goes to the store (store: in the file) before it is used, so
a killed verb run again pays for nothing twice. See docs/own-environment.md.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "lm2lm:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func usageErr(stderr io.Writer, format string, args ...any) error {
	fmt.Fprintf(stderr, "lm2lm: "+format+"\n", args...)
	return errUsage
}

// run runs one invocation: results go to stdout, progress and logs to
// stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lm2lm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	config := fs.String("config", "", "the environment's config file (required)")
	prog := fs.String("progress", "auto", "progress of long stages: auto (a bar on a terminal), bar or lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageErr(stderr, "no verb")
	}
	if *config == "" {
		return usageErr(stderr, "-config FILE is required")
	}
	mode, ok := map[string]progress.Mode{"auto": progress.Auto, "bar": progress.Bar, "lines": progress.Lines}[*prog]
	if !ok {
		return usageErr(stderr, "-progress %q, want auto, bar or lines", *prog)
	}
	verb, rest := fs.Arg(0), fs.Args()[1:]
	cfg, err := envconfig.Load(*config)
	if err != nil {
		return err
	}
	switch verb {
	case "print-config":
		if len(rest) > 0 {
			return usageErr(stderr, "print-config takes no arguments")
		}
		b, err := envconfig.Format(cfg)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	case "reference", "m0":
		if len(rest) > 0 {
			return usageErr(stderr, "%s takes no arguments", verb)
		}
		e, p, err := open(cfg, mode, stderr)
		if err != nil {
			return err
		}
		defer e.Close()
		_, err = prepare(ctx, e, p, verb == "m0", stdout, stderr)
		return err
	case "serve":
		return serveVerb(ctx, cfg, mode, rest, getenv, stdout, stderr)
	case "forget":
		return forgetVerb(ctx, cfg, rest, stdout, stderr)
	case "runs":
		return runsVerb(ctx, cfg, rest, stdout, stderr)
	case "plan":
		return planVerb(ctx, cfg, rest, stdout, stderr)
	case "report":
		if len(rest) > 0 {
			return usageErr(stderr, "report takes no arguments")
		}
		return reportVerb(ctx, cfg, stdout)
	case "evaluate":
		if len(rest) > 0 {
			return usageErr(stderr, "evaluate takes no arguments")
		}
		return evaluateVerb(ctx, cfg, mode, getenv, stdout, stderr)
	}
	return usageErr(stderr, "unknown verb %q (print-config, plan, reference, m0, serve, evaluate, runs, forget, report)", verb)
}

// open opens the environment of cfg with progress in mode on w.
func open(cfg envconfig.Config, mode progress.Mode, w io.Writer) (*yamlenv.Env, environment.Progress, error) {
	e, err := yamlenv.Open(cfg)
	if err != nil {
		return nil, nil, err
	}
	return e, func(title string, total int) (*progress.Reporter, error) {
		return progress.New(w, progress.Config{Title: title, Total: total, Mode: mode})
	}, nil
}

// M0Report is what the m0 stage measured (<out>/m0.json).
type M0Report struct {
	Records    int               `json:"records"`
	Infeasible int               `json:"infeasible"`
	Failed     int               `json:"failed"` // draws whose run gave no outcome (Failures)
	Failures   []yamlenv.Failure `json:"failures,omitempty"`
	PaidNow    int               `json:"paid_now"`
	Reused     int               `json:"reused"`
	Cost       records.Cost      `json:"cost_paid_now"`
	Seed       uint64            `json:"seed"`
}

// prepare runs the reference stage and, with withM0, M_0
// (environment.Prepare), printing what each measured and paid and writing
// their reports as each ends.
func prepare(ctx context.Context, e *yamlenv.Env, p environment.Progress, withM0 bool, w, errw io.Writer) (environment.Prepared, error) {
	cfg := e.File()
	start := time.Now()
	o := environment.Options{Seed: cfg.M0.Seed, Parallel: int(cfg.Executor.Slots), Progress: p}
	if withM0 {
		o.M0 = cfg.M0.Size
	}
	o.OnStage = func(s environment.Stage, pr environment.Prepared) error {
		var err error
		switch s {
		case environment.StageReferences:
			err = printReferences(e, pr.References, start, w, errw)
		case environment.StageM0:
			err = printM0(e, pr, start, w, errw)
		}
		start = time.Now()
		return err
	}
	return environment.Prepare(ctx, e, o)
}

// printReferences prints each task's reference row and what the stage
// paid, and writes its report (<out>/reference.json); runs that gave no
// outcome are printed with their logs on errw, and make it an error
// wrapping errShort.
func printReferences(e *yamlenv.Env, refs []environment.RefTask, start time.Time, w, errw io.Writer) error {
	paid, reused, failed := 0, 0, 0
	for _, r := range refs {
		paid, reused, failed = paid+r.PaidNow, reused+r.Reused, failed+r.Failed
		if r.LeftOut != "" {
			why := "reference run infeasible"
			if r.Failed > 0 {
				why = "reference run failed"
			}
			fmt.Fprintf(w, "%-24s %-8s left out: %s (%s)\n", r.Task.ID, r.Task.Split, why, r.LeftOut)
			continue
		}
		fmt.Fprintf(w, "%-24s %-8s b_e %.6g, σ_e %.3g (%d seeds)\n", r.Task.ID, r.Task.Split, r.Task.RefLoss, r.Task.SeedNoise, len(r.Seeds))
	}
	path, err := e.WriteReport("reference.json", refs)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "reference: %d runs paid now, %d reused from %s (%.1f s); report %s\n", paid, reused, e.File().Store, time.Since(start).Seconds(), path)
	printFailures(errw, e.ReferenceFailures())
	return short("reference", failed)
}

// printM0 prints what M_0 measured and paid and writes its report
// (<out>/m0.json).
func printM0(e *yamlenv.Env, pr environment.Prepared, start time.Time, w, errw io.Writer) error {
	rep := M0Report{Records: pr.M0.Len(), PaidNow: pr.M0Spent.Runs, Reused: pr.M0Spent.Reused, Cost: pr.M0Spent.Cost, Seed: e.File().M0.Seed,
		Failures: e.Failures()}
	rep.Failed = len(rep.Failures)
	for _, r := range pr.M0.Records() {
		if r.Infeasible != "" {
			rep.Infeasible++
		}
	}
	path, err := e.WriteReport("m0.json", rep)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "M_0: %d records (%d infeasible, %d failed): %d runs paid now, %d reused from the store (%.3g device-hours paid, %.1f s); report %s\n",
		rep.Records, rep.Infeasible, rep.Failed, rep.PaidNow, rep.Reused, rep.Cost.DeviceSeconds/3600, time.Since(start).Seconds(), path)
	printFailures(errw, rep.Failures)
	return short("M_0", rep.Failed)
}

// errShort: a stage ended short of the runs it needed (runs that gave no
// outcome); the verb exits non-zero.
var errShort = errors.New("short of runs")

// short returns an error wrapping errShort when failed runs left stage
// short, naming the way out.
func short(stage string, failed int) error {
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w: %d runs gave no outcome (each with its log above); fix the cause, then "+
		"`lm2lm -config FILE forget -failed` and run again (a failure is not paid for twice until forgotten)", stage, errShort, failed)
}

// printFailures prints each failed run with the end of its log.
func printFailures(w io.Writer, fs []yamlenv.Failure) {
	for _, f := range fs {
		when := "paid now"
		if f.Earlier {
			when = "failed before, not paid again"
		}
		fmt.Fprintf(w, "FAILED %s %s seed %d (%s): %s\n", f.Task, f.Key, f.Seed, when, f.Reason)
		if f.LogFile != "" {
			fmt.Fprintf(w, "  log: %s\n", f.LogFile)
		}
		for _, l := range lastLines(f.Log, 12) {
			fmt.Fprintf(w, "  | %s\n", l)
		}
	}
}

// lastLines returns the last n non-empty lines of s.
func lastLines(s string, n int) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimRight(l, "\r"))
		}
	}
	return out[max(0, len(out)-n):]
}

// serveVerb runs the environment service over the environment: it checks
// the world model's server before paying for anything, asks the world
// model one prediction before serving, and logs the service's progress on
// stderr every -log-every.
func serveVerb(ctx context.Context, cfg envconfig.Config, mode progress.Mode, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lm2lm serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", cfg.Serve.Addr, "listen address; a non-loopback address needs a token")
	tokenFile := fs.String("token-file", cfg.Serve.TokenFile, "file holding the bearer token (default: $"+serve.TokenEnv+", or none)")
	every := fs.Duration("log-every", 30*time.Second, "how often the service's progress (scoring, calibrations) is logged when it moved; 0: never")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "serve: unexpected arguments %q", fs.Args())
	}
	tok, err := serve.Token(*tokenFile, getenv)
	if err != nil {
		return err
	}
	sc := serve.DefaultConfig()
	sc.Addr, sc.Token, sc.Dir = *addr, tok, cfg.Serve.Dir
	sc.GroupSize, sc.Parallel, sc.Seed = cfg.Serve.GroupSize, cfg.Serve.Parallel, cfg.Serve.Seed
	sc.Schedule.Steps, sc.Schedule.Budgets = cfg.Calibration.Steps, cfg.Calibration.Budgets
	// The address, the token, the state directory and the world model's
	// server are checked before any run is paid for.
	ln, err := serve.Bind(sc)
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := checkWorldServer(ctx, cfg, getenv, stderr); err != nil {
		return err
	}
	e, p, err := open(cfg, mode, stderr)
	if err != nil {
		return err
	}
	defer e.Close()
	world, err := e.World(getenv)
	if err != nil {
		return err
	}
	pr, err := prepare(ctx, e, p, true, stdout, stderr)
	if err != nil {
		return err
	}
	train, held := pr.Train, pr.HeldOut
	pred, err := probeWorld(ctx, world, train[0], e.Catalogue(), pr.M0)
	switch {
	case errors.Is(err, rwm.ErrBadPrediction):
		fmt.Fprintf(stderr, "lm2lm: warning: %s\n", records.ErrorExcerpt(err))
	case err != nil:
		return err
	default:
		fmt.Fprintf(stdout, "world model: answered (valid %t, gain %.4g, %s)\n", pred.Valid, pred.Gain, records.Excerpt(pred.Reason))
	}
	s, err := serve.New(sc, serve.Components{World: world, Builder: e.Builder(), Executor: e.Executor(),
		Tasks: train, HeldOut: held, Evidence: pr.M0, Catalogue: e.Catalogue()})
	if err != nil {
		return err
	}
	defer s.Close()
	in := s.Info()
	fmt.Fprintf(stdout, "serving %s on http://%s (%d training and %d held-out tasks, step %d, %d calibrations, M %d records)\n",
		serve.APIVersion, ln.Addr(), len(train), len(held), in.Step, in.Calibrations, in.Evidence)
	if *every <= 0 {
		return s.Serve(ctx, ln)
	}
	lctx, stop := context.WithCancel(ctx)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		s.LogProgress(lctx, slog.New(slog.NewTextHandler(stderr, nil)), *every)
	}()
	err = s.Serve(ctx, ln)
	stop()
	<-logged
	return err
}

// forgetVerb takes the selected runs out of the store (yamlenv.Forget).
func forgetVerb(ctx context.Context, cfg envconfig.Config, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lm2lm forget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sel yamlenv.Selection
	fs.BoolVar(&sel.Failed, "failed", false, "runs that gave no outcome")
	fs.BoolVar(&sel.Infeasible, "infeasible", false, "infeasible runs (reference runs included)")
	fs.StringVar(&sel.Task, "task", "", "runs of this task only")
	version := fs.String("version", "", "runs of this training.version only (\"\" = unversioned; give -version= for it)")
	fs.BoolVar(&sel.All, "all", false, "every run (with no other flag: the whole store)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "forget: unexpected arguments %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "version" {
			sel.Version = version
		}
	})
	if sel == (yamlenv.Selection{}) {
		return usageErr(stderr, "forget: say what: -failed, -infeasible, -task ID, -version V or -all")
	}
	forgot, kept, err := yamlenv.Forget(ctx, cfg.Store, sel)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "forget: %d runs taken out of %s (kept in %s), %d left\n", forgot, cfg.Store, yamlenv.ForgottenPath(cfg.Store), kept)
	return nil
}
