// Command sweep runs a task's mechanism catalogue in the lab and shows
// which changes help, hurt or are noise: for each card (its representative
// choice, or every choice with -all) it trains the proposal with the
// reference seeds, prints a table of the mean gain in the metric's units
// and in units of the task's seed noise σ_e (METHOD.md §1 Vocabulary,
// gain g = b_e − ℓ against the reference run of the same seed), and writes
// the same as a PNG chart with standard-error bars.
//
//	go run ./examples/sweep -task ar-prose/opticks/base-300 -seeds 3 -out out/sweep.png
//	go run ./examples/sweep -list
//
// With -store, reference runs and the sweep's records are kept in a
// durable records file, and runs already recorded there are not repeated.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/records"
)

func main() {
	var (
		taskID   = flag.String("task", "ar-prose/opticks/base-300", "task ID (see -list)")
		nSeeds   = flag.Int("seeds", 3, "seeds per proposal (the first are the reference seeds, so gains share seeds)")
		out      = flag.String("out", "out/sweep.png", "PNG chart to write; empty = none")
		all      = flag.Bool("all", false, "sweep every parameter choice of every card, not one representative per card")
		storeArg = flag.String("store", "", "records file caching reference runs and results (default: in memory)")
		parallel = flag.Int("parallel", 2, "runs trained at once")
		list     = flag.Bool("list", false, "list the tasks and exit")
		refs     = flag.Bool("refs", false, "compute (or load from -store) every task's reference runs, print b_e, σ_e and seconds per run, and exit")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *taskID, *nSeeds, *out, *all, *storeArg, *parallel, *list, *refs); err != nil {
		fmt.Fprintln(os.Stderr, "sweep:", err)
		os.Exit(1)
	}
}

// row is one proposal's sweep result.
type row struct {
	p          records.Proposal
	gains      []float64 // per feasible seed, metric units
	seeds      []uint64
	infeasible string
	cpu        float64
}

func (r row) mean() float64 {
	var s float64
	for _, g := range r.gains {
		s += g
	}
	return s / float64(len(r.gains))
}

// stderr is the standard error of the mean gain (0 with one seed).
func (r row) stderr() float64 {
	n := float64(len(r.gains))
	if n < 2 {
		return 0
	}
	m, ss := r.mean(), 0.0
	for _, g := range r.gains {
		ss += (g - m) * (g - m)
	}
	return math.Sqrt(ss/(n-1)) / math.Sqrt(n)
}

func run(ctx context.Context, w io.Writer, taskID string, nSeeds int, out string, all bool, storePath string, parallel int, list, refs bool) error {
	if nSeeds < 1 {
		return fmt.Errorf("-seeds %d, want ≥ 1", nSeeds)
	}
	var store records.Store = records.NewMemStore()
	if storePath != "" {
		fs, err := records.OpenFile(storePath, records.DefaultFileConfig())
		if err != nil {
			return err
		}
		defer fs.Close()
		store = fs
	}
	cfg := lab.DefaultConfig()
	cfg.Parallel = max(parallel, 1)
	l, err := lab.New(cfg, store)
	if err != nil {
		return err
	}
	if list {
		for _, s := range l.Specs() {
			fmt.Fprintf(w, "%-34s %-9s %s\n", s.ID, s.Split, s.Metric())
		}
		return nil
	}
	if refs {
		return printRefs(ctx, w, l)
	}
	start := time.Now()
	task, err := l.Task(ctx, taskID)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "task %s (%s, %s)\nreference b_e = %.4f, σ_e = %.4f over seeds %v (%.1f s)\n\n",
		task.ID, task.Family, task.Metric, task.RefLoss, task.SeedNoise, cfg.RefSeeds, time.Since(start).Seconds())

	seeds := append([]uint64(nil), cfg.RefSeeds...)
	for s := uint64(len(seeds) + 1); len(seeds) < nSeeds; s++ {
		seeds = append(seeds, s)
	}
	seeds = seeds[:nSeeds]

	var rows []*row
	var jobs []builder.Job
	var owner []*row
	var cached []records.Record
	spec, err := l.Spec(task.ID)
	if err != nil {
		return err
	}
	for _, c := range lab.Catalogue() {
		ps := []records.Proposal{lab.Representative(spec, c)}
		if all {
			ps = cards.Proposals(c)
		}
		for _, p := range ps {
			r := &row{p: p}
			rows = append(rows, r)
			j, err := l.Build(ctx, task, p)
			if err != nil {
				if !errors.Is(err, builder.ErrInfeasible) {
					return err
				}
				r.infeasible = err.Error()
				continue
			}
			for _, jj := range lab.WithSeeds(j, seeds...) {
				if rec, ok, err := records.Seen(ctx, store, task.ID, p.Key(), jj.Seed); err != nil {
					return err
				} else if ok && rec.Task.RefLoss == task.RefLoss {
					// Recorded against the same reference runs.
					addResult(r, rec)
					continue
				}
				jobs = append(jobs, jj)
				owner = append(owner, r)
			}
		}
	}
	fmt.Fprintf(w, "running %d jobs (%d proposals × %d seeds, %d already recorded), %d at a time...\n",
		len(jobs), len(rows), len(seeds), len(rows)*len(seeds)-len(jobs), cfg.Parallel)
	sweepStart := time.Now()
	results := lab.RunAll(ctx, l, jobs, cfg.Parallel)
	var cpu float64
	for i, res := range results {
		if res.Err != nil && !errors.Is(res.Err, builder.ErrInfeasible) {
			return res.Err
		}
		rec := res.Outcome.Record(res.Job)
		rec.Time = time.Now()
		cached = append(cached, rec)
		addResult(owner[i], rec)
		cpu += res.Outcome.Cost.DeviceSeconds
	}
	if len(cached) > 0 {
		if err := store.Append(ctx, cached...); err != nil {
			return err
		}
	}
	wall := time.Since(sweepStart).Seconds()
	if len(jobs) > 0 {
		fmt.Fprintf(w, "done in %.1f s wall, %.1f CPU s (%.2f CPU s per run)\n\n", wall, cpu, cpu/float64(len(jobs)))
	}

	sort.SliceStable(rows, func(i, k int) bool {
		a, b := rows[i], rows[k]
		if (len(a.gains) == 0) != (len(b.gains) == 0) {
			return len(a.gains) > 0
		}
		return len(a.gains) > 0 && a.mean() > b.mean()
	})
	printTable(w, task, rows)
	if out != "" {
		if err := writeChart(out, task, rows); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nwrote %s\n", out)
	}
	return nil
}

