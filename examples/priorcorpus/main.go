// Command priorcorpus builds the lab's pretraining corpus and fits the
// world model's pretrained prior on it (rwm.FitPrior; docs/world-models.md,
// "The lab's pretraining corpus").
//
// The corpus is lab.PretrainTasks(-per-family): tasks of the
// in-distribution space drawn from generator streams no split uses, so it
// holds no training, validation or test task. Each task gets its full
// landscape: every proposal of every catalogue card (both directions of
// each) that changes its reference, over -seeds seeds, as `examples/sweep
// -landscape` runs them. The runs are stored in -store (a records file;
// the runs already there are reused, so a second invocation on the same
// store runs nothing and refits); then the prior is fitted on the corpus's
// real proposal runs with rwm.DefaultPriorFitConfig around the validated
// setting's world configuration (setting.Validated().WorldConfig over
// PriorLab), λ -ridge and targets clipped to ±-clip σ_e, and written to
// -out. The fit depends only on the records, so
// the same store gives the same file, byte for byte.
//
//	go run ./examples/priorcorpus -store out/pretrain.records -out lab/prior/v2.prior
//
// The corpus is outside knowledge: its runs count toward no method's
// real-run budget.
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

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Defaults of the flags, lab choices made on v2-val's ranking
// (examples/rwmeval -prior; docs/results.md): 24 tasks per family, 96 in
// all, a corpus of about 16,600 runs (8 and 16 per family ranked worse);
// the landscape's two seeds; targets clipped to ±6 σ_e, the range the
// ranking scores (unclipped, a few heavy-tailed gains decide the
// coefficients); λ 100, among 30, 100, 300, 1,000 and 3,000 with the
// clip (rwm's default λ 1 leaves the 4,442-feature ridge system
// singular on this corpus).
const (
	defaultPerFamily = 24
	defaultSeeds     = 2
	defaultRidge     = 100
	defaultClip      = 6
)

type options struct {
	perFamily, seeds, parallel int
	store, out                 string
	ridge                      float64 // λ of the prior's mean (rwm.PriorFitConfig.Ridge)
	clip                       float64 // the mean's target clip (rwm.PriorFitConfig.Clip; 0 = none)
	maxProposals               int     // tests: the first n proposals of the catalogue only (0 = all)
}

func main() {
	var o options
	flag.IntVar(&o.perFamily, "per-family", defaultPerFamily, "corpus tasks per V2 family (lab.PretrainTasks)")
	flag.IntVar(&o.seeds, "seeds", defaultSeeds, "seeds per proposal: the lab's first reference seeds")
	flag.IntVar(&o.parallel, "parallel", 2, "runs trained at once")
	flag.StringVar(&o.store, "store", "out/pretrain.records", "records file of the corpus's runs (reused: runs already there are not repeated)")
	flag.Float64Var(&o.ridge, "ridge", defaultRidge, "λ of the prior mean's ridge regression (rwm.PriorFitConfig.Ridge)")
	flag.Float64Var(&o.clip, "clip", defaultClip, "clip of the prior mean's targets in σ_e (rwm.PriorFitConfig.Clip; 0 = none)")
	flag.StringVar(&o.out, "out", "lab/prior/v2.prior", "prior file to write")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, o); err != nil {
		fmt.Fprintln(os.Stderr, "priorcorpus:", err)
		os.Exit(1)
	}
}

// PriorLab returns the lab the prior is fitted over and loaded with: the
// V2 suite's tasks (lab.SuiteV2(lab.DefaultSuiteSeed).All(), the tasks
// examples/rwmeval's world models know) followed by the pretraining
// corpus's perFamily tasks per family, with no records. Its Effects' ID,
// which the prior file records, names the catalogue and the effects'
// computation (lab.Lab.Effects), so a world model over any lab of the
// same catalogue, such as the V3 splits', loads the prior.
func PriorLab(perFamily, parallel int, store records.Store) (*lab.Lab, error) {
	cfg := lab.DefaultConfig()
	cfg.Tasks = append(lab.SuiteV2(lab.DefaultSuiteSeed).All(), lab.PretrainTasks(perFamily)...)
	cfg.Parallel = max(parallel, 1)
	return lab.New(cfg, store)
}

func run(ctx context.Context, w, log io.Writer, o options) error {
	if o.perFamily < 1 || o.seeds < 1 {
		return fmt.Errorf("-per-family %d, -seeds %d: want ≥ 1", o.perFamily, o.seeds)
	}
	st, err := records.OpenFile(o.store, records.DefaultFileConfig())
	if err != nil {
		return err
	}
	defer st.Close()
	l, err := PriorLab(o.perFamily, o.parallel, st)
	if err != nil {
		return err
	}
	start := time.Now()
	cpu0 := processCPU()
	if err := build(ctx, log, l, st, o); err != nil {
		return err
	}
	cpuBuild := processCPU() - cpu0
	fmt.Fprintf(log, "corpus built in %s wall, %.0f CPU s in this process\n", time.Since(start).Round(time.Second), cpuBuild)
	rs, err := st.Scan(ctx, records.Filter{})
	if err != nil {
		return err
	}
	fitStart, cpu1 := time.Now(), processCPU()
	p, file, err := fit(ctx, l, keep(rs, o.perFamily), o.ridge, o.clip)
	if err != nil {
		return err
	}
	fitCPU := processCPU() - cpu1
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, file, 0o644); err != nil {
		return err
	}
	s := summarise(keep(rs, o.perFamily))
	c := p.Corpus()
	_, err = fmt.Fprintf(w, "corpus: %d tasks, %d reference runs, %d proposal runs (%d of them infeasible), %.0f CPU s of runs\n"+
		"prior: %d records of %d tasks, %d features, log marginal %.1f over %d blocks; fitted in %s wall, %.1f CPU s\n"+
		"wrote %s: %d bytes, digest %s\n",
		s.tasks, s.refs, s.runs, s.infeasible, s.cpu,
		c.Records, c.Tasks, len(p.Names()), c.LogMarginal, c.Blocks, time.Since(fitStart).Round(time.Millisecond), fitCPU,
		o.out, len(file), p.Digest())
	return err
}

