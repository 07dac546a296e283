// Command lm2lm runs the full LM2LM method (METHOD.md §1) on the embedded
// lab: real tiny-LM training runs on CPU supply the initial records M_0,
// the embedded in-context world model predicts gains from them, the
// embedded log-linear policy is trained with DAPO on those predictions,
// and at the calibration points the top-rated proposals of the current
// policy are trained for real and added to M. Before and after training
// the policy is evaluated on held-out tasks with real runs (Avg@4, Best@4).
//
//	go run ./examples/lm2lm                       # the default profile (README: profiles and measured timings)
//	go run ./examples/lm2lm -profile short        # a smoke test of the whole loop
//	go run ./examples/lm2lm -profile paper        # 277 states → 256 groups per rollout
//	go run ./examples/lm2lm -calibration static   # the static-RWM ablation
//	go run ./examples/lm2lm -calibration static -wmrl   # WMRL's corrections instead (METHOD.md §2)
//
// Real runs are kept in a durable records file (-store, default
// out/lm2lm-records.jsonl) through an idempotent builder.Pool, so a second
// invocation reuses every run it already paid for. A JSON report is written
// to -report, by default out/lm2lm/<suite>-<profile>-<method>-seed<N>.json,
// and never replaced unless -force.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/labenv"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

type options struct {
	profile, calibration, store, report string
	seed                                uint64
	parallel                            int
	wmrl                                bool
	baseline, holdOut, suite            string
	evalHistory                         int    // -eval-history; < 0 = the profile's
	setting                             string // validated (also "") | library
	progress                            string // auto | bar | lines
	force                               bool   // replace an existing report
	cpuProfile                          string // -cpuprofile; "" = none
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lm2lm:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := profiled(o.cpuProfile, func() error { return run(ctx, os.Stdout, o) }); err != nil {
		fmt.Fprintln(os.Stderr, "lm2lm:", err)
		os.Exit(1)
	}
}

// profiled runs f, writing a pprof CPU profile of it to path (runtime/pprof)
// unless path is empty.
func profiled(path string, f func() error) (err error) {
	if path == "" {
		return f()
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-cpuprofile: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("-cpuprofile: %w", cerr)
		}
	}()
	if err := pprof.StartCPUProfile(out); err != nil {
		return fmt.Errorf("-cpuprofile: %w", err)
	}
	defer pprof.StopCPUProfile()
	return f()
}

// Report is what the program writes as JSON. Undefined numbers (a
// monitor over too few pairs, an average over no feasible run) are null.
type Report struct {
	Profile     string `json:"profile"`
	Calibration string `json:"calibration"`
	Baseline    string `json:"baseline,omitempty"`
	HoldOut     string `json:"hold_out_family,omitempty"`
	Suite       string `json:"suite,omitempty"`
	WMRL        bool   `json:"wmrl"`
	Seed        uint64 `json:"seed"`
	Setting     string `json:"setting"`
	// SettingConfig is the setting's content (setting.Setting), and
	// ProfileConfig the profile's (setting.Profile).
	SettingConfig setting.Setting    `json:"setting_config"`
	ProfileConfig setting.Profile    `json:"profile_config"`
	M0            int                `json:"m0_records"`
	Base          Summary            `json:"base"`          // held-out tasks
	Trained       Summary            `json:"trained"`       // held-out tasks
	BaseTrain     Summary            `json:"base_train"`    // training tasks, one state each
	TrainedTrain  Summary            `json:"trained_train"` // training tasks, one state each
	WinRate       *float64           `json:"win_rate_vs_base"`
	Steps         []Step             `json:"steps"`
	Calibrations  []Calibration      `json:"calibrations"`
	RealRuns      map[string]int     `json:"real_runs"`   // runs paid by this invocation, by phase
	Reused        map[string]int     `json:"reused_runs"` // measurements served from the store, by phase
	CPUSeconds    map[string]float64 `json:"cpu_seconds"`
	Predictions   int64              `json:"world_model_predictions"`
	TasksLeftOut  []string           `json:"tasks_left_out,omitempty"` // a reference run failed (lab.ErrReference)
}

