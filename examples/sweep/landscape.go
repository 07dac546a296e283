package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/records"
)

// runLandscape sweeps every proposal of the catalogue (with -representative,
// each card's relative representative and its opposite) over the tasks ids
// and prints the four lines of the landscape report to w, details to log.
func runLandscape(ctx context.Context, w, log io.Writer, l *lab.Lab, store records.Store, ids []string, o options) error {
	sw, jobs, where, err := landscapeJobs(ctx, log, l, ids, seedsOr(o.seeds, 2), !o.repr)
	if err != nil {
		return err
	}
	res, err := execute(ctx, log, l, store, jobs, o.parallel)
	if err != nil {
		return err
	}
	cpus := make([]float64, len(res))
	for i, r := range res {
		c := &sw.Cells[where[i][0]][where[i][1]]
		if r.infeasible != "" {
			c.Infeasible++
		} else {
			c.Gains = append(c.Gains, r.gain)
		}
		cpus[i] = r.cpu
	}
	cfg := lab.DefaultLandscapeConfig()
	rep, err := lab.Landscape(sw, cfg)
	if err != nil {
		return err
	}
	printLandscape(w, log, rep, stat.Median(cpus))
	printCards(log, sw.Cards, rep.Robust.Cards, cfg.SignSigma, len(sw.Tasks))
	if o.csv != "" {
		if err := writeCSV(o.csv, sw, rep.Robust.Scores); err != nil {
			return err
		}
		fmt.Fprintf(log, "wrote %s\n", o.csv)
	}
	if o.chart != "" {
		if err := heatMap(o.chart, sw, rep.Robust.Scores); err != nil {
			return err
		}
		fmt.Fprintf(log, "wrote %s\n", o.chart)
	}
	return nil
}

func seedsOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// landscapeJobs builds the jobs of the sweep (column k's proposal on task t
// with every seed; all: every proposal, else representatives and
// opposites); where[i] is job i's {t, k}.
func landscapeJobs(ctx context.Context, log io.Writer, l *lab.Lab, ids []string, nSeeds int, all bool) (lab.Sweep, []builder.Job, [][2]int, error) {
	var sw lab.Sweep
	var jobs []builder.Job
	var where [][2]int
	cols := landscapeColumns(l, ids, all)
	for _, c := range cols {
		sw.Cards = append(sw.Cards, c.name)
	}
	seeds := seedList(l, nSeeds)
	fmt.Fprintf(log, "reference runs of %d tasks...\n", len(ids))
	tasks, out, err := l.Ready(ctx, ids, nil)
	if err != nil {
		return sw, nil, nil, err
	}
	for _, x := range out {
		fmt.Fprintf(log, "task %s left out: %v\n", x.ID, x.Err)
	}
	for t, task := range tasks {
		id := task.ID
		sw.Tasks = append(sw.Tasks, task)
		sw.Cells = append(sw.Cells, make([]lab.Cell, len(cols)))
		for k, c := range cols {
			p, ok := c.choice[id]
			if !ok {
				continue
			}
			j, err := l.Build(ctx, task, p)
			if errors.Is(err, builder.ErrInfeasible) {
				sw.Cells[t][k].Infeasible = len(seeds)
				continue
			} else if err != nil {
				return sw, nil, nil, err
			}
			for _, jj := range lab.WithSeeds(j, seeds...) {
				jobs = append(jobs, jj)
				where = append(where, [2]int{t, k})
			}
		}
	}
	return sw, jobs, where, nil
}

// column is one column of the landscape: a proposal of the catalogue, or a
// card's relative representative or its opposite (lab.RelativeOpposite),
// on every task where it changes the reference.
type column struct {
	name   string                      // the proposal's text, the card, or lab.OppositeLabel for its opposite
	choice map[string]records.Proposal // by task ID
}

func landscapeColumns(l *lab.Lab, ids []string, all bool) []column {
	if all {
		return everyChoice(l, ids)
	}
	var cols []column
	for _, c := range lab.Catalogue() {
		rep := column{name: c.Mechanism, choice: map[string]records.Proposal{}}
		opp := column{choice: map[string]records.Proposal{}}
		opp.name, _ = lab.OppositeLabel(c)
		for _, id := range ids {
			spec, _ := l.Spec(id)
			if p, ok := lab.RelativeRepresentative(spec, c); ok {
				rep.choice[id] = p
			}
			if p, ok := lab.RelativeOpposite(spec, c); ok {
				opp.choice[id] = p
			}
		}
		cols = append(cols, rep)
		if opp.name != "" {
			cols = append(cols, opp)
		}
	}
	return cols
}

// everyChoice returns a column per proposal of the catalogue (every
// combination of every card's choices, cards.Proposals order), each on the
// tasks where it is feasible and changes the reference: the whole action
// space of a proposer, since every size card is relative to the reference.
func everyChoice(l *lab.Lab, ids []string) []column {
	var cols []column
	for _, c := range lab.Catalogue() {
		for _, p := range cards.Proposals(c) {
			col := column{name: lab.Render(p), choice: map[string]records.Proposal{}}
			for _, id := range ids {
				spec, _ := l.Spec(id)
				if lab.Changes(spec, p) {
					col.choice[id] = p
				}
			}
			cols = append(cols, col)
		}
	}
	return cols
}

