package evalplot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// TrainingStep is one training step's headline numbers (METHOD.md §1
// Policy optimisation, case study); NaN marks a value not measured at that
// step (a step without a rollout).
type TrainingStep struct {
	Step int
	// MeanGain is the mean predicted gain of the rollout's valid proposals
	// in σ_e units; Reward the mean shaped reward.
	MeanGain, Reward float64
	// Entropy is the policy's mean token entropy (nats).
	Entropy float64
	// TopShare is the share (0..1) of the rollout's proposals that use its
	// most frequent mechanism.
	TopShare float64
	// ClipFrac is the share (0..1) of the update's tokens whose ratio was
	// clipped (METHOD.md §1 Policy optimisation: ε_low, ε_high); read only
	// in a run that sets Clipped.
	ClipFrac float64
}

// TrainingRun is one method's training under one seed.
type TrainingRun struct {
	Method string
	Seed   uint64
	Steps  []TrainingStep
	// Clipped says the steps carry ClipFrac: the chart then has a fifth
	// panel, the share of clipped tokens, with a line for every run that
	// sets it.
	Clipped bool
}

// Training draws the training curves of every method over steps: mean
// predicted gain, mean reward, entropy and top mechanism share (unless no
// step of any run has a finite one), and the share of clipped tokens when
// a run carries it (TrainingRun.Clipped). Each method
// is one line, the mean over its seeds, with a shaded band from the lowest
// to the highest seed.
func Training(w io.Writer, title string, runs []TrainingRun) error {
	if len(runs) == 0 {
		return ErrEmpty
	}
	var labels []string
	var seeds [][]TrainingStep
	for _, r := range runs {
		labels = append(labels, r.Method)
		seeds = append(seeds, r.Steps)
	}
	quantity := func(f func(TrainingStep) float64) []plotter.XYs {
		out := make([]plotter.XYs, len(seeds))
		for i, steps := range seeds {
			for _, s := range steps {
				out[i] = append(out[i], plotter.XY{X: float64(s.Step), Y: f(s)})
			}
		}
		return out
	}
	specs := []lineSpec{
		{"mean predicted gain of the rollout", "predicted gain (" + Sigma + " units)", quantity(func(s TrainingStep) float64 { return s.MeanGain }), 0, 1},
		{"mean shaped reward", "reward", quantity(func(s TrainingStep) float64 { return s.Reward }), 0, 1},
		{"policy entropy", "entropy (nats per token)", quantity(func(s TrainingStep) float64 { return s.Entropy }), math.NaN(), 1},
	}
	// The top mechanism's share, unless no run measured it.
	if top := quantity(func(s TrainingStep) float64 { return s.TopShare }); slices.ContainsFunc(top, func(xys plotter.XYs) bool {
		return slices.ContainsFunc(xys, func(xy plotter.XY) bool { return stat.Finite(xy.Y) })
	}) {
		specs = append(specs, lineSpec{"share of the top mechanism", "proposals using it (%)", top, math.NaN(), 100})
	}
	if slices.ContainsFunc(runs, func(r TrainingRun) bool { return r.Clipped }) {
		clip := quantity(func(s TrainingStep) float64 { return s.ClipFrac })
		for i, r := range runs {
			if !r.Clipped {
				clip[i] = nil
			}
		}
		specs = append(specs, lineSpec{"share of clipped tokens", "tokens (%)", clip, 0, 100})
	}
	return lineFigure(w, title, "training step", labels, specs)
}

// Monitor is one calibration point's reliability monitors (METHOD.md §1
// On-policy calibration): the bias Δ_M = J̄ − Ĵ_M (real minus predicted
// expected reward), the advantage cosine, the within-state pairwise
// accuracy, and the predicted-minus-real reward gap. NaN = undefined.
type Monitor struct {
	Step                         int
	Delta, Cosine, Accuracy, Gap float64
}

// MonitorRun is one setting's monitors under one seed (e.g. "static" and
// "calibrated").
type MonitorRun struct {
	Label  string
	Seed   uint64
	Points []Monitor
}

// Reliability draws the reliability monitors over steps, one line per
// label (mean over seeds, band from lowest to highest): the paper's
// comparison of a static and a calibrated world model.
func Reliability(w io.Writer, title string, runs []MonitorRun) error {
	if len(runs) == 0 {
		return ErrEmpty
	}
	var labels []string
	for _, r := range runs {
		labels = append(labels, r.Label)
	}
	quantity := func(f func(Monitor) float64) []plotter.XYs {
		out := make([]plotter.XYs, len(runs))
		for i, r := range runs {
			for _, m := range r.Points {
				out[i] = append(out[i], plotter.XY{X: float64(m.Step), Y: f(m)})
			}
		}
		return out
	}
	specs := []lineSpec{
		{"bias Δ (real minus predicted expected reward)", "Δ (reward units)", quantity(func(m Monitor) float64 { return m.Delta }), 0, 1},
		{"advantage cosine (predicted vs real)", "cosine", quantity(func(m Monitor) float64 { return m.Cosine }), 0, 1},
		{"within-state pairwise accuracy", "accuracy (chance = 0.5)", quantity(func(m Monitor) float64 { return m.Accuracy }), 0.5, 1},
		{"predicted-minus-real reward gap", "gap (reward units)", quantity(func(m Monitor) float64 { return m.Gap }), 0, 1},
	}
	return lineFigure(w, title, "calibration step", labels, specs)
}

