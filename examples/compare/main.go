// Command compare runs every method of the library on the embedded lab
// under several seeds, evaluates each trained policy on the test tasks with
// real runs, and compares them with 95% bootstrap confidence intervals,
// paired differences against Base and the best baseline, and the
// probability of improvement (METHOD.md §1 Data and evaluation).
//
//	go run ./examples/compare                              # every method × 5 seeds, default profile
//	go run ./examples/compare -profile short -seeds 3      # quicker
//	go run ./examples/compare -methods base,lm2lm,static   # a subset
//	go run ./examples/compare -setting library             # every library default
//
// Every method runs one named setting (lab/setting: -setting validated,
// the main job's default, or library) at one profile of the drivers' one
// table (setting.Profiles); the result files record both by name and
// content and are read back only under the same ones. A setting other
// than validated, -pessimism, -trigger, -eval-predict and -probe off its
// default each name a run directory of their own.
//
// It writes into a run directory (-out, default out/compare, then
// <suite>-<profile>): one result file per (method, seed) under runs/, named
// by method and seed, checksummed and never overwritten; the records of every real run
// (records.jsonl, reused by every later invocation); and the comparison of
// the chosen methods and seeds as a Markdown table, a JSON file and four PNG
// charts. A finished (method, seed) is read back from its result file, so a
// second invocation runs nothing and prints the same table. -scale robust
// reports the same result files on the robust scale (evalstat.Scale: σ_e
// floored at the family's median over the training tasks, gains clipped at
// the reward clip) into files named ...-robust, beside the raw ones.
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
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
)

const about = `compare runs every method (Base, SFT, RFT, best known changes, world-model
rerank, static world model with and without extra random records, random
calibration, LM2LM, LM2LM + WMRL, WMRL alone, LM2LM with a world-model rerank
of its trained policy's samples; with -transformer, the token-level transformer
that examples/llm-rl trained through the environment service, after its warm-up
and after RL) on the embedded lab under N seeds, evaluates each trained
policy on the test tasks with real training runs, and writes a Markdown table,
a JSON file and PNG charts: Avg@4, Best@4, negative rate and share above 2 sigma_e
with 95% stratified bootstrap confidence intervals, paired differences against
Base and the best baseline, and training and reliability curves. Every
finished (method, seed) is kept in its own result file and read back, so a
second invocation runs nothing and prints the same table; with -scale robust
it reports the same runs on the robust scale (sigma_e floored at the family's
median over the training tasks, clipped at the reward clip) beside the raw files.

Usage: go run ./examples/compare [flags]

Flags:
`

// errUsage marks a bad command line (exit status 2).
var errUsage = errors.New("invalid flags")

