// Command llm-rl trains a small decoder-only transformer proposer end to
// end through LM2LM's environment service (package serve) on the embedded
// lab: it starts the service in process on a random loopback port, runs
// train.py against it (a supervised warm-up on catalogue-valid answers,
// then token-level DAPO with the service's rewards, METHOD.md §1 Policy
// optimisation, and calibrations inside the service at their points), and
// evaluates the policy before and after RL with real runs on held-out
// states (/v1/evaluate).
//
//	go run ./examples/llm-rl -profile tiny     # CI: a few states, G = 4, a handful of steps
//	go run ./examples/llm-rl -profile short    # the figures of docs/bring-your-own-model.md
//
// It prints the share of valid proposals and Avg@4 (mean real gain of
// four samples per held-out state, in σ_e units) before and after RL, the
// real-run budget, the monitors at each calibration, and wall and CPU
// time. See docs/bring-your-own-model.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/evalplot"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servelab"
)

// ErrProfile marks an unknown profile name.
var ErrProfile = errors.New("llm-rl: unknown profile")

// Python is Debian's interpreter, which has python3-torch.
const Python = "/usr/bin/python3"

// Profile sizes one end-to-end run.
type Profile struct {
	// Name is "tiny" or "short".
	Name string
	// Train and Test are the lab's training and held-out tasks per family.
	Train, Test int
	// M0 is the number of initial real records (uniform catalogue draws).
	M0 int
	// Schedule is the service's calibration schedule, in RL steps.
	Schedule calibrate.Schedule
	// WarmupSteps, WarmupBatch size the supervised warm-up.
	WarmupSteps, WarmupBatch int
	// Steps is the number of RL steps; States the states per step; Group
	// the completions per state (G).
	Steps, States, Group int
	// EvalStates is the number of held-out states evaluated with four
	// samples each, before and after RL.
	EvalStates int
	// Epochs is the number of DAPO passes over each step's batch.
	Epochs int
	// Split, when set, is a V3 split the held-out states come from, with
	// the V2 suite's whole training split to train on (servelab.Config.Split);
	// Train and Test are then not used.
	Split string
	// Prompt is what the model reads: "condensed" (the TASK line's family,
	// metric and budget and the last three HISTORY lines) or "full" (also
	// the description's "name value" pairs with each value in a
	// quarter-octave bin, and every HISTORY line).
	Prompt string
	// PerSample scores each completion with its own concurrent request
	// (the samples form of /v1/score, as verl's Reward Loop calls), not
	// one request per step.
	PerSample bool
	// LR is the RL learning rate (AdamW).
	LR float64
}

// Profiles are the documented profiles.
var Profiles = map[string]Profile{
	"tiny": {Name: "tiny", Train: 1, Test: 1, M0: 8, Schedule: calibrate.Schedule{Steps: []int{2, 4}, Budgets: []int{2, 2}},
		WarmupSteps: 700, WarmupBatch: 32, Steps: 4, States: 2, Group: 4, EvalStates: 4, Epochs: 2, Prompt: "condensed", PerSample: true, LR: 3e-4},
	"short": {Name: "short", Train: 2, Test: 1, M0: 16, Schedule: calibrate.Schedule{Steps: []int{8, 16, 24}, Budgets: []int{6, 6, 6}},
		WarmupSteps: 1000, WarmupBatch: 32, Steps: 24, States: 4, Group: 8, EvalStates: 8, Epochs: 2, Prompt: "condensed", LR: 3e-4},
	// method is the main job's schedule (METHOD.md §1 Policy optimisation
	// and On-policy calibration: 96 steps of 128 states × G = 8,
	// calibrations at 16, 40 and 64 with budgets 31, 38 and 31, M_0 of
	// 100) on lab's V3 validation split, scored per sample. The learning
	// rate and the passes per batch were chosen on that split (seed 1,
	// examples/compare's Avg@4 of the policy: 3e-4 × 2 passes +1.63,
	// 1e-3 × 2 +1.90, 3e-3 × 2 +2.10, 3e-4 × 4 +2.11, 1e-3 × 4 +2.37 σ_e at
	// the evaluation temperature 0.25; docs/bring-your-own-model.md).
	"method": {Name: "method", M0: 100, Schedule: calibrate.Schedule{Steps: []int{16, 40, 64}, Budgets: []int{31, 38, 31}},
		WarmupSteps: 1000, WarmupBatch: 64, Steps: 96, States: 128, Group: 8, EvalStates: 90, Epochs: 4, Split: "v3-val",
		Prompt: "full", PerSample: true, LR: 1e-3},
}

