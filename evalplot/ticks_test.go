package evalplot

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		labels []string
	}{
		{-7.6, 7.6, []string{"-5", "0", "5"}},       // raw step 3.04 → 5
		{0.38, 0.66, []string{"0.4", "0.5", "0.6"}}, // raw 0.056 → 0.1
		{1, 96, []string{"20", "40", "60", "80"}},   // raw 19 → 20
		{-0.43, 0.68, []string{"0.0", "0.5"}},       // raw 0.222 → 0.5 (0.2 is below it)
	}
	for _, tt := range tests {
		var got []string
		for _, tk := range (niceTicks{}).Ticks(tt.lo, tt.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
				require.True(t, tk.Value >= tt.lo && tk.Value <= tt.hi)
			}
		}
		require.Equal(t, tt.labels, got, "%g..%g", tt.lo, tt.hi)
	}
	require.Equal(t, 0.5, niceStep(0.222))
	require.Equal(t, 2.0, niceStep(2))
	require.Equal(t, 10.0, niceStep(5.01))
}