type options struct {
	methods             []string
	seeds               int
	firstSeed           uint64
	profile, suite, out string
	// setting names the lab/setting.Setting every method runs under
	// ("" = validated, options built in tests).
	setting             string
	progress            string
	parallel, resamples int
	probe               int
	// evalStates replaces the profile's evaluation states per test task
	// (setting.Profile.EvalStates; 0 = the profile's).
	evalStates int
	pessimism  float64
	trigger    bool
	predict    bool
	force      bool
	scale      string // "raw" or "robust"; "" = raw (options built in tests)
	// corpus is the store of the lab's pretraining corpus
	// (examples/priorcorpus -store), read only, that the corpus methods
	// draw on; "" = none.
	corpus string
	// corpusEv holds the corpus's real proposal runs once run has read
	// them (loadCorpus); a corpus method's result file records its
	// fingerprint.
	corpusEv records.Evidence
	// landscape is the store of a landscape sweep of the evaluation
	// split (examples/sweep -landscape -suite SPLIT), read only, that the
	// judgement diagnostic reads each task's needs from; "" = none.
	landscape string
	// land holds it once run has read it (landscape.Read).
	land *landscape.Landscape
	// holdOut is the family held out of training and evaluated on
	// (-hold-out-family; "" = none).
	holdOut string
	// transformer is the run directory of examples/llm-rl per seed, with
	// {seed} in it (-transformer; "" = none); transformerScript the
	// train.py that serves its policy and transformerTemp the sampling
	// temperature of its evaluation.
	transformer       string
	transformerScript string
	transformerTemp   float64
	// rerankTemp is the temperature LM2LM's world-model rerank draws its
	// candidates at (-rerank-temperature; 0 = defaultRerankTemp, as in
	// options built in tests).
	rerankTemp float64
	// specs replaces the suite's tasks (tests only).
	specs []lab.TaskSpec
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// parseFlags parses and validates the command line; every problem is
// reported before any run starts.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, about)
		fs.PrintDefaults()
	}
	methods := fs.String("methods", strings.Join(defaultMethods(), ","), "comma-separated methods: "+strings.Join(methodNames(), ", ")+
		" (real-gains, a diagnostic of the policy's ceiling that trains on real gains instead of the world model's, and rft-corpus and bestknown-corpus, which need -corpus, run only when named)")
	fs.IntVar(&o.seeds, "seeds", 5, "number of seeds per method (seeds first-seed … first-seed+N−1)")
	fs.Uint64Var(&o.firstSeed, "first-seed", 1, "first seed")
	fs.StringVar(&o.profile, "profile", "default", "size of each run (setting.Profiles, the main job's table): "+strings.Join(setting.ProfileNames(), " | "))
	fs.StringVar(&o.suite, "suite", "v2", suiteHelp())
	fs.StringVar(&o.setting, "setting", "validated", "the setting every method runs under (lab/setting): validated (setting.Validated, chosen on lab v2's validation splits, the main job's default) | library (setting.Library: every library default)")
	fs.StringVar(&o.out, "out", "out/compare", "parent of the run directory")
	fs.StringVar(&o.progress, "progress", "auto", "auto (a bar on a terminal, log lines otherwise) | bar | lines")
	fs.IntVar(&o.parallel, "parallel", 2, "real runs trained at once")
	fs.IntVar(&o.resamples, "resamples", 2000, "bootstrap replicates of each confidence interval")
	fs.IntVar(&o.evalStates, "eval-states", 0, "evaluation states per test task (setting.Profile.EvalStates; 0 = the profile's): the design's size, chosen for a stated interval width with the report's power table (docs/comparisons.md#power)")
	fs.IntVar(&o.probe, "probe", 4, "training tasks × 8 proposals run for real at each calibration step of every trained method to measure its world model's reliability the same way for all (0 = off)")
	fs.Float64Var(&o.pessimism, "pessimism", 0, "weight κ of the world model's q10 in the trained methods' rewards (reward.Config.Pessimism, in [0, 1]; 0 = off; METHOD.md §1 Known weaknesses: reward hacking of the world model)")
	fs.BoolVar(&o.trigger, "trigger", false, "time the calibrations of the calibrating methods by the adaptive trigger at the schedule's budgets (lm2lm.Config.Trigger; MinPairs capped at the smallest budget; METHOD.md §1 Known weaknesses: a fixed schedule)")
	fs.BoolVar(&o.predict, "eval-predict", false, "the trained methods' world model (their final evidence in context) also predicts every evaluation proposal, and the report gives its within-state pairwise accuracy on the test tasks (predictions only, no real run; not for the real-gains diagnostic, whose world model is the lab)")
	fs.StringVar(&o.scale, "scale", "raw", "scale of the reported gains: raw (σ_e units, the headline) | robust (each gain g·σ_e/τ_e with τ_e = max(σ_e, the family's median σ_e over the training tasks), clipped at the reward clip; a report-time transform of the same result files, written beside the raw files)")
	fs.StringVar(&o.corpus, "corpus", "", "the store of the lab's pretraining corpus (examples/priorcorpus -store FILE), opened read only, that rft-corpus and bestknown-corpus draw on: outside knowledge no real-run budget counts (needed by those methods, refused without them)")
	fs.StringVar(&o.holdOut, "hold-out-family", "", "hold this family out of training (its training tasks join no training split, M_0 or world-model context; the corpus methods' corpus loses its runs too) and evaluate on its tasks of the suite's test split only: the generalisation to an unseen family (METHOD.md §1 Data and evaluation)")
	fs.StringVar(&o.landscape, "landscape", "", "the store of a landscape sweep of the evaluation split (examples/sweep -landscape -suite SPLIT -store FILE), read only: each result then carries the judgement diagnostic (per held-out state, the rank and probability of the task's best mechanism under the method, and the spread of its choices across states against the spread of the best mechanisms), reported by region; results run without it have none")
	fs.StringVar(&o.transformer, "transformer", "", "run directory of examples/llm-rl -profile method for each seed, with {seed} in it (e.g. out/llm-rl-{seed}): the transformer methods (transformer, transformer-warmup) evaluate its saved policy served by train.py --serve, and read what its training paid from its result.json (needed by those methods, refused without them)")
	fs.StringVar(&o.transformerScript, "transformer-script", filepath.Join("examples", "llm-rl", "train.py"), "the train.py that serves a transformer run's policy (the default is relative to the repository root)")
	fs.Float64Var(&o.transformerTemp, "transformer-temperature", defaultTransformerTemp, "sampling temperature of the transformer methods' evaluation (the RL rollouts sample at 1; the default was chosen on v3-val)")
	fs.Float64Var(&o.rerankTemp, "rerank-temperature", defaultRerankTemp, "temperature at which lm2lm-rerank draws the candidates its world model reranks (the default, the rollouts' temperature of the validated setting, was chosen on v3-val among 0.5, 1, 2 and 4: hotter candidates give the world model more of the catalogue to choose from for each state)")
	fs.BoolVar(&o.force, "force", false, "replace comparison files (table, JSON, charts) whose content changed; result files are never replaced")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	o.methods = splitList(*methods)
	return o, o.validate()
}

