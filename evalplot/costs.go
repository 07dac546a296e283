package evalplot

import (
	"fmt"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

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

// Costs draws the device-hours and, when any stage has a price, the money
// of every stage as bar charts, stages in the order given, as a PNG on w.
// A stage's bar is labelled with its runs.
func Costs(w io.Writer, title, currency string, costs []Cost) error {
	if len(costs) == 0 {
		return ErrEmpty
	}
	hours, money := make(plotter.Values, len(costs)), make(plotter.Values, len(costs))
	names := make([]string, len(costs))
	priced := false
	for i, c := range costs {
		if !stat.Finite(c.DeviceHours) || c.DeviceHours < 0 || !stat.Finite(c.Money) || c.Money < 0 || c.Runs < 0 {
			return fmt.Errorf("%w: stage %q: runs %d, device-hours %g, money %g", ErrValue, c.Stage, c.Runs, c.DeviceHours, c.Money)
		}
		hours[i], money[i] = c.DeviceHours, c.Money
		names[i] = fmt.Sprintf("%s (%d runs)", c.Stage, c.Runs)
		priced = priced || c.Money > 0
	}
	bars := func(t, y string, v plotter.Values, ci int) (*plot.Plot, error) {
		p := newPanel(t, "", y)
		b, err := plotter.NewBarChart(v, vg.Points(28))
		if err != nil {
			return nil, fmt.Errorf("evalplot: %s: %w", t, err)
		}
		b.Color, b.LineStyle.Width = colour(ci), 0
		p.Add(b)
		p.NominalX(names...)
		p.Y.Min = 0
		return p, nil
	}
	panels := []*plot.Plot{}
	p, err := bars("device-hours by stage", "device-hours", hours, 0)
	if err != nil {
		return err
	}
	panels = append(panels, p)
	if priced {
		if p, err = bars("money by stage", currency, money, 1); err != nil {
			return err
		}
		panels = append(panels, p)
	}
	return figure(w, title, panels, 2, nil)
}