// Options configure Run.
type Options struct {
	Profile Profile
	// Dir holds the service state, the records store and train.py's
	// summary; required.
	Dir string
	// Script is the path of train.py.
	Script string
	// Seed seeds the loop, M_0's draws and train.py.
	Seed uint64
	// Parallel bounds concurrent world-model calls and real runs.
	Parallel int
	// Setting names the lab setting whose world model scores the run
	// (servelab.Config.Setting; "" = validated).
	Setting string
}

// Calibration is one calibration point: the service's result and the
// monitors read right after it.
type Calibration struct {
	Result   serve.CalibrationStatus `json:"result"`
	Monitors serve.MonitorsResponse  `json:"monitors"`
}

// Eval is one held-out evaluation of train.py.
type Eval struct {
	// Valid is the share of the service-parsed proposals that were valid.
	Valid float64 `json:"valid"`
	// Avg4 is the mean over held-out states of the mean real gain (σ_e
	// units) of four samples, invalid and infeasible ones counting 0.
	Avg4 float64 `json:"avg4"`
	// MeanFeasible is the service's mean over the feasible runs.
	MeanFeasible float64 `json:"mean_feasible_sigmas"`
	// Runs is the real runs the evaluation paid.
	Runs    int `json:"runs"`
	Samples int `json:"samples"`
	// States holds each held-out state's outcomes, sample by sample.
	States []EvalState `json:"states"`
}

// EvalState is one held-out state's evaluated samples.
type EvalState struct {
	StateID string             `json:"state_id"`
	Task    string             `json:"task"`
	Results []serve.EvalResult `json:"results"`
}

// Cell returns the state's gains in the comparison's convention
// (examples/compare, evalstat.Cell): an invalid or unmeasured sample
// counts in no average, an infeasible one counts -clip.
func (s EvalState) Cell(seed uint64, clip float64) evalstat.Cell {
	c := evalstat.Cell{Seed: seed, State: s.StateID, Task: s.Task}
	for _, r := range s.Results {
		switch {
		case !r.Valid || !r.Measured || r.Failure != "":
		case r.Infeasible != "":
			c.Gains = append(c.Gains, -clip)
		default:
			c.Gains = append(c.Gains, r.GainSigmas)
		}
	}
	return c
}

// Step is one RL step as train.py saw it.
type Step struct {
	Step       int     `json:"step"`
	MeanReward float64 `json:"mean_reward"`
	// MeanGain is the mean predicted gain (the world model's, before
	// shaping) of the step's valid samples.
	MeanGain float64 `json:"mean_gain"`
	// TopShare is the share of the step's valid samples that use its most
	// frequent mechanism (absent in runs that did not record it).
	TopShare *float64 `json:"top_share,omitempty"`
	Valid    float64  `json:"valid"`
	Entropy  float64  `json:"entropy"`
	Kept     int      `json:"kept"`
	Flat     int      `json:"flat"`
	Loss     float64  `json:"loss"`
	ClipFrac float64  `json:"clip_frac"`
}