// Summary is one evaluation: Avg@K and Best@K in σ_e units, rates, and the
// same per family in the metric's units.
type Summary struct {
	AvgK, BestK                               *float64
	AvgKFeasible                              *float64 `json:"AvgKFeasible"` // feasible samples only, beside AvgK (infeasible = −6 σ_e)
	NegativeRate, Above2Sigma, InfeasibleRate float64
	Family                                    []Family
}

// Family is one family's Avg@K and Best@K in its metric's units.
type Family struct {
	Family    string
	Metric    records.Metric
	Avg, Best *float64
}

// Calibration is one calibration point's headline numbers.
type Calibration struct {
	Step, Executed, Infeasible        int
	MeanRealGainSigmas                *float64
	JHat, JBar, Delta, Gap            *float64
	AdvantageCosine, PairwiseAccuracy *float64
	Runs                              []string `json:"runs"`
	Failures                          []string `json:"failures,omitempty"` // picked proposals that produced no record
}

// Step is one training step's headline numbers.
type Step struct {
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	Entropy    float64 `json:"entropy"`
	MeanReward float64 `json:"mean_reward,omitempty"`
	MeanGain   float64 `json:"mean_predicted_gain_sigmas,omitempty"`
	TopShare   string  `json:"top_mechanism,omitempty"`
}

// num returns nil for a NaN or infinite x, so that JSON can hold it.
func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func summary(r lm2lm.EvalReport) Summary {
	s := Summary{AvgK: num(r.AvgK), BestK: num(r.BestK), AvgKFeasible: num(r.AvgKFeasible), NegativeRate: r.NegativeRate,
		Above2Sigma: r.Above2Sigma, InfeasibleRate: r.InfeasibleRate}
	for _, f := range r.Family {
		s.Family = append(s.Family, Family{f.Family, f.Metric, num(f.Avg), num(f.Best)})
	}
	return s
}

func calibration(c *lm2lm.CalibrationReport) Calibration {
	out := Calibration{Step: c.Step, Executed: c.Executed, Infeasible: c.Infeasible,
		MeanRealGainSigmas: num(c.MeanRealGain), JHat: num(c.Monitors.Bias.JHat), JBar: num(c.Monitors.Bias.JBar),
		Delta: num(c.Monitors.Bias.Delta), Gap: num(calibrate.Gap(c.Predicted, c.Real)),
		AdvantageCosine: num(c.Monitors.Cosine), PairwiseAccuracy: num(c.Monitors.Accuracy), Failures: c.Failures}
	for _, r := range c.Records {
		g := fmt.Sprintf("%s %s: %+.2f σ_e", r.Task.ID, r.Proposal.Key(), r.Gain/r.Task.SeedNoise)
		if r.Infeasible != "" {
			g = fmt.Sprintf("%s %s: infeasible", r.Task.ID, r.Proposal.Key())
		}
		out.Runs = append(out.Runs, g)
	}
	return out
}

// mainJob is one invocation's state, shared by the steps of run.
type mainJob struct {
	o     options
	prof  setting.Profile
	set   setting.Setting
	mode  lm2lm.Calibration
	w     io.Writer
	start time.Time
	env   *labenv.Env
	lab   *lab.Lab
	pool  *builder.Pool
	cat   []records.Card
	train []records.Task
	held  []records.Task
	seeds []uint64 // the lab's reference seeds: one per evaluation sample
	m0    records.Evidence
	hist  *records.Pool // real records of the held-out tasks: the evaluation states' histories
	world *rwm.Ledger
	pol   *proposer.Policy
	rep   Report
	cost  records.Cost // of the training's real runs
	runs  int
	// trainReused counts the training's measurements served from the store.
	trainReused int
	results     [4]lm2lm.EvalReport // base, base train, trained, trained train
	finish      []func()            // ends the training's progress display
}