// writeCSV writes the landscape as CSV: a header of task, family, every
// descriptor name (sorted) and every card, then one row per task with its
// descriptors and its cards' robust scores (empty for a skipped cell).
func writeCSV(path string, sw lab.Sweep, z [][]float64) (err error) {
	names := map[string]bool{}
	for _, t := range sw.Tasks {
		for k := range t.Descriptors {
			names[k] = true
		}
	}
	desc := make([]string, 0, len(names))
	for k := range names {
		desc = append(desc, k)
	}
	sort.Strings(desc)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := csv.NewWriter(f)
	head := append(append([]string{"task", "family"}, desc...), sw.Cards...)
	if err := w.Write(head); err != nil {
		return err
	}
	for i, t := range sw.Tasks {
		row := []string{t.ID, t.Family}
		for _, k := range desc {
			v, ok := t.Descriptors[k]
			row = append(row, cell(v, ok))
		}
		for _, v := range z[i] {
			row = append(row, cell(v, !math.IsNaN(v)))
		}
		if err := w.Write(row); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

func cell(v float64, ok bool) string {
	if !ok {
		return ""
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// printCards writes each card's mean robust score over the tasks (a
// skipped cell counts 0, as in Avg@K) and the tasks where it is above
// +SignSigma and below −SignSigma (lab.CardStats), best first: the cards a
// context-free policy would pick.
func printCards(log io.Writer, cards []string, stats []lab.CardStats, sign float64, tasks int) {
	idx := make([]int, len(cards))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return stats[idx[a]].Mean > stats[idx[b]].Mean })
	w := 0
	for _, c := range cards {
		w = max(w, utf8.RuneCountInString(c))
	}
	for _, k := range idx {
		s := stats[k]
		fmt.Fprintf(log, "card %-*s mean %+6.2f  above +%g on %2d, below −%g on %2d of %d tasks\n", w, cards[k], s.Mean, sign, s.Above, sign, s.Below, tasks)
	}
}

// printLandscape writes the report's four lines to w and the raw figures
// and fixed sets to log.
func printLandscape(w, log io.Writer, rep lab.LandscapeReport, cpu float64) {
	r := rep.Robust
	fmt.Fprintf(w, "median pairwise Spearman: %.2f\n", r.MedianSpearman)
	fmt.Fprintf(w, "cards changing sign: %.0f%%\n", 100*r.SignChange)
	fmt.Fprintf(w, "oracle minus best fixed set (Avg@4, σ_e): %.2f\n", r.OracleMinusFixed)
	fmt.Fprintf(w, "median CPU seconds per run: %.2f\n", cpu)
	fmt.Fprintf(log, "robust (σ floor = family median σ_e, clip ±6): oracle %.2f, best fixed set %.2f %v\n", r.Oracle, r.Fixed, r.FixedSet)
	x := rep.Raw
	fmt.Fprintf(log, "raw (σ_e, no clip): median Spearman %.2f, cards changing sign %.0f%%, oracle %.2f − fixed %.2f = %.2f %v\n",
		x.MedianSpearman, 100*x.SignChange, x.Oracle, x.Fixed, x.OracleMinusFixed, x.FixedSet)
	fmt.Fprintf(log, "held-out seeds (chosen on one half of the seeds, scored on the other): robust oracle %.2f − fixed %.2f = %.2f; raw %.2f − %.2f = %.2f\n",
		r.HeldOutOracle, r.HeldOutFixed, r.HeldOutOracleMinusFixed, x.HeldOutOracle, x.HeldOutFixed, x.HeldOutOracleMinusFixed)
	fams := make([]string, 0, len(rep.Floor))
	for f := range rep.Floor {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		fmt.Fprintf(log, "σ floor %s: %.4f\n", f, rep.Floor[f])
	}
}

// grid is the heat map's card × task matrix (NaN cells, the skipped ones,
// are drawn in the palette's NaN colour).
type grid struct {
	z     [][]float64 // [task][card]
	cards int
}

func (g grid) Dims() (c, r int)   { return g.cards, len(g.z) }
func (g grid) Z(c, r int) float64 { return g.z[r][c] }
func (g grid) X(c int) float64    { return float64(c) }
func (g grid) Y(r int) float64    { return float64(r) }

// heatMap writes the card × task scores (robust, in σ units, clipped to
// ±6) as a PNG.
func heatMap(path string, sw lab.Sweep, z [][]float64) error {
	g := grid{z: z, cards: len(sw.Cards)}
	var pal palette.Palette = moreland.SmoothBlueRed().Palette(255)
	hm := plotter.NewHeatMap(g, pal)
	hm.Min, hm.Max = -6, 6
	hm.NaN = color.Gray{Y: 0xdd}
	p := plot.New()
	p.Title.Text = "Proposal × task gain in σ units (floored σ, clipped ±6): red helps, blue hurts, grey = no-op"
	p.Add(hm)
	p.NominalX(sw.Cards...)
	names := make([]string, len(sw.Tasks))
	for i, t := range sw.Tasks {
		names[i] = t.ID
	}
	p.NominalY(names...)
	p.X.Tick.Label.Rotation = math.Pi / 2
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	return savePlot(p, path, 11*vg.Inch, 7*vg.Inch)
}