// lineSpec is one panel of a line figure: per run the (step, value) points.
type lineSpec struct {
	title, y   string
	runs       []plotter.XYs
	ref, scale float64
}

// lineFigure draws one panel per spec; runs with equal labels are one line
// (mean over runs per step) with a band (lowest to highest run).
func lineFigure(w io.Writer, title, x string, labels []string, specs []lineSpec) error {
	var order []string
	for _, l := range labels {
		if !slices.Contains(order, l) {
			order = append(order, l)
		}
	}
	steps := stepTicks(specs)
	panels := make([]*plot.Plot, len(specs))
	for i, s := range specs {
		p := newPanel(s.title, x, s.y)
		if steps != nil {
			p.X.Tick.Marker = steps
		}
		if err := addLines(p, order, labels, s); err != nil {
			return err
		}
		panels[i] = p
	}
	legend := make([]entry, len(order))
	for i, l := range order {
		legend[i] = entry{l, colour(i)}
	}
	return figure(w, title, panels, 2, legend)
}

// stepTicks returns ticks at exactly the steps drawn when there are at
// most 8 of them (calibration points), else nil.
func stepTicks(specs []lineSpec) plot.Ticker {
	var xs []float64
	for _, s := range specs {
		for _, r := range s.runs {
			for _, xy := range r {
				if stat.Finite(xy.Y) && !slices.Contains(xs, xy.X) {
					xs = append(xs, xy.X)
				}
			}
		}
	}
	if len(xs) == 0 || len(xs) > 8 {
		return nil
	}
	slices.Sort(xs)
	ticks := make(plot.ConstantTicks, len(xs))
	for i, x := range xs {
		ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)}
	}
	return ticks
}

// addLines adds one band and line per label of order to p.
func addLines(p *plot.Plot, order, labels []string, s lineSpec) error {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for li, l := range order {
		var runs []plotter.XYs
		for i := range labels {
			if labels[i] == l {
				runs = append(runs, s.runs[i])
			}
		}
		mean, lo, hi := meanBand(runs, s.scale)
		if len(mean) == 0 {
			continue
		}
		xmin, xmax = min(xmin, mean[0].X), max(xmax, mean[len(mean)-1].X)
		c := colour(li)
		if len(runs) > 1 {
			band, err := plotter.NewPolygon(append(lo, reversed(hi)...))
			if err != nil {
				return fmt.Errorf("evalplot: %s: %w", s.title, err)
			}
			r, g, b, _ := c.RGBA()
			band.Color = color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 50}
			band.LineStyle.Width = 0
			p.Add(band)
		}
		line, pts, err := plotter.NewLinePoints(mean)
		if err != nil {
			return fmt.Errorf("evalplot: %s: %w", s.title, err)
		}
		line.Color, line.Width = c, vg.Points(1.8)
		pts.Color, pts.Shape, pts.Radius = c, draw.CircleGlyph{}, vg.Points(2.2)
		p.Add(line)
		if len(mean) <= 40 {
			p.Add(pts) // dots on sparse curves only
		}
	}
	if stat.Finite(s.ref) && xmin <= xmax {
		return hline(p, s.ref, xmin, xmax)
	}
	return nil
}

// meanBand returns, per step present in any run, the mean, lowest and
// highest finite value over the runs (times scale), in step order.
func meanBand(runs []plotter.XYs, scale float64) (mean, lo, hi plotter.XYs) {
	vals := map[float64][]float64{}
	for _, r := range runs {
		for _, xy := range r {
			if stat.Finite(xy.Y) {
				vals[xy.X] = append(vals[xy.X], scale*xy.Y)
			}
		}
	}
	var xs []float64
	for x := range vals {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	for _, x := range xs {
		v := vals[x]
		sum := 0.0
		for _, y := range v {
			sum += y
		}
		mean = append(mean, plotter.XY{X: x, Y: sum / float64(len(v))})
		lo = append(lo, plotter.XY{X: x, Y: slices.Min(v)})
		hi = append(hi, plotter.XY{X: x, Y: slices.Max(v)})
	}
	return mean, lo, hi
}

func reversed(xys plotter.XYs) plotter.XYs {
	out := slices.Clone(xys)
	slices.Reverse(out)
	return out
}