// build runs every corpus task's landscape that st does not hold yet.
func build(ctx context.Context, log io.Writer, l *lab.Lab, st records.Store, o options) error {
	var ids []string
	for _, t := range lab.PretrainTasks(o.perFamily) {
		ids = append(ids, t.ID)
	}
	fmt.Fprintf(log, "reference runs of %d corpus tasks...\n", len(ids))
	tasks, out, err := l.Ready(ctx, ids, nil)
	if err != nil {
		return err
	}
	for _, x := range out {
		fmt.Fprintf(log, "task %s left out: %v\n", x.ID, x.Err)
	}
	ref := l.Config().RefSeeds
	if o.seeds > len(ref) {
		return fmt.Errorf("-seeds %d: the lab has %d reference seeds", o.seeds, len(ref))
	}
	seeds := ref[:o.seeds]
	var todo []builder.Job
	n := 0
	for _, task := range tasks {
		spec, err := l.Spec(task.ID)
		if err != nil {
			return err
		}
		for _, p := range proposals(o.maxProposals) {
			if !lab.Changes(spec, p) {
				continue
			}
			j, err := l.Build(ctx, task, p)
			if errors.Is(err, builder.ErrInfeasible) {
				continue
			} else if err != nil {
				return err
			}
			for _, jj := range lab.WithSeeds(j, seeds...) {
				n++
				rec, ok, err := records.Seen(ctx, st, jj.Task.ID, jj.Proposal.Key(), jj.Seed)
				if err != nil {
					return err
				}
				if !ok || rec.Task.RefLoss != jj.Task.RefLoss {
					todo = append(todo, jj)
				}
			}
		}
	}
	fmt.Fprintf(log, "running %d of %d runs (%d already recorded), %d at a time...\n", len(todo), n, n-len(todo), o.parallel)
	start := time.Now()
	for lo := 0; lo < len(todo); lo += chunk {
		hi := min(lo+chunk, len(todo))
		res := lab.RunAll(ctx, l, todo[lo:hi], o.parallel)
		recs := make([]records.Record, 0, len(res))
		for _, r := range res {
			if r.Err != nil && !errors.Is(r.Err, builder.ErrInfeasible) {
				return r.Err
			}
			rec := r.Outcome.Record(r.Job)
			rec.Time = time.Now()
			recs = append(recs, rec)
		}
		if err := st.Append(ctx, recs...); err != nil {
			return err
		}
		fmt.Fprintf(log, "%d/%d runs, %.0f s wall\n", hi, len(todo), time.Since(start).Seconds())
	}
	return nil
}

// chunk is how many runs go to the store at once, so that an interrupted
// build keeps most of its runs.
const chunk = 64

// proposals returns every proposal of the catalogue (each card's every
// choice, cards.Proposals order: both directions of every card), the
// first max only when max > 0.
func proposals(max int) []records.Proposal {
	out := cards.All(lab.Catalogue())
	if max > 0 && max < len(out) {
		out = out[:max]
	}
	return out
}

// keep returns the records of rs on the corpus's first perFamily tasks
// per family and every record of a task outside the corpus (for fit to
// refuse); runs of a larger corpus's other tasks are left out, so a store
// built with a larger -per-family serves a smaller one.
func keep(rs []records.Record, perFamily int) []records.Record {
	ids := map[string]bool{}
	for _, t := range lab.PretrainTasks(perFamily) {
		ids[t.ID] = true
	}
	var out []records.Record
	for _, r := range rs {
		if ids[r.Task.ID] || !strings.HasPrefix(r.Task.ID, lab.PretrainName+"/") {
			out = append(out, r)
		}
	}
	return out
}

// fit fits the prior on the corpus's real proposal runs (lab.PretrainRuns:
// reference runs, records.NoChange, are left out, as a context holds
// proposals' runs) with rwm.DefaultPriorFitConfig around the validated
// setting's world configuration over l, and returns it with its file. A
// record of a task that is not a corpus task is an error wrapping
// lab.ErrNotPretrain: the corpus never holds a training, validation or
// test task.
func fit(ctx context.Context, l *lab.Lab, rs []records.Record, ridge, clip float64) (*rwm.Prior, []byte, error) {
	corpus, err := lab.PretrainRuns(rs)
	if err != nil {
		return nil, nil, err
	}
	cfg := rwm.DefaultPriorFitConfig(setting.Validated().WorldConfig(l))
	cfg.Ridge, cfg.Clip = ridge, clip
	p, err := rwm.FitPrior(ctx, cfg, corpus)
	if err != nil {
		return nil, nil, err
	}
	file, err := p.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	return p, file, nil
}

// summary counts a corpus's runs.
type summary struct {
	tasks, refs, runs, infeasible int     // runs: real proposal runs
	cpu                           float64 // CPU seconds of the runs (Cost.DeviceSeconds)
}

func summarise(rs []records.Record) summary {
	var s summary
	tasks := map[string]bool{}
	for _, r := range rs {
		switch {
		case r.Source == records.Reference:
			s.refs++
		case r.Source != records.Real || r.Proposal.IsNoChange():
			continue
		default:
			tasks[r.Task.ID] = true
			s.runs++
			if r.Infeasible != "" {
				s.infeasible++
			}
		}
		s.cpu += r.Cost.DeviceSeconds
	}
	s.tasks = len(tasks)
	return s
}
