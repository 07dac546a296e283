package evalplot

import (
	"errors"
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ErrValue reports a value a chart cannot draw (negative or not finite).
var ErrValue = errors.New("evalplot: bad value")

// ErrEmpty reports a chart with nothing to draw.
var ErrEmpty = errors.New("evalplot: nothing to draw")

// ErrNoRegion says a per-region chart was given a summary or a pair of no
// region (evalstat.Summary.Region or evalstat.Paired.Region unset).
var ErrNoRegion = errors.New("evalplot: no region")

// Sigma is σ with a subscript e, the unit of seed-normalised gains
// (METHOD.md §1 Headline results), as the charts write it.
const Sigma = "σₑ"

// DPI is the resolution of every PNG (library choice: sharp on a screen,
// small on disk).
const DPI = 96

// panelWidth and panelHeight are the size of one panel of a figure.
const (
	panelWidth  = 5.2 * vg.Inch
	panelHeight = 3.4 * vg.Inch
)

// entry is one item of a figure's shared legend.
type entry struct {
	label  string
	colour color.Color
}

// figure lays panels out in rows of cols under a title and a shared legend
// and writes the PNG to w. Nil panels leave their tile blank.
func figure(w io.Writer, title string, panels []*plot.Plot, cols int, legend []entry) error {
	if len(panels) == 0 {
		return ErrEmpty
	}
	cols = min(cols, len(panels))
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range grid[i] {
			if k := i*cols + j; k < len(panels) {
				grid[i][j] = panels[k]
			}
		}
	}
	ts := textStyle(15)
	width := max(vg.Length(cols)*panelWidth, ts.Width(title)+vg.Inch)
	legendRows := layoutLegend(legend, width)
	head := 0.45*vg.Inch + vg.Length(len(legendRows))*legendRowHeight + vg.Points(6)
	img := vgimg.NewWith(vgimg.UseWH(width, vg.Length(rows)*panelHeight+head), vgimg.UseDPI(DPI))
	dc := draw.New(img)
	ts.XAlign = draw.XCenter
	dc.FillText(ts, vg.Point{X: dc.Center().X, Y: dc.Max.Y - vg.Points(6)}, title)
	drawLegend(dc, legendRows, dc.Max.Y-0.45*vg.Inch)
	body := dc
	body.Max.Y -= head
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(18), PadY: vg.Points(18),
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadBottom: vg.Points(6)}
	canvases := plot.Align(grid, tiles, body)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("evalplot: write %q: %w", title, err)
	}
	return nil
}

// textStyle is black text of the default font at size points, top-left
// aligned.
func textStyle(size float64) text.Style {
	ts := text.Style{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XLeft, YAlign: draw.YTop,
		Handler: plot.DefaultTextHandler}
	ts.Font.Size = vg.Points(size)
	return ts
}

const (
	legendRowHeight = vg.Length(18)
	legendSwatch    = vg.Length(22)
	legendGap       = vg.Length(16)
)

// layoutLegend breaks entries into rows that fit width.
func layoutLegend(legend []entry, width vg.Length) [][]entry {
	ts := textStyle(11)
	var rows [][]entry
	var used vg.Length
	for _, e := range legend {
		w := legendSwatch + 4 + ts.Width(e.label) + legendGap
		if len(rows) == 0 || used+w > width-vg.Inch {
			rows = append(rows, nil)
			used = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], e)
		used += w
	}
	return rows
}

// drawLegend draws the legend rows centred, the first row's top at top.
func drawLegend(dc draw.Canvas, rows [][]entry, top vg.Length) {
	ts := textStyle(11)
	ts.YAlign = draw.YCenter
	for r, row := range rows {
		var total vg.Length
		for _, e := range row {
			total += legendSwatch + 4 + ts.Width(e.label) + legendGap
		}
		x := dc.Center().X - (total-legendGap)/2
		y := top - vg.Length(r)*legendRowHeight - legendRowHeight/2
		for _, e := range row {
			sty := draw.LineStyle{Color: e.colour, Width: vg.Points(3)}
			dc.StrokeLine2(sty, x, y, x+legendSwatch, y)
			dc.FillText(ts, vg.Point{X: x + legendSwatch + 4, Y: y}, e.label)
			x += legendSwatch + 4 + ts.Width(e.label) + legendGap
		}
	}
}

// newPanel returns a plot with a title, axis labels, a grid and readable
// fonts.
func newPanel(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text, p.Y.Label.Text = x, y
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(11)
		a.Tick.Label.Font.Size = vg.Points(10)
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.Add(plotter.NewGrid())
	return p
}

// hline adds a dashed grey horizontal line at y across [x0, x1]; vline a
// vertical one at x across [y0, y1].
func hline(p *plot.Plot, y, x0, x1 float64) error {
	return refLine(p, plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
}

func vline(p *plot.Plot, x, y0, y1 float64) error {
	return refLine(p, plotter.XYs{{X: x, Y: y0}, {X: x, Y: y1}})
}

func refLine(p *plot.Plot, xys plotter.XYs) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("evalplot: %w", err)
	}
	l.Color = color.Gray{Y: 110}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(l)
	return nil
}

// colour returns the i-th colour of the palette.
func colour(i int) color.Color { return plotutil.Color(i) }