// Summary is train.py's report (its --out file) with the service's
// figures added by Run.
type Summary struct {
	Device string `json:"device"`
	Vocab  int    `json:"vocab"`
	Params int    `json:"params"`
	// WarmupValid is the share of catalogue-valid answers train.py's own
	// parser finds in its post-warm-up sample.
	WarmupValid  float64       `json:"warmup_valid"`
	Before       Eval          `json:"before"`
	After        Eval          `json:"after"`
	Steps        []Step        `json:"steps"`
	Calibrations []Calibration `json:"calibrations"`
	// The rest is Run's: the run's profile, seed and split, the service's
	// state at the end (its real runs: calibrations paid, reused and
	// evaluation runs), M_0's runs paid now, the policy's checkpoints and
	// the wall and CPU time. Run writes the whole summary to
	// <dir>/result.json.
	Profile     string     `json:"profile"`
	Seed        uint64     `json:"seed"`
	Split       string     `json:"split,omitempty"`
	Setting     string     `json:"setting,omitempty"`
	LR          float64    `json:"lr"`
	Epochs      int        `json:"epochs"`
	WarmupSteps int        `json:"warmup_steps"`
	Info        serve.Info `json:"service"`
	M0Runs      int        `json:"m0_runs_paid"`
	Checkpoints []string   `json:"checkpoints,omitempty"`
	WallSeconds float64    `json:"wall_seconds"`
	CPUSeconds  float64    `json:"cpu_seconds"`
}

func main() {
	name := flag.String("profile", "tiny", "tiny (CI), short (the docs' first figures) or method (the main job's schedule on the V3 validation split)")
	dir := flag.String("dir", "", "work directory (default: a new temporary one, removed at exit)")
	seed := flag.Uint64("seed", 1, "seed of the loop, M_0 and train.py")
	parallel := flag.Int("parallel", 2, "concurrent world-model calls and real runs")
	lr := flag.Float64("lr", 0, "RL learning rate, replacing the profile's (0 = the profile's)")
	epochs := flag.Int("epochs", 0, "DAPO passes over each step's batch, replacing the profile's (0 = the profile's)")
	warm := flag.Int("warmup-steps", 0, "supervised warm-up steps, replacing the profile's (0 = the profile's)")
	chart := flag.String("chart", "", "draw the learning curves of the run directories named after the flags (their result.json) into this PNG file, and run nothing")
	split := flag.String("split", "", "the V3 split the held-out states come from, replacing the profile's (v3-val or v3-test; the method profile's is v3-val)")
	set := flag.String("setting", "validated", "the lab setting whose world model scores the run (lab/setting: "+strings.Join(setting.Names(), ", ")+")")
	script := flag.String("script", filepath.Join("examples", "llm-rl", "train.py"), "path of train.py (the default is relative to the repository root)")
	flag.Parse()
	if *chart != "" {
		if err := Chart(*chart, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "llm-rl:", err)
			os.Exit(1)
		}
		return
	}
	p, ok := Profiles[*name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%v %q (tiny, short or method)\n", ErrProfile, *name)
		os.Exit(2)
	}
	if *lr < 0 || *epochs < 0 || *warm < 0 {
		fmt.Fprintln(os.Stderr, "llm-rl: -lr, -epochs and -warmup-steps must be ≥ 0")
		os.Exit(2)
	}
	if *lr > 0 {
		p.LR = *lr
	}
	if *epochs > 0 {
		p.Epochs = *epochs
	}
	if *warm > 0 {
		p.WarmupSteps = *warm
	}
	if *split != "" {
		if *split != lab.V3ValName && *split != lab.V3TestName {
			fmt.Fprintf(os.Stderr, "llm-rl: -split %q: want %s or %s\n", *split, lab.V3ValName, lab.V3TestName)
			os.Exit(2)
		}
		p.Split = *split
	}
	d := *dir
	if d == "" {
		tmp, err := os.MkdirTemp("", "llm-rl-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "llm-rl:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(tmp)
		d = tmp
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := Run(ctx, Options{Profile: p, Dir: d, Script: *script, Seed: *seed, Parallel: *parallel, Setting: *set}, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "llm-rl:", err)
		os.Exit(1)
	}
	Print(os.Stdout, p, s)
}

