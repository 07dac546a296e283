// Command wmrl-verdict runs WMRL (METHOD.md §2) end to end on code-solution
// tasks: a proposer of Python solutions is trained on the scores of a
// verdict world model, with anchor groups graded for real by
// builder/grader, online isotonic debiasing and inverse-variance
// weighting.
//
//	go run ./examples/wmrl-verdict                      # scripted proposer and verdict model, real grading
//	OPENAI_BASE_URL=http://localhost:8000/v1 LM2LM_MODEL=qwen \
//	    go run ./examples/wmrl-verdict -world llm       # the verdict world model is the LLM (rwm/verdict)
//
// The tasks are builder/grader's embedded scikit-learn tasks (built once
// under -out). Every solution is first graded for real (the table of real
// scores); the scripted verdict model answers D(s) = s^power of the real
// score s (a monotone distortion for the debiaser to undo). The scripted
// proposer is a softmax over eight plain-Python solutions that span the
// ladder. Anchor groups are graded for real (each distinct solution once).
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
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder/grader"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/verdict"
)

// Options configure a run.
type Options struct {
	Out    string   // where the tasks are built
	Tasks  []string // embedded task names
	Steps  int
	Seed   uint64
	World  string  // "auto", "scripted" or "llm"
	Power  float64 // the scripted distortion's exponent
	Getenv func(string) string
}

func main() {
	var o Options
	var tasks string
	flag.StringVar(&o.Out, "out", "out/wmrl-verdict", "directory for the embedded tasks")
	flag.StringVar(&tasks, "tasks", "iris,wine,breast-cancer", "embedded tasks (comma-separated)")
	flag.IntVar(&o.Steps, "steps", 48, "policy updates")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed")
	flag.StringVar(&o.World, "world", "auto", "verdict world model: scripted, llm, or auto (llm when $LM2LM_MODEL is set)")
	flag.Float64Var(&o.Power, "power", 0.25, "the scripted verdict model's distortion D(s) = s^power")
	flag.Parse()
	o.Tasks, o.Getenv = strings.Split(tasks, ","), os.Getenv
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := Run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "wmrl-verdict:", err)
		os.Exit(1)
	}
}

// Result is what a run measured.
type Result struct {
	Truth          Truth
	Before, After  Fit     // advantage linearity in the real score before and after the first debiasing fit
	RealRuns       int     // real grader runs for anchors (distinct solutions)
	ScoreBefore    float64 // expected real score of the initial (uniform) policy
	ScoreAfter     float64 // expected real score of the trained policy
	Fitted         bool
	LastWeight     float64
	AnchorGroups   int
	ScriptedWorld  bool
	PolicyAfter    []float64
	SolutionsNames []string
}

// Run is the whole program: prepare the tasks, grade every solution, pick
// the verdict world model, train with WMRL, report.
func Run(ctx context.Context, o Options, w io.Writer) (Result, error) {
	gcfg := grader.DefaultConfig()
	gcfg.Timeout = 60 * time.Second
	tasks, err := grader.Prepare(ctx, filepath.Join(o.Out, "tasks"), gcfg, o.Tasks...)
	if err != nil {
		return Result{}, err
	}
	g, err := grader.New(gcfg, tasks...)
	if err != nil {
		return Result{}, err
	}
	sols := Solutions()
	truth, err := gradeAll(ctx, g, tasks, sols, w)
	if err != nil {
		return Result{}, err
	}
	world, scripted, err := pickWorld(o, truth, w)
	if err != nil {
		return Result{}, err
	}
	res := Result{Truth: truth, ScriptedWorld: scripted}
	policy := NewPolicy(sols, 2)
	res.ScoreBefore = expected(policy.Probs(), sols, tasks, truth)
	memo := &Memo{Exec: g}
	fittedAt, err := train(ctx, o, tasks, world, policy, g, memo, &res, w)
	if err != nil {
		return res, err
	}
	report(&res, o, policy, sols, tasks, memo, fittedAt, w)
	return res, nil
}

