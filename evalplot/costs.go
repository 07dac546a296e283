package evalplot

import (
	"fmt"
	"io"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Cost is what one stage of a pipeline paid: its real runs and their
// device-hours and money.
type Cost struct {
	Stage       string
	Runs        int
	DeviceHours float64
	Money       float64
}

// headroom is how far a bar chart's value axis reaches past its tallest
// bar, as a fraction of it: room for the bar's value label above it.
const headroom = 0.2

// Costs draws the device time and, when any stage has a price, the money
// of every stage as bar charts, stages in the order given, as a PNG on w.
// Each bar is labelled under the axis with its stage and runs (two lines,
// so that neighbours do not overlap) and above with its value; the value
// axis starts at 0 and reaches a fifth past the tallest bar. Device time
// is drawn in hours, minutes or seconds, whichever keeps the tallest bar
// at 1 or more.
func Costs(w io.Writer, title, currency string, costs []Cost) error {
	panels, err := costPanels(currency, costs)
	if err != nil {
		return err
	}
	return figure(w, title, panels, 2, nil)
}

// costPanels returns Costs' panels: device time, and money when priced.
func costPanels(currency string, costs []Cost) ([]*plot.Plot, error) {
	if len(costs) == 0 {
		return nil, ErrEmpty
	}
	names := make([]string, len(costs))
	hours, money := make(plotter.Values, len(costs)), make(plotter.Values, len(costs))
	priced, top := false, 0.0
	for i, c := range costs {
		if !stat.Finite(c.DeviceHours) || c.DeviceHours < 0 || !stat.Finite(c.Money) || c.Money < 0 || c.Runs < 0 {
			return nil, fmt.Errorf("%w: stage %q: runs %d, device-hours %g, money %g", ErrValue, c.Stage, c.Runs, c.DeviceHours, c.Money)
		}
		names[i] = stageLabel(c)
		hours[i], money[i] = c.DeviceHours, c.Money
		priced, top = priced || c.Money > 0, max(top, c.DeviceHours)
	}
	unit, scale := timeUnit(top)
	for i := range hours {
		hours[i] *= scale
	}
	p, err := bars("device time by stage", unit, names, hours, 0)
	if err != nil {
		return nil, err
	}
	panels := []*plot.Plot{p}
	if priced {
		if p, err = bars("money by stage", currency, names, money, 1); err != nil {
			return nil, err
		}
		panels = append(panels, p)
	}
	return panels, nil
}

// stageLabel names a stage's bar: the stage, then its runs on a line of
// their own.
func stageLabel(c Cost) string {
	if c.Runs == 1 {
		return c.Stage + "\n1 run"
	}
	return fmt.Sprintf("%s\n%d runs", c.Stage, c.Runs)
}

// timeUnit returns the unit device time is drawn in, given the largest
// value in hours, and the factor from hours to it: device-hours from 1 h
// up, else device-minutes from 1 minute up, else device-seconds.
func timeUnit(hours float64) (string, float64) {
	switch {
	case hours >= 1:
		return "device-hours", 1
	case hours*60 >= 1:
		return "device-minutes", 60
	}
	return "device-seconds", 3600
}

// bars returns a bar chart panel of v (≥ 0) over names, each bar
// labelled with its value, the value axis on [0, (1+headroom)·max] (on
// [0, 1] when every value is 0).
func bars(title, unit string, names []string, v plotter.Values, ci int) (*plot.Plot, error) {
	p := newPanel(title, "", unit)
	b, err := plotter.NewBarChart(v, vg.Points(28))
	if err != nil {
		return nil, fmt.Errorf("evalplot: %s: %w", title, err)
	}
	b.Color, b.LineStyle.Width = colour(ci), 0
	labels := plotter.XYLabels{XYs: make(plotter.XYs, len(v)), Labels: make([]string, len(v))}
	top := 0.0
	for i, x := range v {
		labels.XYs[i] = plotter.XY{X: float64(i), Y: x}
		labels.Labels[i] = strconv.FormatFloat(x, 'g', 3, 64)
		top = max(top, x)
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, fmt.Errorf("evalplot: %s: %w", title, err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = vg.Points(10)
		l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = draw.XCenter, draw.YBottom
	}
	l.Offset = vg.Point{Y: vg.Points(3)}
	p.Add(b, l)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(v))-0.5
	p.Y.Min, p.Y.Max = 0, (1+headroom)*top
	if top == 0 {
		p.Y.Max = 1
	}
	return p, nil
}