// Run starts the service over the embedded lab, runs train.py against it
// and returns the summary; progress goes to w.
func Run(ctx context.Context, o Options, w io.Writer) (*Summary, error) {
	start := time.Now()
	cpu0 := cpuTime()
	if o.Parallel < 1 {
		o.Parallel = 1
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	store, err := records.OpenFile(filepath.Join(o.Dir, "records.jsonl"), records.DefaultFileConfig())
	if err != nil {
		return nil, err
	}
	defer store.Close()
	c, m0Runs, err := servelab.Components(ctx, servelab.Config{Train: o.Profile.Train, Test: o.Profile.Test, M0: o.Profile.M0, Seed: o.Seed, Parallel: o.Parallel, Split: o.Profile.Split, Setting: o.Setting}, store, w)
	if err != nil {
		return nil, err
	}
	cfg := serve.DefaultConfig()
	cfg.Addr, cfg.Dir, cfg.Parallel = "127.0.0.1:0", filepath.Join(o.Dir, "serve"), o.Parallel
	cfg.Seed = o.Seed
	cfg.Schedule = o.Profile.Schedule
	s, err := serve.New(cfg, c)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ln, err := s.Listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := s.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		<-served
	}()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(w, "serving %s on %s\n", serve.APIVersion, url)

	out := filepath.Join(o.Dir, "summary.json")
	if err := trainScript(ctx, o, url, out, w).Run(); err != nil {
		return nil, fmt.Errorf("train.py: %w", err)
	}
	p := o.Profile
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	var sum Summary
	if err := json.Unmarshal(raw, &sum); err != nil {
		return nil, fmt.Errorf("train.py summary: %w", err)
	}
	sum.Profile, sum.Seed, sum.Split, sum.Setting = p.Name, o.Seed, p.Split, o.Setting
	if sum.Setting == "" {
		sum.Setting = "validated"
	}
	sum.LR, sum.Epochs, sum.WarmupSteps = p.LR, p.Epochs, p.WarmupSteps
	sum.Info, sum.M0Runs = s.Info(), m0Runs
	for _, name := range []string{"warmup.pt", "final.pt"} {
		if _, err := os.Stat(filepath.Join(o.Dir, "policy", name)); err == nil {
			sum.Checkpoints = append(sum.Checkpoints, filepath.Join("policy", name))
		}
	}
	sum.WallSeconds, sum.CPUSeconds = time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds()
	b, err := json.MarshalIndent(&sum, "", " ")
	if err != nil {
		return nil, err
	}
	if _, err := environment.WriteOut(o.Dir, "result.json", append(b, '\n')); err != nil {
		return nil, err
	}
	return &sum, nil
}

// trainScript is the command that runs train.py against the service at
// url, with the profile's schedule and sizes, its summary written to out
// and its output to w.
func trainScript(ctx context.Context, o Options, url, out string, w io.Writer) *exec.Cmd {
	p := o.Profile
	cmd := exec.CommandContext(ctx, Python, o.Script, "--out", out, "--seed", strconv.FormatUint(o.Seed, 10),
		"--warmup-steps", strconv.Itoa(p.WarmupSteps), "--warmup-batch", strconv.Itoa(p.WarmupBatch),
		"--steps", strconv.Itoa(p.Steps), "--states", strconv.Itoa(p.States), "--group", strconv.Itoa(p.Group),
		"--eval-states", strconv.Itoa(p.EvalStates), "--epochs", strconv.Itoa(p.Epochs),
		"--prompt", p.Prompt, "--lr", strconv.FormatFloat(p.LR, 'g', -1, 64), "--save", filepath.Join(o.Dir, "policy"))
	if p.PerSample {
		cmd.Args = append(cmd.Args, "--per-sample")
	}
	cmd.Env = append(os.Environ(), "LM2LM_URL="+url, "LM2LM_TOKEN=")
	cmd.Stdout, cmd.Stderr = w, w
	return cmd
}

// ErrNoRuns marks a chart asked of no run directory.
var ErrNoRuns = errors.New("llm-rl: no run directory to chart")