// printRefs prints every task's reference loss, seed noise and the mean
// CPU and wall seconds of its reference runs, then the mean per family.
func printRefs(ctx context.Context, w io.Writer, l *lab.Lab) error {
	fmt.Fprintf(w, "%-34s %-9s %-15s %8s %8s %7s %7s\n", "task", "split", "metric", "b_e", "σ_e", "CPU s", "wall s")
	type acc struct{ cpu, wall, n float64 }
	fam := map[string]*acc{}
	var order []string
	for _, s := range l.Specs() {
		ref, err := l.Reference(ctx, s.ID)
		if err != nil {
			return err
		}
		var cpu, wall float64
		for _, r := range ref.Runs {
			cpu += r.Cost.DeviceSeconds
			wall += r.Cost.WallSeconds
		}
		n := float64(len(ref.Runs))
		t := ref.Task
		fmt.Fprintf(w, "%-34s %-9s %-15s %8.4f %8.4f %7.2f %7.2f\n", t.ID, t.Split, t.Metric, t.RefLoss, t.SeedNoise, cpu/n, wall/n)
		a := fam[s.Family]
		if a == nil {
			a = &acc{}
			fam[s.Family] = a
			order = append(order, s.Family)
		}
		a.cpu, a.wall, a.n = a.cpu+cpu, a.wall+wall, a.n+n
	}
	fmt.Fprintln(w)
	for _, f := range order {
		a := fam[f]
		fmt.Fprintf(w, "family %-14s %.2f CPU s, %.2f wall s per reference run (%d runs)\n", f, a.cpu/a.n, a.wall/a.n, int(a.n))
	}
	return nil
}

func addResult(r *row, rec records.Record) {
	r.seeds = append(r.seeds, rec.Seeds...)
	if rec.Infeasible != "" {
		r.infeasible = rec.Infeasible
		return
	}
	r.gains = append(r.gains, rec.Gain)
	r.cpu += rec.Cost.DeviceSeconds
}

func printTable(w io.Writer, task records.Task, rows []*row) {
	fmt.Fprintf(w, "%-46s %10s %8s %8s  %s\n", "proposal", "gain", "±se", "gain/σ_e", "seeds")
	for _, r := range rows {
		name := cards.Render(records.Proposal{Mechanism: r.p.Mechanism, Params: r.p.Params})
		seeds := fmt.Sprint(r.seeds)
		if len(r.gains) == 0 {
			reason := r.infeasible
			if len(reason) > 60 {
				reason = reason[:60] + "…"
			}
			fmt.Fprintf(w, "%-46s %10s %8s %8s  %s infeasible: %s\n", name, "-", "-", "-", seeds, reason)
			continue
		}
		note := ""
		if r.infeasible != "" {
			note = " (some seeds infeasible)"
		}
		fmt.Fprintf(w, "%-46s %+10.4f %8.4f %+8.2f  %s%s\n", name, r.mean(), r.stderr(), r.mean()/task.SeedNoise, seeds, note)
	}
	fmt.Fprintf(w, "gain = b_e − ℓ in %s against the reference run of the same seed; σ_e = %.4f\n", task.Metric, task.SeedNoise)
}

func writeChart(path string, task records.Task, rows []*row) error {
	var names []string
	var xys plotter.XYs
	var errs plotter.YErrors
	for _, r := range rows {
		if len(r.gains) == 0 {
			continue
		}
		names = append(names, strings.ReplaceAll(cards.Render(records.Proposal{Mechanism: r.p.Mechanism, Params: r.p.Params}), " ", "\n"))
		x := float64(len(xys))
		xys = append(xys, plotter.XY{X: x, Y: r.mean() / task.SeedNoise})
		se := r.stderr() / task.SeedNoise
		errs = append(errs, struct{ Low, High float64 }{se, se})
	}
	if len(xys) == 0 {
		return errors.New("no feasible proposal to plot")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: gain of each card (mean over seeds ± s.e.)", task.ID)
	p.Y.Label.Text = "gain / σ_e  (positive = better than reference)"
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 2
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Add(plotter.NewGrid())
	zero, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 0}, {X: float64(len(xys)) - 0.5, Y: 0}})
	if err != nil {
		return err
	}
	p.Add(zero)
	var band *plotter.Line
	for _, lvl := range []float64{-2, 2} {
		band, err = plotter.NewLine(plotter.XYs{{X: -0.5, Y: lvl}, {X: float64(len(xys)) - 0.5, Y: lvl}})
		if err != nil {
			return err
		}
		band.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(band)
	}
	pts, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	pts.GlyphStyle.Shape = draw.CircleGlyph{}
	bars, err := plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{xys, errs})
	if err != nil {
		return err
	}
	p.Add(bars, pts)
	p.Legend.Add("±2σ_e", band)
	p.Legend.Top = true
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	width := max(8*vg.Inch, vg.Length(len(xys))*0.32*vg.Inch)
	return p.Save(width, 6*vg.Inch, path)
}
