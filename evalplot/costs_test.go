package evalplot

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestCosts(t *testing.T) {
	var buf bytes.Buffer
	require.ErrorIs(t, Costs(&buf, "x", "money", nil), ErrEmpty)
	for _, bad := range []Cost{{Stage: "a", DeviceHours: -1}, {Stage: "a", DeviceHours: math.NaN()}, {Stage: "a", Money: math.Inf(1)}, {Stage: "a", Runs: -1}} {
		require.ErrorIs(t, Costs(&buf, "x", "money", []Cost{bad}), ErrValue, "%+v", bad)
	}
	costs := []Cost{{Stage: "reference", Runs: 6, DeviceHours: 0.5, Money: 1.25}, {Stage: "M_0", Runs: 4, DeviceHours: 2, Money: 5}}
	draw := func(cs []Cost) []byte {
		var b bytes.Buffer
		require.NoError(t, Costs(&b, "real runs paid, by stage", "money", cs))
		return b.Bytes()
	}
	a := draw(costs)
	require.True(t, bytes.HasPrefix(a, []byte("\x89PNG\r\n\x1a\n")))
	require.Equal(t, a, draw(costs), "the same values give the same bytes")
	// Unpriced stages draw the device-hours panel alone: a narrower image.
	unpriced := []Cost{{Stage: "reference", Runs: 6, DeviceHours: 0.5}, {Stage: "M_0", Runs: 4, DeviceHours: 2}}
	width := func(b []byte) int {
		c, err := png.DecodeConfig(bytes.NewReader(b))
		require.NoError(t, err)
		return c.Width
	}
	require.Less(t, width(draw(unpriced)), width(a))
}

func TestTimeUnit(t *testing.T) {
	for _, tt := range []struct {
		hours float64
		unit  string
		scale float64
	}{
		{2, "device-hours", 1}, {1, "device-hours", 1}, {0.5, "device-minutes", 60}, {1.0 / 60, "device-minutes", 60},
		{0.99 / 60, "device-seconds", 3600}, {0.00168, "device-seconds", 3600}, {0, "device-seconds", 3600},
	} {
		u, s := timeUnit(tt.hours)
		require.Equal(t, tt.unit, u, "%g h", tt.hours)
		require.Equal(t, tt.scale, s, "%g h", tt.hours)
	}
}

// dataArea returns the data area of p drawn as one tile of a figure (a
// panel less the figure's padding between tiles).
func dataArea(p *plot.Plot) draw.Canvas {
	return p.DataCanvas(draw.New(vgimg.New(panelWidth-vg.Points(30), panelHeight-vg.Points(24))))
}

// TestCostPanelsLayout: the report's four stages (the worked example's
// costs, and then runs in the thousands) get bar labels narrower than a
// bar's slot, so neighbours cannot overlap; the value axis starts at 0 and
// reaches a fifth past the tallest bar, whose value label fits under the
// top of the data area.
func TestCostPanelsLayout(t *testing.T) {
	worked := []Cost{{Stage: "reference", Runs: 6, DeviceHours: 0.00168, Money: 0.0042}, {Stage: "M_0", Runs: 4, DeviceHours: 0.00116, Money: 0.0029},
		{Stage: "calibration", Runs: 0}, {Stage: "evaluation", Runs: 1, DeviceHours: 0.000106, Money: 0.000265}}
	big := []Cost{{Stage: "reference", Runs: 3000, DeviceHours: 812.5, Money: 2031}, {Stage: "M_0", Runs: 1000, DeviceHours: 950},
		{Stage: "calibration", Runs: 1234, DeviceHours: 400}, {Stage: "evaluation", Runs: 9999, DeviceHours: 77}}
	for _, tt := range []struct {
		costs []Cost
		unit  string
		tops  []float64 // the tallest bar of each panel, in its unit
	}{
		{worked, "device-seconds", []float64{0.00168 * 3600, 0.0042}},
		{big, "device-hours", []float64{950, 2031}},
	} {
		panels, err := costPanels("money", tt.costs)
		require.NoError(t, err)
		require.Len(t, panels, len(tt.tops))
		require.Equal(t, tt.unit, panels[0].Y.Label.Text)
		for i, p := range panels {
			require.Equal(t, 0.0, p.Y.Min)
			require.InDelta(t, 1.2*tt.tops[i], p.Y.Max, 1e-9)
			require.Equal(t, [2]float64{-0.5, 3.5}, [2]float64{p.X.Min, p.X.Max})
			da := dataArea(p)
			slot := (da.Max.X - da.Min.X) / 4
			for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
				lines := strings.Split(tk.Label, "\n")
				require.Len(t, lines, 2, "%q", tk.Label)
				for _, l := range lines {
					require.Less(t, p.X.Tick.Label.Width(l), slot, "%q is wider than its bar's slot", l)
				}
			}
			// The tallest bar's top, its value label 3 pt above it, and
			// the label's height stay inside the data area.
			barTop := da.Min.Y + vg.Length(tt.tops[i]/p.Y.Max)*(da.Max.Y-da.Min.Y)
			label := textStyle(10).Height("0.1")
			require.Less(t, barTop+vg.Points(3)+label, da.Max.Y)
		}
	}
	labels := func(p *plot.Plot) []string {
		var out []string
		for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
			out = append(out, tk.Label)
		}
		return out
	}
	panels, err := costPanels("money", worked)
	require.NoError(t, err)
	require.Equal(t, []string{"reference\n6 runs", "M_0\n4 runs", "calibration\n0 runs", "evaluation\n1 run"}, labels(panels[0]))
	// Nothing paid: the axis is [0, 1], not a collapsed range.
	panels, err = costPanels("money", []Cost{{Stage: "reference"}})
	require.NoError(t, err)
	require.Len(t, panels, 1)
	require.Equal(t, [2]float64{0, 1}, [2]float64{panels[0].Y.Min, panels[0].Y.Max})
}