// run is the main job, step by step.
func run(ctx context.Context, w io.Writer, o options) (err error) {
	j := &mainJob{o: o, w: w, start: time.Now(),
		rep: Report{RealRuns: map[string]int{}, CPUSeconds: map[string]float64{}, Reused: map[string]int{}}}
	if err := j.parseFlags(); err != nil {
		return err
	}
	store, err := openStore(o.store)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); err == nil {
			err = cerr
		}
	}()
	for _, step := range []func(context.Context) error{
		func(ctx context.Context) error { return j.openLab(ctx, store) },
		j.drawHistories,
		j.newModels,
		func(ctx context.Context) error { return j.evaluate(ctx, "untrained", 0) },
		j.trainPolicy,
		func(ctx context.Context) error { return j.evaluate(ctx, "trained", 2) },
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	j.printResults()
	return j.writeReport()
}

// parseFlags validates every flag and resolves the profile and
// calibration mode.
func (j *mainJob) parseFlags() error {
	if err := j.o.validate(); err != nil {
		return err
	}
	j.prof, _ = setting.LookupProfile(j.o.profile) // validated
	j.set, _ = setting.Lookup(j.o.settingName())   // validated
	j.mode = map[string]lm2lm.Calibration{"top-rated": lm2lm.TopRated, "random": lm2lm.RandomCalibration, "static": lm2lm.Static}[j.o.calibration]
	return nil
}

// openStore opens the durable records file, making its directory.
func openStore(path string) (*records.FileStore, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	return records.OpenFile(path, records.DefaultFileConfig())
}

// suiteTasks returns the main job's tasks: the V2 suite's training and
// test parts (sizes per family), or the V1 suite.
func suiteTasks(suite string, sizes lab.SuiteSizes) ([]lab.TaskSpec, error) {
	switch suite {
	case "v1":
		return lab.SuiteV1(), nil
	case "v2", "":
		return labenv.Suite(sizes), nil
	}
	return nil, fmt.Errorf("unknown -suite %q (v2 or v1)", suite)
}

// openLab makes the lab and its idempotent pool and sets it up through
// environment.Prepare: the reference runs, the split and M_0, catalogue
// proposals drawn uniformly (METHOD.md §1 Data and evaluation:
// mechanism-library sampling), each stage reported as it ends.
func (j *mainJob) openLab(ctx context.Context, store *records.FileStore) error {
	lcfg := lab.DefaultConfig()
	lcfg.Parallel = j.o.parallel
	var err error
	if lcfg.Tasks, err = suiteTasks(j.o.suite, j.prof.Sizes); err != nil {
		return err
	}
	if j.o.holdOut != "" {
		if lcfg.Tasks, err = lab.HoldOutFamily(lcfg.Tasks, j.o.holdOut); err != nil {
			return err
		}
	}
	env, err := labenv.Open(lcfg, store)
	if err != nil {
		return err
	}
	j.env, j.lab, j.pool, j.cat, j.seeds = env, env.Lab(), env.Pool(), env.Catalogue(), lcfg.RefSeeds
	fmt.Fprintf(j.w, "LM2LM on the embedded lab: profile %s, calibration %s, WMRL %v, seed %d, %s setting\n", j.o.profile, j.mode, j.o.wmrl, j.o.seed, j.set.Name)
	fmt.Fprintf(j.w, "reference runs (b_e, σ_e from %d seeds per task; cached in %s) ...\n", len(lcfg.RefSeeds), j.o.store)
	_, err = environment.Prepare(ctx, env, environment.Options{M0: j.prof.M0, Seed: j.o.seed, Parallel: j.o.parallel,
		Progress: j.progress, OnStage: j.onStage})
	return err
}

// onStage reports a stage of the set-up. A task whose reference run
// failed (lab.ErrReference: it diverged) has no b_e or σ_e: it is left
// out, named on the job's writer and in the report, as the comparison
// driver does.
func (j *mainJob) onStage(s environment.Stage, p environment.Prepared) error {
	switch s {
	case environment.StageReferences:
		for _, x := range p.LeftOut {
			j.rep.TasksLeftOut = append(j.rep.TasksLeftOut, x.ID)
			fmt.Fprintf(j.w, "task %s left out: %v\n", x.ID, x.Err)
		}
		j.train, j.held = p.Train, p.HeldOut
		fmt.Fprintf(j.w, "%d training and %d held-out tasks ready (%.0f s)\n", len(j.train), len(j.held), time.Since(j.start).Seconds())
	case environment.StageM0:
		j.m0 = p.M0
		spent := p.M0Spent
		j.rep.RealRuns["m0"], j.rep.CPUSeconds["m0"], j.rep.Reused["m0"] = spent.Runs, spent.Cost.DeviceSeconds, spent.Reused
		fmt.Fprintf(j.w, "M_0: %d real records, %d runs paid now (%.0f s)\n", j.m0.Len(), spent.Runs, time.Since(j.start).Seconds())
	}
	return nil
}