func splitList(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// validate reports every bad flag at once, naming the valid values.
func (o options) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("  "+format, a...)) }
	o.validateMethods(bad)
	if o.seeds < 1 {
		bad("-seeds %d; want ≥ 1", o.seeds)
	}
	if _, err := setting.LookupProfile(o.profile); err != nil {
		bad("-profile: %w", err)
	}
	if _, err := o.chosen(); err != nil {
		bad("-setting: %w", err)
	}
	if !slices.Contains(suiteNames(), o.suite) {
		bad("unknown -suite %q; valid: %s", o.suite, strings.Join(suiteNames(), ", "))
	}
	if !slices.Contains([]string{"auto", "bar", "lines"}, o.progress) {
		bad("unknown -progress %q; valid: auto, bar, lines", o.progress)
	}
	if o.parallel < 1 {
		bad("-parallel %d; want ≥ 1", o.parallel)
	}
	if o.resamples < 100 {
		bad("-resamples %d; want ≥ 100", o.resamples)
	}
	if o.evalStates < 0 {
		bad("-eval-states %d; want ≥ 0 (0 = the profile's)", o.evalStates)
	}
	if o.probe < 0 {
		bad("-probe %d; want ≥ 0", o.probe)
	}
	if !(o.pessimism >= 0 && o.pessimism <= 1) {
		bad("-pessimism %g; want in [0, 1]", o.pessimism)
	}
	if o.out == "" {
		bad("-out is empty")
	}
	if o.holdOut != "" && slices.Contains(suiteNames(), o.suite) {
		if _, _, err := o.tasks(); err != nil {
			bad("%w (families: %s)", err, strings.Join(lab.Families(lab.SuiteV2(lab.DefaultSuiteSeed).Train), ", "))
		}
	}
	if !slices.Contains([]string{"", "raw", "robust"}, o.scale) {
		bad("unknown -scale %q; valid: raw, robust", o.scale)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", errUsage, errors.Join(errs...))
}