// gradeAll grades every solution on every task for real, two at a time.
func gradeAll(ctx context.Context, g *grader.Grader, tasks []grader.Task, sols []Solution, w io.Writer) (Truth, error) {
	grades := make([]grader.Grade, len(tasks)*len(sols))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(2)
	for ti, t := range tasks {
		for si, s := range sols {
			eg.Go(func() error {
				gr, err := g.Grade(ectx, t, s.Code)
				grades[ti*len(sols)+si] = gr
				return err
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	truth := Truth{}
	fmt.Fprintln(w, "real grades (builder/grader, METHOD.md §2 ladder):")
	for ti, t := range tasks {
		for si, s := range sols {
			gr := grades[ti*len(sols)+si]
			truth[truthKey(t.ID, s.Name)] = gr
			fmt.Fprintf(w, "  %-22s %-18s %-11s %.4f  %6.2fs  %s\n", t.ID, s.Name, gr.Status, gr.Score, gr.Wall.Seconds(), detail(gr))
		}
	}
	return truth, nil
}

func detail(gr grader.Grade) string {
	if gr.ErrorType != "" {
		return gr.ErrorType
	}
	if gr.Metric != 0 || gr.Percentile != 0 {
		return fmt.Sprintf("metric %.4f, percentile %.2f", gr.Metric, gr.Percentile)
	}
	return ""
}

// pickWorld returns the LLM verdict model when asked for (or, with "auto",
// when a model is configured), else the scripted one.
func pickWorld(o Options, truth Truth, w io.Writer) (rwm.WorldModel, bool, error) {
	useLLM := o.World == "llm" || (o.World == "auto" && o.Getenv != nil && o.Getenv("LM2LM_MODEL") != "")
	if !useLLM {
		fmt.Fprintf(w, "verdict world model: scripted, D(s) = s^%g of the real score\n", o.Power)
		return Distorted{Truth: truth, Power: o.Power}, true, nil
	}
	cfg := verdict.DefaultConfig()
	cfg.Getenv = o.Getenv
	m, err := verdict.New(cfg)
	if err != nil {
		return nil, false, err
	}
	fmt.Fprintf(w, "verdict world model: %s\n", m.ID())
	return &TextCache{Inner: m}, false, nil
}

// train runs the trainer with WMRL on and returns the first step whose
// batch was shaped with a fitted debiasing map (0 = never).
func train(ctx context.Context, o Options, tasks []grader.Task, world rwm.WorldModel, policy *Policy,
	g *grader.Grader, memo *Memo, res *Result, w io.Writer) (int, error) {
	cfg := lm2lm.DefaultConfig()
	cfg.Steps, cfg.RolloutEvery, cfg.States, cfg.Seed = o.Steps, 4, 24, o.Seed
	cfg.DAPO.Quota = 16
	cfg.Reward.DiversityScale = 0 // rewards are the (debiased) scores alone
	cfg.Calibration, cfg.Schedule = lm2lm.Static, calibrate.Schedule{}
	wm := lm2lm.DefaultWMRLConfig()
	// Library choices for a short run: a quarter of the groups are anchors, the
	// first fit after 48 pairs, and the exact isotonic fit (Bins 0): the
	// scripted distortion is noise-free, so bins would only blur it.
	wm.AnchorFraction, wm.MinPairs, wm.RefitEvery, wm.Bins = 0.25, 48, 16, 0
	cfg.WMRL = &wm
	rts := make([]records.Task, len(tasks))
	for i, t := range tasks {
		rts[i] = t.Record()
	}
	ev, err := records.NewEvidence()
	if err != nil {
		return 0, err
	}
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: policy, World: world, Builder: g, Executor: memo, Tasks: rts, Evidence: ev})
	if err != nil {
		return 0, err
	}
	fittedAt, fitted := 0, false
	_, err = tr.Run(ctx, func(s lm2lm.StepReport) {
		if s.Rollout == nil || s.Rollout.Anchors == nil {
			return
		}
		a := s.Rollout.Anchors
		fmt.Fprintf(w, "step %3d: kept %2d groups, anchors %d (%2d runs, %2d pairs), fitted %-5v weight %.2f, mean reward %+.3f\n",
			s.Step, s.Rollout.Kept, a.Groups, a.Runs, a.Pairs, a.Fitted, a.Weight, s.Rollout.MeanReward)
		res.AnchorGroups += a.Groups
		res.LastWeight = a.Weight
		if a.Fitted && !fitted {
			// This rollout's rewards were shaped before its anchors were
			// absorbed: the next rollout's are the first debiased ones.
			fitted, fittedAt = true, s.Step+cfg.RolloutEvery
		}
	})
	res.Fitted = fitted
	if errors.Is(err, context.Canceled) {
		return fittedAt, err
	}
	return fittedAt, err
}

// expected is the mean real score of a policy's samples over the tasks.
func expected(p []float64, sols []Solution, tasks []grader.Task, truth Truth) float64 {
	var sum float64
	for _, t := range tasks {
		for k, s := range sols {
			sc, _ := truth.Score(t.ID, s.Name)
			sum += p[k] * sc
		}
	}
	return sum / float64(len(tasks))
}

func report(res *Result, o Options, policy *Policy, sols []Solution, tasks []grader.Task, memo *Memo, fittedAt int, w io.Writer) {
	res.RealRuns = memo.Runs()
	res.PolicyAfter = policy.Probs()
	res.ScoreAfter = expected(res.PolicyAfter, sols, tasks, res.Truth)
	for _, s := range sols {
		res.SolutionsNames = append(res.SolutionsNames, s.Name)
	}
	// Batch b (step b+1) is debiased when step b+1 ≥ fittedAt.
	cut := len(policy.Batches)
	if fittedAt > 0 {
		cut = min(fittedAt-1, cut)
	}
	res.Before = MeasureFit(policy.Batches[:cut], res.Truth.Score, memo.Anchored)
	res.After = MeasureFit(policy.Batches[cut:], res.Truth.Score, memo.Anchored)
	fmt.Fprintf(w, "\nadvantage vs real score, R² per world-model group: before the first fit %.3f (%d groups), after %.3f (%d groups)\n",
		res.Before.MeanR2, res.Before.Groups, res.After.MeanR2, res.After.Groups)
	fmt.Fprintf(w, "real grader runs for anchors: %d (distinct solutions; %d anchor groups)\n", res.RealRuns, res.AnchorGroups)
	fmt.Fprintf(w, "expected real score of the policy: %.3f before training, %.3f after\n", res.ScoreBefore, res.ScoreAfter)
	fmt.Fprintln(w, "trained policy:")
	for k, s := range sols {
		fmt.Fprintf(w, "  %-18s %.3f\n", s.Name, res.PolicyAfter[k])
	}
}
