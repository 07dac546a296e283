package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/labenv"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/progress"
	"github.com/lm2lm/lm2lm/records"
)

// env is what every (method, seed) shares: the store of real runs, the lab,
// an idempotent pool, and the training and test tasks.
type env struct {
	store       *records.FileStore
	lab         *lab.Lab
	pool        *builder.Pool
	train, test []records.Task
	// leftOut lists the tasks left out because a reference run failed.
	leftOut []string
	// refSeeds are the lab's reference seeds: the evaluation runs sample k
	// of a state with one of them, so K samples are K measurements.
	refSeeds []uint64
}

// SecondValSeed is the suite seed whose validation split -suite v2-val2
// evaluates on.
const SecondValSeed = 2

// tasks returns the run's tasks and test predicate: -suite's, with
// -hold-out-family's family held out of training (lab.HoldOutFamily: its
// training tasks join no training split, M_0 or world-model context) and
// the evaluation restricted to that family's tasks of the suite's test
// split (the family's former training tasks are not evaluated, so that a
// validation and a test split share none).
func (o options) tasks() ([]lab.TaskSpec, func(records.Task) bool, error) {
	specs, isTest := suiteTasks(o.suite)
	if o.specs != nil {
		specs = o.specs
	}
	if o.holdOut == "" {
		return specs, isTest, nil
	}
	held, err := lab.HoldOutFamily(specs, o.holdOut)
	if err != nil {
		return nil, nil, fmt.Errorf("-hold-out-family: %w", err)
	}
	return held, func(t records.Task) bool { return t.Family == o.holdOut && isTest(t) }, nil
}

// suite is one value of -suite: its name, its help, and its tasks with a
// predicate telling the evaluated ones apart.
type suite struct {
	name, help string
	tasks      func() ([]lab.TaskSpec, func(records.Task) bool)
}

// suiteTable is -suite's one table, in the order the help lists them.
// v2 leaves the validation split out; v2-val evaluates on it instead of
// the test split (where settings are chosen). v3-val and v3-test evaluate
// on lab's V3 splits (four regions: lab.RegionNames) with the V2 suite's
// training split (lab.V3Test).
var suiteTable = []suite{
	{"v2", "lab v2: train on its training split, test on its test split, in and out of distribution", func() ([]lab.TaskSpec, func(records.Task) bool) {
		s := lab.SuiteV2(lab.DefaultSuiteSeed)
		return append(append([]lab.TaskSpec(nil), s.Train...), s.Test()...), func(t records.Task) bool { return strings.Contains(t.ID, "/test-") }
	}},
	// Where settings are chosen: the same training split, the validation
	// tasks (in and out of distribution) in place of the test tasks.
	{"v2-val", "train on lab v2's training split, evaluate on its validation split, in and out of distribution: where settings are chosen", func() ([]lab.TaskSpec, func(records.Task) bool) {
		s := lab.SuiteV2(lab.DefaultSuiteSeed)
		return append(append([]lab.TaskSpec(nil), s.Train...), s.Val()...), isValTask
	}},
	// A second validation split: the same training split, the validation
	// tasks of the generator under another seed (new tasks from the same
	// distribution). For checking a setting chosen on v2-val without
	// touching the test split.
	{"v2-val2", "the same training split, evaluated on the validation split of the generator under suite seed 2: fresh tasks to check a setting chosen on v2-val", func() ([]lab.TaskSpec, func(records.Task) bool) {
		return append(append([]lab.TaskSpec(nil), lab.SuiteV2(lab.DefaultSuiteSeed).Train...), lab.SuiteV2(SecondValSeed).Val()...), isValTask
	}},
	// A diagnostic, not a result: the trained policy evaluated on the
	// tasks it was trained on (how far the gap between them and unseen
	// tasks comes from generalisation).
	{"v2-train", "train and evaluate on lab v2's training split: a diagnostic of generalisation, never a result", func() ([]lab.TaskSpec, func(records.Task) bool) {
		return append([]lab.TaskSpec(nil), lab.SuiteV2(lab.DefaultSuiteSeed).Train...), func(t records.Task) bool { return t.Split == records.Train }
	}},
	{lab.V3ValName, "train on lab v2's training split, evaluate on lab's V3 validation split: four regions, in distribution, compute-starved, compute-rich, new corpora; where settings are chosen", v3Tasks(lab.V3ValName)},
	{lab.V3TestName, "the same training split, evaluated on lab's V3 test split, the same four regions", v3Tasks(lab.V3TestName)},
	{"v1", "the 20 training and 4 held-out tasks", func() ([]lab.TaskSpec, func(records.Task) bool) {
		return lab.SuiteV1(), func(t records.Task) bool { return t.Split != records.Train }
	}},
}

// suiteNames lists -suite's values, in suiteTable order.
func suiteNames() []string {
	var out []string
	for _, s := range suiteTable {
		out = append(out, s.name)
	}
	return out
}

// suiteHelp is -suite's help: each suite with what it trains and
// evaluates on.
func suiteHelp() string {
	var parts []string
	for _, s := range suiteTable {
		parts = append(parts, s.name+" ("+s.help+")")
	}
	return "task suite: " + strings.Join(parts, " | ")
}

// isValTask tells lab v2's validation tasks (in and out of distribution).
func isValTask(t records.Task) bool {
	return strings.Contains(t.ID, "/val/") || strings.Contains(t.ID, "/val-out/")
}