// progress starts a progress display of total units on the job's writer:
// a bar on a terminal, periodic log/slog lines otherwise (-progress).
func (j *mainJob) progress(title string, total int) (*progress.Reporter, error) {
	mode := map[string]progress.Mode{"": progress.Auto, "auto": progress.Auto, "bar": progress.Bar, "lines": progress.Lines}[j.o.progress]
	return progress.New(j.w, progress.Config{Title: title, Total: total, Mode: mode})
}

// drawHistories executes evalHistory random catalogue proposals on each
// held-out task, once: the real histories of the evaluation states, the
// same for every policy, paid as evaluation cost.
func (j *mainJob) drawHistories(ctx context.Context) error {
	var draws []baseline.Draw
	for i, t := range j.held {
		rng := rand.New(rand.NewPCG(j.o.seed, 0x68697374+uint64(i)))
		draws = append(draws, baseline.RandomDraws(rng, []records.Task{t}, j.cat, j.o.historyRecords(j.prof), records.Evidence{})...)
	}
	rep, err := j.progress("evaluation histories: real runs", len(draws))
	if err != nil {
		return err
	}
	recs, spent, err := baseline.RunDraws(ctx, j.lab, progress.Executor(j.pool, rep), draws, j.o.parallel)
	rep.Finish()
	if err != nil {
		return err
	}
	if j.hist, err = records.NewPool(recs...); err != nil {
		return err
	}
	j.rep.RealRuns["eval_histories"], j.rep.CPUSeconds["eval_histories"], j.rep.Reused["eval_histories"] = spent.Runs, spent.Cost.DeviceSeconds, spent.Reused
	fmt.Fprintf(j.w, "evaluation histories: %d real records of the held-out tasks, %d runs paid now\n", len(recs), spent.Runs)
	return nil
}

// validated reports whether the job runs the validated setting.
func (o options) validated() bool { return o.setting != "library" }

// historyRecords is the number of real records per held-out task that the
// evaluation states draw their histories from: -eval-history, or the
// profile's.
func (o options) historyRecords(p setting.Profile) int {
	if o.evalHistory < 0 {
		return p.EvalHistory
	}
	return o.evalHistory
}

// newModels makes the setting's world model (counting its calls) and
// policy (setting.Setting.NewWorld and NewPolicy, as examples/compare
// does), and starts the report. Under the validated setting the world
// model follows the task descriptors fully, reads what each proposal does
// to them from the lab (rwm.WithEffects) and re-tunes on its records
// (rwm.Tuned); the policy has binned descriptor features (no description
// words) and a hidden layer whose initial weights come from the seed, and
// samples its rollouts at the setting's training temperature (the
// trainer's held-out-task rewards are set in trainerConfig).
func (j *mainJob) newModels(context.Context) error {
	w, err := j.set.NewWorld(j.lab)
	if err != nil {
		return err
	}
	j.world = rwm.NewLedger(w)
	pol, err := j.set.NewPolicy(j.o.seed)
	if err != nil {
		return err
	}
	j.pol = pol
	j.rep = Report{Profile: j.o.profile, Calibration: j.mode.String(), Baseline: j.o.baseline, HoldOut: j.o.holdOut, Suite: j.o.suite,
		WMRL: j.o.wmrl, Seed: j.o.seed, Setting: j.set.Name, SettingConfig: j.set, ProfileConfig: j.prof, M0: j.m0.Len(),
		RealRuns: j.rep.RealRuns, CPUSeconds: j.rep.CPUSeconds, Reused: j.rep.Reused}
	return nil
}

