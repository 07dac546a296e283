package records

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatNumber(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{
		{0.001, "0.001"}, {1e-3, "0.001"}, {2, "2"}, {math.Copysign(0, -1), "0"},
		{1e21, "1e+21"}, {math.Nextafter(0.3, 1), "0.30000000000000004"}, {-3.5, "-3.5"},
	} {
		require.Equal(t, c.want, FormatNumber(c.x), "%v", c.x)
	}
	for _, v := range []string{"0.0010", "1e-3", "+.001", " 0.001 "} {
		require.Equal(t, "0.001", CanonicalValue(v), v)
	}
	require.Equal(t, "adam w", CanonicalValue("  ADAM   w "))
	require.Equal(t, "lr scale", CanonicalName("  LR \t Scale "))
}

func TestCostAdd(t *testing.T) {
	a := Cost{DeviceSeconds: 1, WallSeconds: 2, FLOPs: 3e9, Money: 0.25}
	b := Cost{DeviceSeconds: 0.5, WallSeconds: 4, FLOPs: 1e9, Money: 0.5}
	require.Equal(t, Cost{DeviceSeconds: 1.5, WallSeconds: 6, FLOPs: 4e9, Money: 0.75}, a.Add(b))
	require.Equal(t, a, a.Add(Cost{}))
}
