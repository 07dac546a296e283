package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/progress"
)

// plan lists the jobs seed by seed, methods in row order within a seed, so
// that an interrupted comparison has whole seeds of every method.
func plan(o options) []job {
	var jobs []job
	for s := range o.seeds {
		for _, m := range methodNames() {
			if slices.Contains(o.methods, m) {
				jobs = append(jobs, job{m, o.firstSeed + uint64(s)})
			}
		}
	}
	return jobs
}

// runDir is the run directory of a suite and profile.
func runDir(o options) string {
	name := o.suite + "-" + o.profile
	for _, l := range o.levers() {
		if l.on {
			name += l.dir
		}
	}
	return filepath.Join(o.out, name)
}

func run(ctx context.Context, w io.Writer, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	start := time.Now()
	if o.corpus != "" {
		var err error
		if o.corpusEv, err = loadCorpus(ctx, o.corpus); err != nil {
			return err
		}
		if o.holdOut != "" {
			if o.corpusEv, err = withoutFamily(o.corpusEv, o.holdOut); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "corpus: %d real proposal runs of %d tasks from %s (outside knowledge: no budget counts them)\n",
			o.corpusEv.Len(), len(corpusTasks(o.corpusEv)), o.corpus)
	}
	if o.landscape != "" {
		var err error
		if o.land, err = landscape.Read(ctx, o.landscape); err != nil {
			return fmt.Errorf("-landscape: %w", err)
		}
		fmt.Fprintf(w, "landscape: %d tasks from %s (the judgement diagnostic)\n", len(o.land.Gains), o.landscape)
	}
	dir := runDir(o)
	jobs := plan(o)
	results := make([]Result, len(jobs))
	var todo []int
	for i, j := range jobs {
		r, ok, err := readResult(dir, j, o)
		if err != nil {
			return err
		}
		if ok {
			results[i] = r
		} else {
			todo = append(todo, i)
		}
	}
	fmt.Fprintf(w, "compare: %d methods × %d seeds, profile %s, suite %s, in %s: %d finished earlier, %d to run\n",
		len(o.methods), o.seeds, o.profile, o.suite, dir, len(jobs)-len(todo), len(todo))
	var paid Runs
	if len(todo) > 0 {
		var err error
		if paid, err = runAll(ctx, w, o, dir, jobs, todo, results); err != nil {
			return err
		}
	}
	var info *ScaleInfo
	if o.scale == "robust" {
		rs, err := readScale(ctx, o, dir, results)
		if err != nil {
			return err
		}
		if results, err = rs.rescale(results); err != nil {
			return err
		}
		info = &rs.info
	}
	if err := report(w, o, dir, results, info); err != nil {
		return err
	}
	fmt.Fprintf(w, "this invocation: %d real runs paid for (%.0f CPU s), %d reused from the store; wall %.0f s\n",
		paid.Fresh, paid.CPUSeconds, paid.Reused, time.Since(start).Seconds())
	return nil
}

// runAll runs the jobs of todo in order, writing each result file as soon
// as the job finishes (an interrupted comparison resumes there), and
// returns the real runs paid for and reused.
func runAll(ctx context.Context, w io.Writer, o options, dir string, jobs []job, todo []int, results []Result) (Runs, error) {
	var paid Runs
	e, err := newEnv(ctx, w, o, filepath.Join(dir, "records.jsonl"))
	if err != nil {
		return paid, err
	}
	defer e.store.Close()
	mode := progressMode(o)
	for k, i := range todo {
		j := jobs[i]
		rep, err := progress.New(w, progress.Config{Title: fmt.Sprintf("[%d/%d] %s: real runs", k+1, len(todo), j),
			Total: expectedRuns(o, methods[j.method], len(e.test)), Mode: mode})
		if err != nil {
			return paid, err
		}
		r, err := runJob(ctx, e, o, j, rep)
		rep.Finish()
		if err != nil {
			return paid, err
		}
		if err := writeResult(dir, j, r); err != nil {
			return paid, err
		}
		results[i] = r
		for _, x := range []Runs{r.Runs.M0, r.Runs.Training, r.Runs.Evaluation, r.Runs.Probe, r.Runs.History} {
			paid.Fresh, paid.Reused, paid.CPUSeconds = paid.Fresh+x.Fresh, paid.Reused+x.Reused, paid.CPUSeconds+x.CPUSeconds
		}
		fmt.Fprintf(w, "%s: %s, %d states; real runs: budget %d (M_0 + training), evaluation %d; %.0f s\n",
			j, avgLine(r), len(r.States), r.Budget(), r.Runs.Evaluation.Fresh+r.Runs.Evaluation.Reused, r.WallSeconds)
	}
	return paid, nil
}

// avgLine is a job's plain Avg@4 for the progress log.
func avgLine(r Result) string {
	var sum float64
	n := 0
	for _, s := range r.States {
		for _, g := range s.Gains {
			sum += g / float64(len(s.Gains))
		}
		n++
	}
	if n == 0 {
		return "no measured state"
	}
	return fmt.Sprintf("Avg@4 %+.2f σ_e", sum/float64(n))
}

// cellsOf turns results of -suite suite into evalstat cells, each with its
// task (evalstat.Hierarchical resamples tasks). The stratum is the part of
// the test split: for the V3 splits its region (lab.RegionOf); for lab v2
// the in- or out-of-distribution part (stratum, the labels of earlier
// reports); one stratum for v1. Every bootstrap replicate keeps that mix.
func cellsOf(suite string, rs []Result) []evalstat.Cell {
	var out []evalstat.Cell
	for _, r := range rs {
		for _, s := range r.States {
			out = append(out, evalstat.Cell{Seed: r.Seed, State: s.ID, Task: s.Task, Stratum: stratumOf(suite, s.Task), Gains: s.Gains})
		}
	}
	return out
}

// isV3 reports whether suite is one of lab's V3 splits, whose test tasks
// fall in the regions lab.RegionNames.
func isV3(suite string) bool { return suite == lab.V3ValName || suite == lab.V3TestName }

// stratumOf is task's stratum under -suite suite: its V3 region
// (lab.RegionOf) on the V3 splits, its part of lab v2 (stratum) otherwise.
func stratumOf(suite, task string) string {
	if isV3(suite) {
		return lab.RegionOf(task)
	}
	return stratum(task)
}

func stratum(task string) string {
	for _, part := range []string{"/test-in/", "/test-out/", "/val/", "/val-out/"} {
		if strings.Contains(task, part) {
			return part
		}
	}
	return ""
}
