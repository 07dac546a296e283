package evalplot

import (
	"bytes"
	"image/png"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
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