// validateMethods reports, through bad, every problem of -methods and of
// the flags that only some methods read.
func (o options) validateMethods(bad func(format string, a ...any)) {
	if len(o.methods) == 0 {
		bad("-methods is empty; valid: %s", strings.Join(methodNames(), ", "))
	}
	seen := map[string]bool{}
	for _, m := range o.methods {
		if _, ok := methods[m]; !ok {
			bad("unknown method %q in -methods; valid: %s", m, strings.Join(methodNames(), ", "))
		} else if seen[m] {
			bad("method %q appears twice in -methods", m)
		}
		seen[m] = true
	}
	needCorpus := slices.ContainsFunc(o.methods, func(m string) bool { return methods[m].corpus })
	if needCorpus && o.corpus == "" {
		bad("-methods names a method that draws on the pretraining corpus (rft-corpus, bestknown-corpus): -corpus FILE names its store (examples/priorcorpus -store)")
	}
	if !needCorpus && o.corpus != "" {
		bad("-corpus %q: no method of -methods draws on it (rft-corpus, bestknown-corpus)", o.corpus)
	}
	needTransformer := slices.ContainsFunc(o.methods, func(m string) bool { return methods[m].isExternal() })
	if needTransformer && !strings.Contains(o.transformer, "{seed}") {
		bad("-methods names a transformer method: -transformer names the examples/llm-rl run directory of each seed, with {seed} in it (got %q)", o.transformer)
	}
	if !needTransformer && o.transformer != "" {
		bad("-transformer %q: no method of -methods evaluates it (transformer, transformer-warmup)", o.transformer)
	}
	if needTransformer && !(o.transformerTemp >= 0 && o.transformerTemp <= 2) {
		bad("-transformer-temperature %g; want in [0, 2]", o.transformerTemp)
	}
	if o.holdOut != "" && slices.ContainsFunc(o.methods, func(m string) bool { return methods[m].prior }) {
		bad("-hold-out-family %s: rerank-prior's pretrained prior was fitted on a corpus that holds that family; leave it out of -methods", o.holdOut)
	}
	if set, err := o.chosen(); err == nil && o.holdOut != "" && set.World.Prior {
		bad("-hold-out-family %s: setting %s's pretrained prior was fitted on a corpus that holds that family", o.holdOut, set.Name)
	}
	if !(o.rerankTemp >= 0 && o.rerankTemp <= 100) {
		bad("-rerank-temperature %g; want in (0, 100] (0: the default)", o.rerankTemp)
	} else if o.rerankTempOf("lm2lm-rerank") != defaultRerankTemp && !slices.ContainsFunc(o.methods, func(m string) bool { return methods[m].rerank }) {
		bad("-rerank-temperature %g: no method of -methods reranks a trained policy (lm2lm-rerank)", o.rerankTemp)
	}
}

// lever is an option that names the run directory (dir, appended to its
// name) and the command line (arg) when on.
type lever struct {
	on       bool
	dir, arg string
}

// levers lists the options off their defaults, in the order of both the
// run directory's name and the command line. Every one changes what a
// trained method does or what its result file holds, so its results live
// apart: no result file is read back for a setting it was not measured
// under.
func (o options) levers() []lever {
	set, _ := o.chosen()
	return []lever{
		{set.Name != setting.Validated().Name, "-" + set.Name, " -setting " + set.Name},
		{o.pessimism != 0, fmt.Sprintf("-p%g", o.pessimism), fmt.Sprintf(" -pessimism %g", o.pessimism)},
		{o.trigger, "-trigger", " -trigger"},
		{o.predict, "-pred", " -eval-predict"},
		{o.probe != 4, fmt.Sprintf("-probe%d", o.probe), fmt.Sprintf(" -probe %d", o.probe)},
		{o.evalStatesSet(), fmt.Sprintf("-es%d", o.evalStates), fmt.Sprintf(" -eval-states %d", o.evalStates)},
		{o.holdOut != "", "-holdout-" + o.holdOut, " -hold-out-family " + o.holdOut},
		// -corpus changes only the corpus methods, whose result files
		// record the corpus's fingerprint: it names the command, not the
		// run directory.
		{o.corpus != "", "", " -corpus " + o.corpus},
		// So does -transformer (its result files record the run's digest);
		// another evaluation temperature is a run directory of its own.
		{o.transformer != "", "", " -transformer " + o.transformer},
		{o.rerankTempOf("lm2lm-rerank") != defaultRerankTemp, fmt.Sprintf("-rt%g", o.rerankTemp), fmt.Sprintf(" -rerank-temperature %g", o.rerankTemp)},
		{o.transformer != "" && o.transformerTemp != defaultTransformerTemp, fmt.Sprintf("-tt%g", o.transformerTemp), fmt.Sprintf(" -transformer-temperature %g", o.transformerTemp)},
	}
}

// evalStatesSet reports whether -eval-states replaces the profile's
// evaluation states (a value equal to the profile's changes nothing).
func (o options) evalStatesSet() bool {
	p, err := setting.LookupProfile(o.profile)
	return err == nil && o.evalStates != 0 && o.evalStates != p.EvalStates
}

// chosen is the run's setting (-setting; "" = validated).
func (o options) chosen() (setting.Setting, error) {
	if o.setting == "" {
		return setting.Validated(), nil
	}
	return setting.Lookup(o.setting)
}

// prof is the run's profile (-profile), from the drivers' one table,
// with -eval-states's evaluation states.
func (o options) prof() (setting.Profile, error) {
	p, err := setting.LookupProfile(o.profile)
	if err == nil && o.evalStates > 0 {
		p.EvalStates = o.evalStates
	}
	return p, err
}
