package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
)

const about = `lm2lm runs the full LM2LM method (METHOD.md §1) on the embedded lab: real
tiny-LM training runs on CPU give the initial records M_0, the embedded world
model predicts gains from them, the embedded policy is trained with DAPO on those
predictions with real calibration runs at fixed steps, and the policy is
evaluated on held-out tasks with real runs before and after training (Avg@4,
Best@4). Real runs are kept in -store and reused by every later invocation; the
JSON report is named by suite, profile, method and seed and never overwritten
(unless -force).

Usage: go run ./examples/lm2lm [flags]

Flags:
`

// errUsage marks a bad command line (exit status 2).
var errUsage = errors.New("invalid flags")

// defaultOut is the directory of the reports named by reportPath.
const defaultOut = "out/lm2lm"

// parseFlags parses and validates the command line; every problem is
// reported at once, before any run starts.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("lm2lm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, about)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.profile, "profile", "default", "size of the job (setting.Profiles): "+strings.Join(setting.ProfileNames(), " | "))
	fs.StringVar(&o.calibration, "calibration", "top-rated", "top-rated | random | static")
	fs.StringVar(&o.store, "store", "out/lm2lm-records.jsonl", "durable records file for real runs (reused across invocations)")
	fs.StringVar(&o.report, "report", "", "JSON report to write (default "+defaultOut+"/<suite>-<profile>-<method>-seed<N>.json); none = no report")
	fs.BoolVar(&o.force, "force", false, "replace an existing report file")
	fs.StringVar(&o.progress, "progress", "auto", "auto (a bar on a terminal, log lines otherwise) | bar | lines")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the trainer, the initial records and the evaluation")
	fs.IntVar(&o.parallel, "parallel", 2, "real runs trained at once")
	// A setting is adopted only when it wins on lab v2's validation split
	// (examples/compare -suite v2-val, and again on v2-val2); see the
	// README. "validated" is the one that did; "library" is every library
	// default (the catalogue-only world model, the log-linear policy).
	fs.StringVar(&o.setting, "setting", "validated", settingHelp)
	fs.IntVar(&o.evalHistory, "eval-history", -1, "real records drawn per held-out task once, as the evaluation states' histories (paid as evaluation cost; 0 = empty histories; -1 = the profile's, 8)")
	fs.StringVar(&o.baseline, "baseline", "", "train by maximum likelihood on M_0 instead of LM2LM: sft (all feasible records) or rft (positive gains only)")
	fs.StringVar(&o.suite, "suite", "v2", "lab task suite: v2 (generated, lab.SuiteV2: train on its training part, test on its test part) or v1 (the first lab's 24 tasks)")
	fs.StringVar(&o.holdOut, "hold-out-family", "", "hold out this whole family (training tasks, M_0 and the world model never see it): the generalisation experiment")
	fs.BoolVar(&o.wmrl, "wmrl", false, "add WMRL's anchor groups, online isotonic debiasing and inverse-variance weighting (METHOD.md §2)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the whole job to this file (go tool pprof); none = no profile")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return o, o.validate()
}

// settingHelp describes -setting (setting.Validated, setting.Library).
const settingHelp = "validated (setting.Validated, chosen on lab v2's validation splits: world model over descriptors with effects, tuned; " +
	"policy with descriptor features and a 32-unit hidden layer, Adam LR 0.02, no description features, rollouts at temperature 2 " +
	"with rewards judged as for an unseen task; evaluation at temperature 0.5) | library (setting.Library: every library default)"

var calibrations = []string{"top-rated", "random", "static"}

// validate reports every bad flag at once, naming the valid values.
func (o options) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("  "+format, a...)) }
	prof, perr := setting.LookupProfile(o.profile)
	okProf := perr == nil
	if !okProf {
		bad("-profile: %w", perr)
	}
	if !slices.Contains(calibrations, o.calibration) {
		bad("unknown -calibration %q; valid: %s", o.calibration, strings.Join(calibrations, ", "))
	}
	if !slices.Contains([]string{"", "sft", "rft"}, o.baseline) {
		bad("unknown -baseline %q; valid: sft, rft (or empty for LM2LM)", o.baseline)
	}
	if o.baseline != "" && o.wmrl {
		bad("-wmrl with -baseline %s: the baseline trains without the world model; drop one", o.baseline)
	}
	if !slices.Contains([]string{"", "v1", "v2"}, o.suite) {
		bad("unknown -suite %q; valid: v2, v1", o.suite)
	}
	if !slices.Contains([]string{"", "auto", "bar", "lines"}, o.progress) {
		bad("unknown -progress %q; valid: auto, bar, lines", o.progress)
	}
	if o.holdOut != "" && okProf {
		if fams := suiteFamilies(o.suite, prof.Sizes); !slices.Contains(fams, o.holdOut) {
			bad("unknown -hold-out-family %q; valid: %s", o.holdOut, strings.Join(fams, ", "))
		}
	}
	if o.parallel < 1 {
		bad("-parallel %d; want ≥ 1", o.parallel)
	}
	if o.setting != "" {
		if _, err := setting.Lookup(o.setting); err != nil {
			bad("-setting: %w", err)
		}
	}
	if o.evalHistory < -1 {
		bad("-eval-history %d; want ≥ 0, or -1 for the profile's", o.evalHistory)
	}
	if o.store == "" {
		bad("-store is empty")
	}
	if p := o.reportPath(); p != "" && !o.force && okProf {
		if _, err := os.Stat(p); err == nil {
			bad("report %s exists; a report is never replaced: pass another -report, -seed or -force", p)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", errUsage, errors.Join(errs...))
}

// suiteFamilies lists the families of the suite's tasks.
func suiteFamilies(suite string, sizes lab.SuiteSizes) []string {
	specs, err := suiteTasks(suite, sizes)
	if err != nil {
		return nil
	}
	return lab.Families(specs)
}

// settingName is the job's setting, "validated" or "library".
func (o options) settingName() string {
	if o.validated() {
		return "validated"
	}
	return "library"
}

// method names what the job trains: the baseline, or the calibration mode
// with WMRL's corrections.
func (o options) method() string {
	if o.baseline != "" {
		return o.baseline
	}
	m := o.calibration
	if o.wmrl {
		m += "+wmrl"
	}
	return m
}

// reportPath is the report's file: -report, or a name made of the suite,
// profile, method, the settings that differ from the defaults and the seed;
// "" when no report is wanted.
func (o options) reportPath() string {
	switch o.report {
	case "none":
		return ""
	case "":
	default:
		return o.report
	}
	suite := o.suite
	if suite == "" {
		suite = "v2"
	}
	parts := []string{suite, o.profile, o.method()}
	if !o.validated() {
		parts = append(parts, "library")
	}
	if o.holdOut != "" {
		parts = append(parts, "holdout-"+o.holdOut)
	}
	if p, err := setting.LookupProfile(o.profile); err == nil && o.historyRecords(p) != p.EvalHistory {
		parts = append(parts, fmt.Sprintf("hist%d", o.evalHistory))
	}
	parts = append(parts, fmt.Sprintf("seed%d", o.seed))
	return filepath.Join(defaultOut, strings.Join(parts, "-")+".json")
}
