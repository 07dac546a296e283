package serve

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWithoutTimings: the state digest reads a checkpoint without its
// timings (a record's time and cost, at any depth), which two runs of the
// same requests on a real executor do not share; everything else counts.
func TestWithoutTimings(t *testing.T) {
	doc := func(time string, wall, gain float64) []byte {
		b, err := json.Marshal(map[string]any{"step": 3, "evidence": []any{
			map[string]any{"gain": gain, "time": time, "cost": map[string]any{"wall_seconds": wall, "device_seconds": wall}},
		}, "pool": map[string]any{"task-1": []any{map[string]any{"time": time, "gain": 1}}}})
		require.NoError(t, err)
		return b
	}
	canon := func(b []byte) string {
		var v any
		require.NoError(t, json.Unmarshal(b, &v))
		out, err := json.Marshal(withoutTimings(v))
		require.NoError(t, err)
		return string(out)
	}
	a := canon(doc("2026-12-07T03:00:00Z", 41.5, 0.25))
	require.Equal(t, a, canon(doc("2026-12-08T09:13:00Z", 57.25, 0.25)), "timings differ only")
	require.NotEqual(t, a, canon(doc("2026-12-07T03:00:00Z", 41.5, 0.5)), "a gain differs")
	require.JSONEq(t, `{"step":3,"evidence":[{"gain":0.25}],"pool":{"task-1":[{"gain":1}]}}`, a)
}
