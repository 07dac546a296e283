package evalplot

import (
	"fmt"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/stat"
)

// row is one method's value on a forest panel.
type row struct {
	label string
	iv    evalstat.Interval
}

// forest draws one panel: a row per method (the first on top), the point
// estimate as a dot and the interval as a horizontal bar, and a dashed
// reference line at ref (NaN = none). scale multiplies every value (100
// for percentages).
func forest(title, xlabel string, rows []row, ref, scale float64) (*plot.Plot, error) {
	p := newPanel(title, xlabel, "")
	n := len(rows)
	names := make([]string, n)
	var pts plotter.XYs
	var errs plotter.XErrors
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, r := range rows {
		y := float64(n - 1 - i)
		names[n-1-i] = r.label
		if !stat.Finite(r.iv.Point) {
			continue
		}
		pt, l, h := scale*r.iv.Point, scale*r.iv.Low, scale*r.iv.High
		pts = append(pts, plotter.XY{X: pt, Y: y})
		errs = append(errs, struct{ Low, High float64 }{pt - l, h - pt})
		lo, hi = min(lo, l), max(hi, h)
	}
	p.NominalY(names...)
	p.Y.Tick.Label.Font.Size = vg.Points(11)
	if len(pts) == 0 {
		return p, nil
	}
	if stat.Finite(ref) {
		if err := vline(p, ref, -0.5, float64(n)-0.5); err != nil {
			return nil, err
		}
		lo, hi = min(lo, ref), max(hi, ref)
	}
	bars, err := plotter.NewXErrorBars(struct {
		plotter.XYs
		plotter.XErrors
	}{pts, errs})
	if err != nil {
		return nil, fmt.Errorf("evalplot: %s: %w", title, err)
	}
	bars.LineStyle.Width = vg.Points(1.6)
	bars.CapWidth = vg.Points(7)
	dots, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, fmt.Errorf("evalplot: %s: %w", title, err)
	}
	dots.GlyphStyle.Shape = draw.CircleGlyph{}
	dots.GlyphStyle.Radius = vg.Points(3.5)
	p.Add(bars, dots)
	pad := gainPad * (hi - lo)
	if pad == 0 {
		pad = 0.5
	}
	p.X.Min, p.X.Max = lo-pad, hi+pad
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	return p, nil
}

// gainPad is the margin of a gain panel on either side of its values, as
// a fraction of their span: a dot at the edge keeps its whole glyph.
const gainPad = 0.08

// rateAxis is the x range of a rate panel, in per cent: always the whole
// 0–100 %, so that rates of different charts read alike and no axis shows
// a negative share.
var rateAxis = [2]float64{0, 100}

// Methods draws every method's Avg@K, Best@K, negative rate and share above
// the threshold with their confidence intervals, and one more panel per
// method compared against in pairs (the paired difference of Avg@K), as a
// PNG on w. Methods are drawn in the order of sums, the first on top; K
// names the metric (4 for Avg@4). The rate panels span 0–100 %; the gain
// panels span the intervals and 0.
func Methods(w io.Writer, title string, k int, sums []evalstat.Summary, pairs []evalstat.Paired) error {
	panels, err := methodPanels(k, sums, pairs)
	if err != nil {
		return err
	}
	return figure(w, title, panels, 2, nil)
}

// methodPanels returns Methods' panels.
func methodPanels(k int, sums []evalstat.Summary, pairs []evalstat.Paired) ([]*plot.Plot, error) {
	if len(sums) == 0 {
		return nil, ErrEmpty
	}
	thr := sums[0].Threshold
	get := func(f func(evalstat.Summary) evalstat.Interval) []row {
		rs := make([]row, len(sums))
		for i, s := range sums {
			rs[i] = row{s.Method, f(s)}
		}
		return rs
	}
	type spec struct {
		title, x   string
		rows       []row
		ref, scale float64
	}
	specs := []spec{
		{fmt.Sprintf("Avg@%d", k), "mean gain per state (" + Sigma + " units)", get(func(s evalstat.Summary) evalstat.Interval { return s.AvgK }), 0, 1},
		{fmt.Sprintf("Best@%d", k), "best gain per state (" + Sigma + " units)", get(func(s evalstat.Summary) evalstat.Interval { return s.BestK }), 0, 1},
		{"negative-gain rate", "proposals with gain ≤ 0 (%)", get(func(s evalstat.Summary) evalstat.Interval { return s.NegativeRate }), math.NaN(), 100},
		{fmt.Sprintf("clear wins (gain > %g%s)", thr, Sigma), fmt.Sprintf("proposals above %g%s (%%)", thr, Sigma), get(func(s evalstat.Summary) evalstat.Interval { return s.Above }), math.NaN(), 100},
	}
	for _, against := range againstOrder(pairs) {
		rs := make([]row, len(sums))
		for i, s := range sums {
			rs[i] = row{s.Method, evalstat.Interval{Point: math.NaN()}}
			for _, p := range pairs {
				if p.Method == s.Method && p.Against == against {
					rs[i].iv = p.Diff
				}
			}
		}
		specs = append(specs, spec{fmt.Sprintf("paired difference vs %s", against),
			fmt.Sprintf("Avg@%d minus %s, same states (%s units)", k, against, Sigma), rs, 0, 1})
	}
	panels := make([]*plot.Plot, len(specs))
	for i, s := range specs {
		p, err := forest(s.title, s.x, s.rows, s.ref, s.scale)
		if err != nil {
			return nil, err
		}
		if s.scale == 100 {
			p.X.Min, p.X.Max = rateAxis[0], rateAxis[1]
		}
		panels[i] = p
	}
	return panels, nil
}

// againstOrder lists the distinct Against names in order of first
// appearance.
func againstOrder(pairs []evalstat.Paired) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range pairs {
		if !seen[p.Against] {
			seen[p.Against] = true
			out = append(out, p.Against)
		}
	}
	return out
}