// evaluate measures J_test on held-out tasks and J_train on one state of
// each training task (METHOD.md §1 Objective), with empty histories and
// fixed seeds, so that both policies see the same states; the reports go
// to results[at] and results[at+1].
func (j *mainJob) evaluate(ctx context.Context, name string, at int) error {
	ecfg := lm2lm.DefaultEvalConfig()
	ecfg.StatesPerTask = j.prof.EvalStates
	ecfg.Parallel = j.o.parallel
	ecfg.Seed = j.o.seed
	ecfg.Seeds = j.seeds
	tcfg := ecfg
	tcfg.StatesPerTask = 1
	trainHist, err := records.NewPool(j.m0.Records()...)
	if err != nil {
		return err
	}
	fmt.Fprintf(j.w, "\nevaluating the %s policy: %d held-out and %d training states × %d proposals, real runs ...\n",
		name, len(j.held)*ecfg.StatesPerTask, len(j.train), ecfg.K)
	rep, err := j.progress("evaluation of the "+name+" policy: real runs", ecfg.K*(len(j.held)*ecfg.StatesPerTask+len(j.train)))
	if err != nil {
		return err
	}
	defer rep.Finish()
	ex := progress.Executor(j.pool, rep)
	// The policy samples at the evaluation temperature here and at its
	// rollouts' everywhere else.
	if err := j.pol.SetTemperature(j.set.Policy.EvalTemperature); err != nil {
		return err
	}
	defer j.pol.SetTemperature(j.set.Policy.TrainTemperature)
	held, err := lm2lm.Evaluate(ctx, ecfg, j.pol, j.lab, ex, j.held, j.hist)
	if err != nil {
		return err
	}
	train, err := lm2lm.Evaluate(ctx, tcfg, j.pol, j.lab, ex, j.train, trainHist)
	j.rep.RealRuns["eval_"+name] = held.Runs + train.Runs
	j.rep.Reused["eval_"+name] = held.Reused + train.Reused
	j.rep.CPUSeconds["eval_"+name] = held.Cost.DeviceSeconds + train.Cost.DeviceSeconds
	if err != nil {
		return err
	}
	j.results[at], j.results[at+1] = held, train
	if at == 0 {
		j.rep.Base, j.rep.BaseTrain = summary(held), summary(train)
	} else {
		j.rep.Trained, j.rep.TrainedTrain = summary(held), summary(train)
	}
	return nil
}

// trainPolicy trains by LM2LM (or a supervised baseline).
func (j *mainJob) trainPolicy(ctx context.Context) error {
	if j.o.baseline != "" {
		err := supervise(ctx, j.w, j.o.baseline, j.prof.Steps, j.pol, j.m0, &j.rep)
		j.rep.RealRuns["training"], j.rep.CPUSeconds["training"] = 0, 0
		return err
	}
	tr, cfg, err := j.newTrainer()
	if err != nil {
		return err
	}
	fmt.Fprintf(j.w, "\ntraining: %d steps, %d states × %d proposals per rollout, calibration %v budgets %v\n",
		cfg.Steps, cfg.States, cfg.DAPO.GroupSize, cfg.Schedule.Steps, cfg.Schedule.Budgets)
	fmt.Fprintf(j.w, "%5s %9s %8s %9s %9s  %s\n", "step", "loss", "entropy", "reward", "ĝ/σ_e", "top mechanism (share)")
	_, err = tr.Run(ctx, j.onStep)
	for _, f := range j.finish {
		f()
	}
	if err != nil {
		return err
	}
	j.cost, j.runs = tr.Cost()
	j.trainReused = tr.Reused()
	j.rep.RealRuns["training"], j.rep.CPUSeconds["training"], j.rep.Reused["training"] = j.runs, j.cost.DeviceSeconds, j.trainReused
	return nil
}

// newTrainer configures the LM2LM trainer of the profile.
func (j *mainJob) newTrainer() (*lm2lm.Trainer, lm2lm.Config, error) {
	cfg := j.trainerConfig()
	budget := 0
	for _, b := range cfg.Schedule.Budgets {
		budget += b
	}
	rep, err := j.progress("training: real runs", budget)
	if err != nil {
		return nil, cfg, err
	}
	j.finish = append(j.finish, rep.Finish)
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: j.pol, World: j.world, Builder: j.lab,
		Executor: progress.Executor(j.pool, rep), Tasks: j.train, Evidence: j.m0})
	return tr, cfg, err
}