// v3Tasks are a V3 split's tasks (lab.SplitNamed): the V2 training split,
// evaluated on the split's four regions (in distribution,
// compute-starved, compute-rich, new corpora).
func v3Tasks(name string) func() ([]lab.TaskSpec, func(records.Task) bool) {
	return func() ([]lab.TaskSpec, func(records.Task) bool) {
		sp, _ := lab.SplitNamed(name)
		return append(append([]lab.TaskSpec(nil), lab.SuiteV2(lab.DefaultSuiteSeed).Train...), sp.Tasks...), func(t records.Task) bool { return sp.Contains(t.ID) }
	}
}

// suiteTasks returns the lab's tasks for -suite and a predicate telling
// training and test tasks apart (suiteTable); an unknown suite has none.
func suiteTasks(name string) (specs []lab.TaskSpec, isTest func(records.Task) bool) {
	for _, s := range suiteTable {
		if s.name == name {
			return s.tasks()
		}
	}
	return nil, func(records.Task) bool { return false }
}

// newEnv opens the store and the lab and trains (or reads back) the
// reference runs of every task.
func newEnv(ctx context.Context, w io.Writer, o options, storePath string) (*env, error) {
	if err := os.MkdirAll(filepath.Dir(storePath), 0o755); err != nil {
		return nil, err
	}
	store, err := records.OpenFile(storePath, records.DefaultFileConfig())
	if err != nil {
		return nil, err
	}
	lcfg := lab.DefaultConfig()
	lcfg.Parallel = o.parallel
	var isTest func(records.Task) bool
	if lcfg.Tasks, isTest, err = o.tasks(); err != nil {
		store.Close()
		return nil, err
	}
	le, err := labenv.Open(lcfg, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	prep, err := references(ctx, w, o, le, len(lcfg.RefSeeds), storePath)
	if err != nil {
		store.Close()
		return nil, err
	}
	e := &env{store: store, lab: le.Lab(), pool: le.Pool(), train: prep.Train, refSeeds: lcfg.RefSeeds}
	for _, x := range prep.LeftOut {
		e.leftOut = append(e.leftOut, x.ID)
	}
	// Every suite's test tasks are all training tasks (v2-train) or all
	// held out, so they keep the suite's order.
	for _, t := range append(append([]records.Task(nil), prep.Train...), prep.HeldOut...) {
		if isTest(t) {
			e.test = append(e.test, t)
		}
	}
	return e, nil
}

// references sets the environment up through environment.Prepare's
// reference stage (M_0 is each job's, drawn with environment.M0 from the
// job's seed): every task's reference runs trained (or read back), one task
// after the other, with progress counted in tasks, and the tasks split. A
// task whose reference run fails (lab.ErrReference: it diverged) has no
// b_e or σ_e and is left out, named on w and in every result file.
func references(ctx context.Context, w io.Writer, o options, le *labenv.Env, seeds int, storePath string) (environment.Prepared, error) {
	start := time.Now()
	fmt.Fprintf(w, "reference runs: %d tasks × %d seeds (b_e, σ_e; trained once, kept in %s)\n", len(le.Lab().IDs("")), seeds, storePath)
	prep, err := environment.Prepare(ctx, le, environment.Options{Parallel: o.parallel,
		Progress: func(title string, total int) (*progress.Reporter, error) {
			return progress.New(w, progress.Config{Title: title, Total: total, Mode: progressMode(o)})
		}})
	if err != nil {
		return prep, err
	}
	for _, x := range prep.LeftOut {
		fmt.Fprintf(w, "task %s left out: %v\n", x.ID, x.Err)
	}
	fmt.Fprintf(w, "%d tasks ready, %d left out (%.0f s)\n", len(prep.Train)+len(prep.HeldOut), len(prep.LeftOut), time.Since(start).Seconds())
	return prep, nil
}

// progressMode maps -progress to a progress.Mode.
func progressMode(o options) progress.Mode {
	return map[string]progress.Mode{"auto": progress.Auto, "bar": progress.Bar, "lines": progress.Lines}[o.progress]
}

// histories returns the pool the evaluation states draw their histories
// from: n real records of random changes on every test task (METHOD.md §1
// Research state: a task and 0–8 earlier outcomes of that task), drawn with
// a fixed seed so that every method and seed shares them and they are paid
// for once, measured by baseline.RunDraws (a run that failed for a reason
// not the proposal's is left out).
func histories(ctx context.Context, e *env, ex *counter, n, parallel int) (*records.Pool, error) {
	if n == 0 {
		return nil, nil
	}
	var draws []baseline.Draw
	for _, it := range records.DrawChanges(rand.New(rand.NewPCG(0x68697374, 1)), e.test, lab.Catalogue(), n*len(e.test), nil) {
		draws = append(draws, baseline.Draw{Task: it.Task, Proposal: it.Proposal})
	}
	recs, _, err := baseline.RunDraws(ctx, e.lab, ex, draws, parallel)
	if err != nil {
		return nil, err
	}
	return records.NewPool(recs...)
}

// counter is an Executor that counts the runs it passes on, fresh and
// reused (builder.Outcome.Reused), and the CPU seconds of the fresh ones.
type counter struct {
	next                   builder.Executor
	fresh, reused, devMsec atomic.Int64
}

func (c *counter) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	out, err := c.next.Execute(ctx, j)
	switch {
	case err == nil && out.Reused:
		c.reused.Add(1)
	case err == nil || ctx.Err() == nil:
		c.fresh.Add(1)
		c.devMsec.Add(int64(out.Cost.DeviceSeconds * 1000))
	}
	return out, err
}

// take returns the counts since the last take and resets them.
func (c *counter) take() Runs {
	return Runs{Fresh: int(c.fresh.Swap(0)), Reused: int(c.reused.Swap(0)), CPUSeconds: float64(c.devMsec.Swap(0)) / 1000}
}
