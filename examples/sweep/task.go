package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/records"
)

// row is one proposal's sweep result.
type row struct {
	p          records.Proposal
	gains      []float64 // per feasible seed, metric units
	infeasible string
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

// sweepTask sweeps the catalogue on one task: a table to w and a chart.
func sweepTask(ctx context.Context, w io.Writer, l *lab.Lab, store records.Store, o options) error {
	task, err := l.Task(ctx, o.task)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "task %s (%s, %s)\nreference b_e = %.4f, σ_e = %.4f\n\n", task.ID, task.Family, task.Metric, task.RefLoss, task.SeedNoise)
	rows, jobs, owner, err := taskJobs(ctx, l, task, seedsOr(o.seeds, 3), o.all)
	if err != nil {
		return err
	}
	res, err := execute(ctx, w, l, store, jobs, o.parallel)
	if err != nil {
		return err
	}
	for i, r := range res {
		if r.infeasible != "" {
			owner[i].infeasible = r.infeasible
		} else {
			owner[i].gains = append(owner[i].gains, r.gain)
		}
	}
	sort.SliceStable(rows, func(i, k int) bool {
		a, b := rows[i], rows[k]
		if (len(a.gains) == 0) != (len(b.gains) == 0) {
			return len(a.gains) > 0
		}
		return len(a.gains) > 0 && a.mean() > b.mean()
	})
	printTable(w, task, rows)
	if o.out == "" {
		return nil
	}
	if err := writeChart(o.out, task, rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwrote %s\n", o.out)
	return nil
}

// taskJobs builds one row per proposal (each card's relative
// representative, or every choice with all) and its jobs with every seed.
func taskJobs(ctx context.Context, l *lab.Lab, task records.Task, nSeeds int, all bool) ([]*row, []builder.Job, []*row, error) {
	spec, err := l.Spec(task.ID)
	if err != nil {
		return nil, nil, nil, err
	}
	var rows, owner []*row
	var jobs []builder.Job
	for _, c := range lab.Catalogue() {
		ps := cards.Proposals(c)
		if !all {
			p, ok := lab.RelativeRepresentative(spec, c)
			if !ok {
				continue
			}
			ps = []records.Proposal{p}
		}
		for _, p := range ps {
			r := &row{p: p}
			rows = append(rows, r)
			j, err := l.Build(ctx, task, p)
			if errors.Is(err, builder.ErrInfeasible) {
				r.infeasible = err.Error()
				continue
			} else if err != nil {
				return nil, nil, nil, err
			}
			for _, jj := range lab.WithSeeds(j, seedList(l, nSeeds)...) {
				jobs = append(jobs, jj)
				owner = append(owner, r)
			}
		}
	}
	return rows, jobs, owner, nil
}

func printTable(w io.Writer, task records.Task, rows []*row) {
	fmt.Fprintf(w, "\n%-46s %10s %8s %8s\n", "proposal", "gain", "±se", "gain/σ_e")
	for _, r := range rows {
		name := cards.Render(r.p)
		if len(r.gains) == 0 {
			reason := r.infeasible
			if len(reason) > 60 {
				reason = reason[:60] + "…"
			}
			fmt.Fprintf(w, "%-46s %10s %8s %8s  infeasible: %s\n", name, "-", "-", "-", reason)
			continue
		}
		note := ""
		if r.infeasible != "" {
			note = " (some seeds infeasible)"
		}
		fmt.Fprintf(w, "%-46s %+10.4f %8.4f %+8.2f%s\n", name, r.mean(), r.stderr(), r.mean()/task.SeedNoise, note)
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
		names = append(names, strings.ReplaceAll(cards.Render(r.p), " ", "\n"))
		xys = append(xys, plotter.XY{X: float64(len(xys)), Y: r.mean() / task.SeedNoise})
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
	for _, lvl := range []float64{-2, 0, 2} {
		ln, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: lvl}, {X: float64(len(xys)) - 0.5, Y: lvl}})
		if err != nil {
			return err
		}
		if lvl != 0 {
			ln.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		}
		p.Add(ln)
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
	return savePlot(p, path, max(8*vg.Inch, vg.Length(len(xys))*0.32*vg.Inch), 6*vg.Inch)
}

func savePlot(p *plot.Plot, path string, w, h vg.Length) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return p.Save(w, h, path)
}
