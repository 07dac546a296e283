// Command compare runs every method of the library on the embedded lab
// under several seeds, evaluates each trained policy on the test tasks with
// real runs, and compares them with 95% bootstrap confidence intervals,
// paired differences against Base and the best baseline, and the
// probability of improvement (METHOD.md §1 Data and evaluation).
//
//	go run ./examples/compare                              # every method × 5 seeds, default profile
//	go run ./examples/compare -profile short -seeds 3      # quicker
//	go run ./examples/compare -methods base,lm2lm,static   # a subset
//
// It writes into a run directory (-out, default out/compare, then
// <suite>-<profile>): one result file per (method, seed) under runs/, named
// by method and seed and never overwritten; the records of every real run
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
	"slices"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/lab"
)

const about = `compare runs every method (Base, SFT, RFT, best known changes, world-model
rerank, static world model with and without extra random records, random
calibration, LM2LM, LM2LM + WMRL, WMRL alone, LM2LM with a world-model rerank
of its trained policy's samples) on the embedded lab under N seeds, evaluates each trained
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
	progress            string
	parallel, resamples int
	probe, history      int
	policyLR            float64
	descBuckets         int
	descriptorBuckets   int
	descriptorSpread    int
	histProposalBuckets int
	policyHidden        int
	policyHiddenStd     float64
	descriptorInputs    bool
	descriptorLinear    bool
	worldDesc           float64
	worldTune           bool
	worldEffects        bool
	pessimism           float64
	evalTemp            float64 // 0 = 1 (options built in tests)
	evalTempSet         bool
	decode              string // -eval-decode; "" = sample (options built in tests)
	predict             bool
	predictHistory      bool
	steps               int     // -steps; 0 = the profile's
	group               int     // -group; 0 = the trainer's default G
	trainTemp           float64 // -train-temperature; 0 = 1
	trigger             bool
	force               bool
	scale               string // "raw" or "robust"; "" = raw (options built in tests)
	schedule            string // -calibration-schedule; "" = the profile's
	rerankHistory       bool
	perTask             int
	heldOutTask         bool
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
		" (real-gains, a diagnostic of the policy's ceiling that trains on real gains instead of the world model's, runs only when named)")
	fs.IntVar(&o.seeds, "seeds", 5, "number of seeds per method (seeds first-seed … first-seed+N−1)")
	fs.Uint64Var(&o.firstSeed, "first-seed", 1, "first seed")
	fs.StringVar(&o.profile, "profile", "default", "size of each run: "+strings.Join(profileNames(), " | "))
	fs.StringVar(&o.suite, "suite", "v2", "task suite: v2 (lab v2: train on its training split, test on its test split, in and out of distribution) | v2-val (train on lab v2's training split, evaluate on its validation split, in and out of distribution: where settings are chosen) | v2-val2 (the same training split, evaluated on the validation split of the generator under suite seed 2: fresh tasks to check a setting chosen on v2-val) | v2-train (train and evaluate on lab v2's training split: a diagnostic of generalisation, never a result) | v1 (the 20 training and 4 held-out tasks)")
	fs.StringVar(&o.out, "out", "out/compare", "parent of the run directory")
	fs.StringVar(&o.progress, "progress", "auto", "auto (a bar on a terminal, log lines otherwise) | bar | lines")
	fs.IntVar(&o.parallel, "parallel", 2, "real runs trained at once")
	fs.IntVar(&o.resamples, "resamples", 2000, "bootstrap replicates of each confidence interval")
	fs.IntVar(&o.history, "history", 8, "real records of random changes per test task that the test states draw their histories from (0 = empty histories)")
	fs.IntVar(&o.probe, "probe", 4, "training tasks × 8 proposals run for real at each calibration step of every trained method to measure its world model's reliability the same way for all (0 = off)")
	fs.Float64Var(&o.policyLR, "policy-lr", 0.02, "Adam learning rate of the policy (the main job's; 0 = the library default)")
	fs.IntVar(&o.descBuckets, "description-buckets", 64, "hashed task-description features of the policy (the main job's; 0 = off)")
	fs.IntVar(&o.descriptorBuckets, "descriptor-buckets", 0, "hashed binned task-descriptor features of the policy (proposer.PolicyConfig.DescriptorBuckets; 0 = off)")
	fs.IntVar(&o.descriptorSpread, "descriptor-spread", 0, "bins either side that each task descriptor also turns on (proposer.PolicyConfig.DescriptorSpread; needs -descriptor-buckets; 0 = off)")
	fs.IntVar(&o.histProposalBuckets, "history-proposal-buckets", 0, "hashed (history proposal, outcome) features of the policy (proposer.PolicyConfig.HistoryProposalBuckets; 0 = off)")
	fs.IntVar(&o.policyHidden, "policy-hidden", 0, "units of the policy's hidden layer over the state features (proposer.PolicyConfig.Hidden, in [0, 1024]; 0 = the log-linear policy)")
	fs.Float64Var(&o.policyHiddenStd, "policy-hidden-init-std", 0, "standard deviation of the hidden layer's initial weights (proposer.PolicyConfig.HiddenInitStd, in [0, 10]; 0 = the library's 0.1; needs -policy-hidden)")
	fs.BoolVar(&o.descriptorInputs, "policy-descriptor-inputs", false, "the policy's hidden layer also reads every task descriptor that varies over the training tasks as a real-valued input, standardised over them (proposer.PolicyConfig.DescriptorInputs, proposer.StandardisedInputs; needs -policy-hidden)")
	fs.BoolVar(&o.descriptorLinear, "policy-descriptor-linear", false, "every head of the policy reads every task descriptor that varies over the training tasks, standardised over them, as a linear term of its logits (proposer.PolicyConfig.DescriptorLinear: each card's preference linear in the recipe; with -policy-descriptor-inputs the hidden layer reads them too)")
	fs.Float64Var(&o.worldDesc, "world-descriptors", 0, "share of the embedded world model's task kernel that follows task descriptors (rwm.EmbeddedConfig.DescriptorWeight, in [0, 1]; 0 = off)")
	fs.BoolVar(&o.worldTune, "world-tune", false, "re-tune the embedded world model's hyperparameters by marginal likelihood on its records whenever they change (rwm.Tuned around the same base config; off = the fixed defaults)")
	fs.BoolVar(&o.worldEffects, "world-effects", false, "the embedded world model reads what each proposal does to the task's descriptors from the lab (rwm.WithEffects with lab.Effects: a first-order effect term and a Gaussian process on the loss over descriptors; off = the catalogue-only kernel)")
	fs.Float64Var(&o.pessimism, "pessimism", 0, "weight κ of the world model's q10 in the trained methods' rewards (reward.Config.Pessimism, in [0, 1]; 0 = off)")
	fs.Float64Var(&o.evalTemp, "eval-temperature", 1, "sampling temperature of every method's policy at evaluation (proposer.Policy.SetTemperature; 1 = the rollouts' temperature, METHOD.md §1 Policy optimisation)")
	fs.StringVar(&o.decode, "eval-decode", "sample", "how every method's own policy proposes at evaluation: sample (K samples at -eval-temperature) | top (its K most probable distinct proposals, proposer.Greedy: the T → 0 limit without repeats; the rerank methods still sample their candidates)")
	fs.BoolVar(&o.predict, "eval-predict", false, "the trained methods' world model (their final evidence in context) also predicts every evaluation proposal, and the report gives its within-state pairwise accuracy on the test tasks: how well it ranks the policy's own proposals on unseen tasks (predictions only, no real run; not for the real-gains diagnostic, whose world model is the lab)")
	fs.BoolVar(&o.predictHistory, "eval-predict-history", false, "as -eval-predict, the world model also reading the real records of each test state's history (lm2lm.EvalConfig.WithHistory; a tuned world model is pinned on its final evidence): how well it ranks the policy's proposals once it has seen the task's records")
	fs.IntVar(&o.group, "group", 0, "proposals sampled per state in the trained methods' rollouts, G (lm2lm.Config.DAPO.GroupSize, in [2, 256]; 0 = the trainer's default 8, the paper's); the calibration and real-run budget unchanged")
	fs.Float64Var(&o.trainTemp, "train-temperature", 0, "sampling temperature of every method's policy while it trains (proposer.PolicyConfig.Temperature: the rollouts', and the supervised baselines' log-probs; in (0, 100]; 0 = 1, METHOD.md §1 Policy optimisation); evaluation uses -eval-temperature")
	fs.IntVar(&o.steps, "steps", 0, "training steps of every trained method, a multiple of 8 (a rollout) above the schedule's last calibration point (0 = the profile's; the paper's 96 under default)")
	fs.BoolVar(&o.trigger, "trigger", false, "time the calibrations of the calibrating methods by the adaptive trigger at the schedule's budgets (lm2lm.Config.Trigger; MinPairs capped at the smallest budget)")
	fs.StringVar(&o.scale, "scale", "raw", "scale of the reported gains: raw (σ_e units, the headline) | robust (each gain g·σ_e/τ_e with τ_e = max(σ_e, the family's median σ_e over the training tasks), clipped at the reward clip; a report-time transform of the same result files, written beside the raw files)")
	fs.StringVar(&o.schedule, "calibration-schedule", "", "calibration points and budgets as step:budget,… (e.g. 16:31,40:38,64:31; steps multiples of 8 below the profile's steps); replaces the profile's schedule for every method, the M'₀ baselines' extra records included (\"\" = the profile's)")
	fs.BoolVar(&o.rerankHistory, "rerank-history", false, "the rerank methods (rerank, lm2lm-rerank) add the real records of each test state's history to the world model's evidence for that state (baseline.RerankConfig.History; off = the method's evidence alone)")
	fs.IntVar(&o.perTask, "calibration-per-task", 0, "most calibration runs of one training task per calibration point, for the calibrating methods (lm2lm.Config.PerTask: top-rated picks spread over tasks; 0 = no limit, the paper's plain top-B)")
	fs.BoolVar(&o.heldOutTask, "held-out-task", false, "the trained methods predict each training state's rewards with M minus its own task's records plus its history's real records, as for an unseen task (lm2lm.Config.HeldOutTask; with -world-tune the world model is tuned once per task and calibration point on M without the task, rwm.Tuned.Pin)")
	fs.BoolVar(&o.force, "force", false, "replace comparison files (table, JSON, charts) whose content changed; result files are never replaced")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) { o.evalTempSet = o.evalTempSet || f.Name == "eval-temperature" })
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
	if o.seeds < 1 {
		bad("-seeds %d; want ≥ 1", o.seeds)
	}
	if _, ok := profiles[o.profile]; !ok {
		bad("unknown -profile %q; valid: %s", o.profile, strings.Join(profileNames(), ", "))
	}
	if !slices.Contains([]string{"v1", "v2", "v2-val", "v2-val2", "v2-train"}, o.suite) {
		bad("unknown -suite %q; valid: v1, v2, v2-val, v2-val2, v2-train", o.suite)
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
	if o.history < 0 {
		bad("-history %d; want ≥ 0", o.history)
	}
	if o.probe < 0 {
		bad("-probe %d; want ≥ 0", o.probe)
	}
	if o.policyLR < 0 {
		bad("-policy-lr %g; want ≥ 0", o.policyLR)
	}
	if o.descriptorBuckets < 0 || o.descriptorBuckets > 1<<16 {
		bad("-descriptor-buckets %d; want in [0, 65536]", o.descriptorBuckets)
	}
	if o.descriptorSpread < 0 || o.descriptorSpread > 16 || (o.descriptorSpread > 0 && o.descriptorBuckets == 0) {
		bad("-descriptor-spread %d; want in [0, 16], and 0 without -descriptor-buckets", o.descriptorSpread)
	}
	if o.histProposalBuckets < 0 || o.histProposalBuckets > 1<<16 {
		bad("-history-proposal-buckets %d; want in [0, 65536]", o.histProposalBuckets)
	}
	if o.policyHidden < 0 || o.policyHidden > 1024 {
		bad("-policy-hidden %d; want in [0, 1024]", o.policyHidden)
	}
	if !(o.policyHiddenStd >= 0 && o.policyHiddenStd <= 10) || (o.policyHiddenStd != 0 && o.policyHidden == 0) {
		bad("-policy-hidden-init-std %g; want in [0, 10], and 0 without -policy-hidden", o.policyHiddenStd)
	}
	if !(o.worldDesc >= 0 && o.worldDesc <= 1) {
		bad("-world-descriptors %g; want in [0, 1]", o.worldDesc)
	}
	if !(o.pessimism >= 0 && o.pessimism <= 1) {
		bad("-pessimism %g; want in [0, 1]", o.pessimism)
	}
	if o.decode != "" && o.decode != "sample" && !o.top() {
		bad("-eval-decode %q; want sample or top", o.decode)
	}
	if !(o.evalTemp >= 0) || o.evalTemp > 100 || (o.evalTemp == 0 && o.evalTempSet) {
		bad("-eval-temperature %g; want in (0, 100]", o.evalTemp)
	}
	if o.descriptorInputs && o.policyHidden == 0 {
		bad("-policy-descriptor-inputs needs -policy-hidden")
	}
	if o.descBuckets < 0 {
		bad("-description-buckets %d; want ≥ 0", o.descBuckets)
	}
	if o.out == "" {
		bad("-out is empty")
	}
	if !(o.trainTemp >= 0 && o.trainTemp <= 100) {
		bad("-train-temperature %g; want in (0, 100], or 0 for 1", o.trainTemp)
	}
	if o.group != 0 && (o.group < 2 || o.group > 256) {
		bad("-group %d; want in [2, 256], or 0 for the default", o.group)
	}
	if _, ok := profiles[o.profile]; ok {
		if _, err := o.prof(); err != nil && o.schedule == "" {
			bad("%v", err)
		} else if err != nil {
			bad("-calibration-schedule %q: %v", o.schedule, err)
		}
	}
	if o.perTask < 0 {
		bad("-calibration-per-task %d; want ≥ 0", o.perTask)
	}
	if !slices.Contains([]string{"", "raw", "robust"}, o.scale) {
		bad("unknown -scale %q; valid: raw, robust", o.scale)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", errUsage, errors.Join(errs...))
}

// lever is a setting that names the run directory (dir, appended to its
// name) and the command line (arg) when on.
type lever struct {
	on       bool
	dir, arg string
}

// levers lists the settings off their defaults name, in the order of both
// the run directory's name and the command line. Every one changes what a
// trained method does or how it is evaluated, so its results live apart.
func (o options) levers() []lever {
	// The research-state features name one directory part together.
	var state string
	if o.descriptorBuckets != 0 {
		state += fmt.Sprintf(" -descriptor-buckets %d", o.descriptorBuckets)
	}
	if o.worldDesc != 0 {
		state += fmt.Sprintf(" -world-descriptors %g", o.worldDesc)
	}
	return []lever{
		{o.descriptorBuckets != 0 || o.worldDesc != 0, fmt.Sprintf("-d%d-w%g", o.descriptorBuckets, o.worldDesc), state},
		{o.descriptorSpread != 0, fmt.Sprintf("-s%d", o.descriptorSpread), fmt.Sprintf(" -descriptor-spread %d", o.descriptorSpread)},
		{o.histProposalBuckets != 0, fmt.Sprintf("-h%d", o.histProposalBuckets), fmt.Sprintf(" -history-proposal-buckets %d", o.histProposalBuckets)},
		{o.policyHidden != 0, fmt.Sprintf("-hid%d", o.policyHidden), fmt.Sprintf(" -policy-hidden %d", o.policyHidden)},
		{o.policyHiddenStd != 0, fmt.Sprintf("u%g", o.policyHiddenStd), fmt.Sprintf(" -policy-hidden-init-std %g", o.policyHiddenStd)},
		{o.worldEffects, "-fx", " -world-effects"},
		{o.worldTune, "-tune", " -world-tune"},
		{o.pessimism != 0, fmt.Sprintf("-p%g", o.pessimism), fmt.Sprintf(" -pessimism %g", o.pessimism)},
		{o.trigger, "-trigger", " -trigger"},
		{o.temperature() != 1, fmt.Sprintf("-T%g", o.evalTemp), fmt.Sprintf(" -eval-temperature %g", o.evalTemp)},
		{o.rerankHistory, "-rh", " -rerank-history"},
		{o.top(), "-top", " -eval-decode top"},
		{o.predict, "-pred", " -eval-predict"},
		{o.predictHistory, "-predh", " -eval-predict-history"},
		{o.steps != 0, fmt.Sprintf("-steps%d", o.steps), fmt.Sprintf(" -steps %d", o.steps)},
		{o.group != 0, fmt.Sprintf("-g%d", o.group), fmt.Sprintf(" -group %d", o.group)},
		{o.trainTemp != 0 && o.trainTemp != 1, fmt.Sprintf("-tt%g", o.trainTemp), fmt.Sprintf(" -train-temperature %g", o.trainTemp)},
		{o.perTask != 0, fmt.Sprintf("-pt%d", o.perTask), fmt.Sprintf(" -calibration-per-task %d", o.perTask)},
		{o.heldOutTask, "-hot", " -held-out-task"},
		// "16:31,40:38" → "-cal16x31_40x38"
		{o.schedule != "", "-cal" + strings.NewReplacer(":", "x", ",", "_", " ", "").Replace(o.schedule), " -calibration-schedule " + o.schedule},
		// The policy's learning rate and description features change every
		// trained method, the test histories every evaluation and the probe
		// every reliability curve: off their defaults, each has a run
		// directory of its own, so no result file is read back for a
		// setting it was not measured under.
		{o.policyLR != 0.02, fmt.Sprintf("-lr%g", o.policyLR), fmt.Sprintf(" -policy-lr %g", o.policyLR)},
		{o.descBuckets != 64, fmt.Sprintf("-desc%d", o.descBuckets), fmt.Sprintf(" -description-buckets %d", o.descBuckets)},
		{o.history != 8, fmt.Sprintf("-hist%d", o.history), fmt.Sprintf(" -history %d", o.history)},
		{o.probe != 4, fmt.Sprintf("-probe%d", o.probe), fmt.Sprintf(" -probe %d", o.probe)},
		{o.descriptorInputs, "-di", " -policy-descriptor-inputs"},
		{o.descriptorLinear, "-dl", " -policy-descriptor-linear"},
	}
}

// prof is the run's profile: the -profile's, with its calibration schedule
// replaced by -calibration-schedule when given. The profile must exist.
func (o options) prof() (profile, error) {
	p := profiles[o.profile]
	if o.steps != 0 {
		if o.steps < 8 || o.steps%8 != 0 || o.steps > 4096 {
			return p, fmt.Errorf("-steps %d: want a multiple of 8 in [8, 4096]", o.steps)
		}
		p.steps = o.steps
		if o.schedule == "" && slices.ContainsFunc(p.schedule.Steps, func(st int) bool { return st >= p.steps }) {
			return p, fmt.Errorf("-steps %d: the profile calibrates at steps %v", o.steps, p.schedule.Steps)
		}
	}
	if o.schedule == "" {
		return p, nil
	}
	var s calibrate.Schedule
	for _, f := range strings.Split(o.schedule, ",") {
		st, b, ok := strings.Cut(strings.TrimSpace(f), ":")
		step, err1 := strconv.Atoi(st)
		budget, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return p, fmt.Errorf("%q is not step:budget", f)
		}
		s.Steps, s.Budgets = append(s.Steps, step), append(s.Budgets, budget)
	}
	if err := s.Validate(); err != nil {
		return p, err
	}
	for _, st := range s.Steps {
		if st <= 0 || st%8 != 0 || st >= p.steps {
			return p, fmt.Errorf("step %d: want a multiple of 8 (a rollout boundary) in (0, %d)", st, p.steps)
		}
	}
	p.schedule = s
	return p, nil
}

// temperature is the evaluation's sampling temperature (-eval-temperature;
// 0 means 1).
// top reports -eval-decode top: every method's own policy proposes its
// most probable distinct proposals at evaluation (proposer.Greedy).
func (o options) top() bool { return o.decode == "top" }

func (o options) temperature() float64 {
	if o.evalTemp == 0 {
		return 1
	}
	return o.evalTemp
}