// Chart draws the learning curves (mean predicted gain, mean reward,
// entropy, the top mechanism's share where recorded, the share of clipped
// tokens) of the runs in dirs, read from their result.json, into the PNG
// file out: one line, the mean over the runs (seeds), with a band from the
// lowest to the highest.
func Chart(out string, dirs []string) error {
	if len(dirs) == 0 {
		return ErrNoRuns
	}
	var runs []evalplot.TrainingRun
	profile := ""
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "result.json"))
		if err != nil {
			return err
		}
		var s Summary
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(d, "result.json"), err)
		}
		if profile != "" && s.Profile != profile {
			return fmt.Errorf("llm-rl: %s is profile %s, the others %s: one chart is one profile", d, s.Profile, profile)
		}
		profile = s.Profile
		r := evalplot.TrainingRun{Method: "transformer (LM2LM through the service)", Seed: s.Seed, Clipped: true}
		for _, st := range s.Steps {
			top := math.NaN()
			if st.TopShare != nil {
				top = *st.TopShare
			}
			r.Steps = append(r.Steps, evalplot.TrainingStep{Step: st.Step, MeanGain: st.MeanGain, Reward: st.MeanReward,
				Entropy: st.Entropy, TopShare: top, ClipFrac: st.ClipFrac})
		}
		runs = append(runs, r)
	}
	var buf bytes.Buffer
	title := fmt.Sprintf("examples/llm-rl -profile %s: learning curves (one seed)", profile)
	if len(runs) > 1 {
		title = fmt.Sprintf("examples/llm-rl -profile %s: learning curves (mean over %d seeds, band: lowest to highest)", profile, len(runs))
	}
	if err := evalplot.Training(&buf, title, runs); err != nil {
		return err
	}
	_, err := environment.WriteOut(filepath.Dir(out), filepath.Base(out), buf.Bytes())
	return err
}

// cpuTime is the CPU time of this process and its waited-for children.
func cpuTime() time.Duration {
	var t time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			t += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return t
}

// Print writes the report of a run.
func Print(w io.Writer, p Profile, s *Summary) {
	fmt.Fprintf(w, "llm-rl profile %s: transformer %d parameters, vocabulary %d, device %s\n", p.Name, s.Params, s.Vocab, s.Device)
	fmt.Fprintf(w, "warm-up: %d steps; valid answers (train.py's parser) %.1f%%\n", p.WarmupSteps, 100*s.WarmupValid)
	fmt.Fprintf(w, "held-out (%d states × 4 samples, real runs):\n", p.EvalStates)
	fmt.Fprintf(w, "  before RL: valid %.1f%%  Avg@4 %+.3f σ  (feasible mean %+.3f σ, %d runs)\n", 100*s.Before.Valid, s.Before.Avg4, s.Before.MeanFeasible, s.Before.Runs)
	fmt.Fprintf(w, "  after RL:  valid %.1f%%  Avg@4 %+.3f σ  (feasible mean %+.3f σ, %d runs)\n", 100*s.After.Valid, s.After.Avg4, s.After.MeanFeasible, s.After.Runs)
	fmt.Fprintf(w, "RL: %d steps × %d states × G=%d\n", p.Steps, p.States, p.Group)
	fmt.Fprintf(w, "  step  reward  predicted  valid  entropy  kept  flat  clip\n")
	for _, st := range s.Steps {
		fmt.Fprintf(w, "  %4d  %+.3f  %+9.3f  %5.2f  %7.3f  %4d  %4d  %.3f\n", st.Step, st.MeanReward, st.MeanGain, st.Valid, st.Entropy, st.Kept, st.Flat, st.ClipFrac)
	}
	for _, c := range s.Calibrations {
		st, m := c.Result, c.Monitors
		var r serve.CalibrationResult
		if st.Result != nil {
			r = *st.Result
		}
		fmt.Fprintf(w, "calibration at step %d: budget %d, executed %d, infeasible %d, mean real gain %+.3f σ; monitors Δ_M %s gap %s cosine %s accuracy %s\n",
			st.Step, st.Budget, r.Executed, r.Infeasible, r.MeanRealGain, opt(m.DeltaM), opt(m.Gap), opt(m.Cosine), opt(m.Accuracy))
	}
	in := s.Info
	fmt.Fprintf(w, "real-run budget: M_0 %d runs, calibration %d runs (%d reused), evaluation %d runs\n", s.M0Runs, in.RealRuns, in.Reused, in.EvalRuns)
	fmt.Fprintf(w, "wall %s, CPU %s (service, lab and train.py)\n", seconds(s.WallSeconds), seconds(s.CPUSeconds))
}

// seconds formats a number of seconds as a duration to the second.
func seconds(x float64) time.Duration {
	return time.Duration(x * float64(time.Second)).Round(time.Second)
}

func opt(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}