// trainerConfig is the LM2LM trainer's configuration: the profile's
// sizes (setting.Profile.ApplyTrainer), the calibration mode, the
// setting's trainer part (setting.Setting.ApplyTrainer) and, with -wmrl,
// the drivers' WMRL configuration (setting.LabWMRL).
func (j *mainJob) trainerConfig() lm2lm.Config {
	cfg := lm2lm.DefaultConfig()
	j.prof.ApplyTrainer(&cfg)
	cfg.Calibration = j.mode
	cfg.Parallel = j.o.parallel
	cfg.Seed = j.o.seed
	j.set.ApplyTrainer(&cfg)
	if j.o.wmrl {
		w := setting.LabWMRL()
		cfg.WMRL = &w
	}
	return cfg
}

// onStep prints and records one training step.
func (j *mainJob) onStep(s lm2lm.StepReport) {
	w := j.w
	st := Step{Step: s.Step, Loss: s.Update.Loss, Entropy: s.Update.Entropy}
	if c := s.Calibration; c != nil {
		j.rep.Calibrations = append(j.rep.Calibrations, calibration(c))
		fmt.Fprintf(w, "  calibration at step %d: %d real runs (%d infeasible), mean real gain %+.2f σ_e; "+
			"predicted vs real reward: Ĵ_M %+.2f, J̄ %+.2f, Δ_M %+.2f, cosine %.2f, pairwise accuracy %.2f\n",
			c.Step, c.Executed, c.Infeasible, c.MeanRealGain, c.Monitors.Bias.JHat, c.Monitors.Bias.JBar,
			c.Monitors.Bias.Delta, c.Monitors.Cosine, c.Monitors.Accuracy)
		for _, f := range c.Failures {
			fmt.Fprintf(w, "  not measured: %s\n", f)
		}
	}
	if r := s.Rollout; r != nil {
		st.MeanReward, st.MeanGain = r.MeanReward, r.MeanGain
		if len(r.Share) > 0 {
			st.TopShare = fmt.Sprintf("%s (%.0f%%)", r.Share[0].Mechanism, 100*r.Share[0].Fraction)
		}
		fmt.Fprintf(w, "%5d %9.4f %8.3f %+9.3f %+9.3f  %s   [kept %d of %d groups]\n",
			s.Step, st.Loss, st.Entropy, st.MeanReward, st.MeanGain, st.TopShare, r.Kept, r.Groups)
		if a := r.Anchors; a != nil {
			fmt.Fprintf(w, "  WMRL: %d anchor groups, %d real runs, debiaser fitted %v, anchor weight %.2f (D %.2f)\n",
				a.Groups, a.Runs, a.Fitted, a.Weight, a.Disagree)
		}
	}
	j.rep.Steps = append(j.rep.Steps, st)
}

// printResults fills the report's evaluation and prints the tables.
func (j *mainJob) printResults() {
	base, baseTrain, trained, trainedTrain := j.results[0], j.results[1], j.results[2], j.results[3]
	j.rep.WinRate = num(lm2lm.WinRate(trained, base))
	j.rep.Predictions = j.world.Stats().Calls
	w := j.w
	for _, tab := range []struct {
		title         string
		base, trained lm2lm.EvalReport
	}{{"held-out tasks (J_test)", base, trained}, {"training tasks (J_train)", baseTrain, trainedTrain}} {
		fmt.Fprintf(w, "\n%s: gains in σ_e units, real runs\n", tab.title)
		fmt.Fprintf(w, "%-10s %8s %8s %10s %10s %10s %11s\n", "policy", "Avg@4", "Best@4", "feas. avg", "neg. rate", "> 2σ_e", "infeasible")
		for _, x := range []struct {
			name string
			r    lm2lm.EvalReport
		}{{"Base", tab.base}, {"trained", tab.trained}} {
			fmt.Fprintf(w, "%-10s %+8.2f %+8.2f %+10.2f %9.1f%% %9.1f%% %10.1f%%\n", x.name, x.r.AvgK, x.r.BestK, x.r.AvgKFeasible,
				100*x.r.NegativeRate, 100*x.r.Above2Sigma, 100*x.r.InfeasibleRate)
		}
		fmt.Fprintf(w, "win rate of the trained policy vs Base per state: %.2f\n", lm2lm.WinRate(tab.trained, tab.base))
	}
	fmt.Fprintf(w, "\nheld-out tasks per family (Avg@4 / Best@4 in the metric's units ×10³)\n")
	for i, f := range trained.Family {
		b := base.Family[i]
		fmt.Fprintf(w, "  %-16s %-15s Base %+7.2f / %+7.2f   trained %+7.2f / %+7.2f\n", f.Family, f.Metric,
			1e3*b.Avg, 1e3*b.Best, 1e3*f.Avg, 1e3*f.Best)
	}
	fmt.Fprintf(w, "\nreal-run budget of the method: M_0 %d records + training (calibration and anchors) %d runs = %d\n",
		j.m0.Len(), j.runs+j.trainReused, j.m0.Len()+j.runs+j.trainReused)
	j.printCost()
}

