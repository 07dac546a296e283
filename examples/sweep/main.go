// Command sweep runs the lab's mechanism catalogue on lab tasks and reports
// which changes help, hurt or are noise, and how much the best change
// depends on the task.
//
//	go run ./examples/sweep -landscape                      # the landscape report over the V2 validation tasks
//	go run ./examples/sweep -task v2s1/val/ar-prose/00      # one task's catalogue as a table and chart
//	go run ./examples/sweep -refs                           # b_e, σ_e (with its 95% interval) of every task
//	go run ./examples/sweep -list -suite v1                 # the tasks of a suite
//
// For one task, each card's representative choice (relative to the task's
// reference, lab.RelativeRepresentative; every choice with -all) is trained
// with the first -seeds reference seeds and the mean gain is printed in the
// metric's units and in units of σ_e (METHOD.md §1 Vocabulary, gain
// g = b_e − ℓ against the reference run of the same seed), with a PNG chart.
//
// -landscape sweeps every proposal of the catalogue (every choice of every
// card: the whole action space of a proposer, since the size cards are
// relative to the reference; a proposal that is a no-op or out of range on
// a task is skipped there) with -seeds seeds (default 2) over the suite's
// validation tasks and prints exactly four lines (lab.Landscape, robust
// normalisation: σ floored at the family's median σ_e, each seed clipped at
// the reward clip c = 6):
//
//	median pairwise Spearman: X
//	cards changing sign: P%
//	oracle minus best fixed set (Avg@4, σ_e): D
//	median CPU seconds per run: S
//
// Raw figures, the figures chosen and scored on disjoint seeds, the fixed
// set and progress go to standard error; -chart writes the proposal × task
// heat map of the robust scores. -representative sweeps only each card's
// relative representative and its opposite (lab.RelativeRepresentative,
// lab.RelativeOpposite), a cheaper sweep over fewer proposals.
//
// With -store, reference runs and results are kept in a durable records
// file, and runs already recorded there are not repeated.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// options are the command's flags.
type options struct {
	suite     string
	suiteSeed uint64
	task      string
	seeds     int
	out       string
	chart     string
	all       bool
	repr      bool
	store     string
	parallel  int
	list      bool
	refs      bool
	landscape bool
	part      string
	csv       string
}

func main() {
	var o options
	flag.StringVar(&o.suite, "suite", "v2", "task suite: v2 (generated, lab.SuiteV2), v3-val or v3-test (a V3 split beside the V2 training tasks; -landscape sweeps the split) or v1 (the first lab's 24 tasks)")
	flag.Uint64Var(&o.suiteSeed, "suite-seed", lab.DefaultSuiteSeed, "seed of the V2 suite")
	flag.StringVar(&o.task, "task", "v2s1/val/ar-prose/00", "task ID for a one-task sweep (see -list)")
	flag.IntVar(&o.seeds, "seeds", 0, "seeds per proposal, the first reference seeds (default 2 with -landscape, else 3)")
	flag.StringVar(&o.out, "out", "out/sweep.png", "one-task sweep: PNG chart to write; empty = none")
	flag.StringVar(&o.chart, "chart", "", "-landscape: PNG heat map of card × task scores to write; empty = none")
	flag.BoolVar(&o.all, "all", false, "one-task sweep: every parameter choice of every card")
	flag.BoolVar(&o.repr, "representative", false, "-landscape: each card's relative representative and its opposite only, instead of every proposal of the catalogue")
	flag.StringVar(&o.store, "store", "", "records file caching reference runs and results (default: in memory)")
	flag.IntVar(&o.parallel, "parallel", 2, "runs trained at once")
	flag.BoolVar(&o.list, "list", false, "list the suite's tasks and exit")
	flag.BoolVar(&o.refs, "refs", false, "print every task's b_e, σ_e with its 95% interval, and CPU seconds per reference run, and exit")
	flag.BoolVar(&o.landscape, "landscape", false, "print the landscape report over the validation tasks")
	flag.StringVar(&o.csv, "csv", "", "-landscape: CSV file of the robust card × task scores, one row per task with its descriptors; empty = none")
	flag.StringVar(&o.part, "part", "val", "-landscape over the V2 suite's part: val (the report's), val-out, train, test-in or test-out")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, o); err != nil {
		fmt.Fprintln(os.Stderr, "sweep:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w, log io.Writer, o options) error {
	specs, sweepIDs, err := suiteTasks(o)
	if err != nil {
		return err
	}
	store, closeStore, err := openStore(o.store)
	if err != nil {
		return err
	}
	defer closeStore()
	l, err := newLab(specs, o.parallel, store)
	if err != nil {
		return err
	}
	switch {
	case o.list:
		return printList(w, l)
	case o.refs:
		return printRefs(ctx, w, l)
	case o.landscape:
		return runLandscape(ctx, w, log, l, store, sweepIDs, o)
	}
	return sweepTask(ctx, w, l, store, o)
}

// suiteTasks returns the suite's tasks and the IDs a landscape sweeps (the
// V2 validation tasks; the V1 held-out tasks).
func suiteTasks(o options) ([]lab.TaskSpec, []string, error) {
	switch o.suite {
	case "v2":
		s := lab.SuiteV2(o.suiteSeed)
		parts := map[string][]lab.TaskSpec{"": s.Validation, "val": s.Validation, "val-out": s.ValidationOut, "train": s.Train, "test-in": s.TestIn, "test-out": s.TestOut}
		part, ok := parts[o.part]
		if !ok {
			return nil, nil, fmt.Errorf("-part %q, want val, val-out, train, test-in or test-out", o.part)
		}
		var ids []string
		for _, t := range part {
			ids = append(ids, t.ID)
		}
		return s.All(), ids, nil
	case lab.V3ValName, lab.V3TestName:
		// A V3 split's tasks beside the V2 training split, as
		// examples/compare runs them (-suite v3-val): the landscape sweeps
		// the split's tasks.
		sp, _ := lab.SplitNamed(o.suite)
		var ids []string
		for _, t := range sp.Tasks {
			ids = append(ids, t.ID)
		}
		return append(append([]lab.TaskSpec(nil), lab.SuiteV2(o.suiteSeed).Train...), sp.Tasks...), ids, nil
	case "v1":
		var ids []string
		specs := lab.SuiteV1()
		for _, t := range specs {
			if t.Split == records.HeldOut {
				ids = append(ids, t.ID)
			}
		}
		return specs, ids, nil
	}
	return nil, nil, fmt.Errorf("-suite %q, want v2, %s, %s or v1", o.suite, lab.V3ValName, lab.V3TestName)
}

func openStore(path string) (records.Store, func(), error) {
	if path == "" {
		return records.NewMemStore(), func() {}, nil
	}
	fs, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		return nil, nil, err
	}
	return fs, func() { _ = fs.Close() }, nil
}

func newLab(specs []lab.TaskSpec, parallel int, store records.Store) (*lab.Lab, error) {
	cfg := lab.DefaultConfig()
	cfg.Tasks = specs
	cfg.Parallel = max(parallel, 1)
	return lab.New(cfg, store)
}

func printList(w io.Writer, l *lab.Lab) error {
	for _, s := range l.Specs() {
		fmt.Fprintf(w, "%-28s %-9s %-15s %s\n", s.ID, s.Split, s.Metric(), s.Corpus)
	}
	return nil
}
