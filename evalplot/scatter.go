package evalplot

import (
	"fmt"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// CalibrationPoint is what one calibration point executed: for each run,
// the value the world model predicted before the run and the value
// measured (METHOD.md §1 On-policy calibration), in the unit given to
// Calibration.
type CalibrationPoint struct {
	Label           string // the setting, e.g. the method
	Seed            uint64
	Step            int
	Predicted, Real []float64 // paired; equal length
}

// Calibration draws predicted against real values at each calibration
// step, one panel per step (ascending), one colour per label, with the
// line real = predicted: points below it were over-predicted. unit names
// the axes' unit (e.g. "reward units" or Sigma+" units"). Points whose
// Predicted and Real lengths differ are an error.
func Calibration(w io.Writer, title, unit string, pts []CalibrationPoint) error {
	var steps, labels []string
	byStep := map[string][]CalibrationPoint{}
	for _, c := range pts {
		if len(c.Predicted) != len(c.Real) {
			return fmt.Errorf("evalplot: calibration %s seed %d step %d: %d predicted vs %d real values",
				c.Label, c.Seed, c.Step, len(c.Predicted), len(c.Real))
		}
		s := fmt.Sprintf("%09d", c.Step)
		if _, ok := byStep[s]; !ok {
			steps = append(steps, s)
		}
		byStep[s] = append(byStep[s], c)
		if !slices.Contains(labels, c.Label) {
			labels = append(labels, c.Label)
		}
	}
	if len(steps) == 0 {
		return ErrEmpty
	}
	slices.Sort(steps)
	panels := make([]*plot.Plot, len(steps))
	for i, s := range steps {
		cs := byStep[s]
		p, err := scatterPanel(fmt.Sprintf("calibration at step %d", cs[0].Step), unit, labels, cs)
		if err != nil {
			return err
		}
		panels[i] = p
	}
	legend := make([]entry, len(labels))
	for i, l := range labels {
		legend[i] = entry{l, colour(i)}
	}
	return figure(w, title, panels, min(3, len(panels)), legend)
}

// scatterPanel draws one step's points, coloured by label, and the
// diagonal.
func scatterPanel(title, unit string, labels []string, cs []CalibrationPoint) (*plot.Plot, error) {
	p := newPanel(title, "predicted ("+unit+")", "real ("+unit+")")
	lo, hi := math.Inf(1), math.Inf(-1)
	for li, l := range labels {
		var xys plotter.XYs
		for _, c := range cs {
			if c.Label != l {
				continue
			}
			for k := range c.Predicted {
				x, y := c.Predicted[k], c.Real[k]
				if stat.Finite(x) && stat.Finite(y) {
					xys = append(xys, plotter.XY{X: x, Y: y})
					lo, hi = min(lo, x, y), max(hi, x, y)
				}
			}
		}
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, fmt.Errorf("evalplot: %s: %w", title, err)
		}
		sc.Color, sc.Shape, sc.Radius = colour(li), draw.CircleGlyph{}, vg.Points(3)
		p.Add(sc)
	}
	if lo > hi {
		return p, nil
	}
	pad := max(0.05*(hi-lo), 0.5)
	lo, hi = lo-pad, hi+pad
	if err := refLine(p, plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}}); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
	return p, nil
}