// printCost prints what this invocation paid for and what it reused from
// the store, by phase.
func (j *mainJob) printCost() {
	phases := []struct{ name, key string }{{"M_0", "m0"}, {"training", "training"},
		{"evaluation histories", "eval_histories"}, {"evaluation before", "eval_untrained"}, {"evaluation after", "eval_trained"}}
	byPhase := func(m map[string]int) (int, string) {
		total, parts := 0, []string{}
		for _, p := range phases {
			total += m[p.key]
			parts = append(parts, fmt.Sprintf("%s %d", p.name, m[p.key]))
		}
		return total, strings.Join(parts, ", ")
	}
	cpu := 0.0
	for _, v := range j.rep.CPUSeconds {
		cpu += v
	}
	paid, paidBy := byPhase(j.rep.RealRuns)
	reused, reusedBy := byPhase(j.rep.Reused)
	fmt.Fprintf(j.w, "paid now: %d real runs (%s; %.0f CPU s) and %d world-model predictions\n", paid, paidBy, cpu, j.world.Stats().Calls)
	fmt.Fprintf(j.w, "reused from %s: %d real runs (%s)\n", j.o.store, reused, reusedBy)
	fmt.Fprintf(j.w, "wall time %.0f s\n", time.Since(j.start).Seconds())
}

// writeReport writes the JSON report (unless -report none), never
// replacing a file unless -force.
func (j *mainJob) writeReport() error {
	path := j.o.reportPath()
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(j.rep, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(path, append(b, '\n'), j.o.force); err != nil {
		return err
	}
	fmt.Fprintf(j.w, "report written to %s\n", path)
	return nil
}

// writeFile writes b to path through a temporary file, so the file appears
// complete; without replace it fails with fs.ErrExist if path exists.
func writeFile(path string, b []byte, replace bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if replace {
		return os.Rename(tmp.Name(), path)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("report not written: %w (a report is never replaced without -force)", err)
	}
	return nil
}

// supervise trains the policy by maximum likelihood on the real records of
// M_0 instead of RL (baseline.SupervisedItems and baseline.Supervise):
// "sft" imitates every feasible record, "rft" (RFT-Real) only those with a
// positive gain. One Supervise step per training step, on the whole set.
func supervise(ctx context.Context, w io.Writer, kind string, steps int, pol *proposer.Policy, m0 records.Evidence, rep *Report) error {
	items, err := baseline.SupervisedItems(baseline.Supervision(kind), pol, m0)
	if err != nil {
		return fmt.Errorf("-baseline %s: %w", kind, err)
	}
	fmt.Fprintf(w, "\n%s: %d maximum-likelihood steps on %d of %d real records\n", strings.ToUpper(kind), steps, len(items), m0.Len())
	return baseline.Supervise(ctx, pol, items, steps, func(i int, st proposer.Stats) {
		rep.Steps = append(rep.Steps, Step{Step: i, Loss: st.Loss, Entropy: st.Entropy})
		if (i-1)%8 == 0 || i == steps {
			fmt.Fprintf(w, "%5d  NLL %.4f  entropy %.3f\n", i, st.Loss, st.Entropy)
		}
	})
}
