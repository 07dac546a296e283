package records

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// Descriptors are validated (names, finite values) and part of the JSON
// vocabulary of a task.
func TestTaskDescriptors(t *testing.T) {
	base := Task{ID: "t", Family: "f", Split: Train, Metric: BitsPerByte, RefLoss: 3, SeedNoise: 0.01}
	for _, tc := range []struct {
		d    map[string]float64
		want string
	}{
		{nil, ""},
		{map[string]float64{"log10_lr": -2.7, "width": 128}, ""},
		{map[string]float64{"width": math.NaN()}, "descriptor width = NaN is not finite"},
		{map[string]float64{"b": math.Inf(1), "a": math.Inf(-1)}, "descriptor a = -Inf is not finite"},
		{map[string]float64{"": 1}, `descriptor name ""`},
		{map[string]float64{"Width": 1}, `descriptor name "Width"`},
		{map[string]float64{"a-b": 1}, `descriptor name "a-b"`},
	} {
		task := base
		task.Descriptors = tc.d
		err := task.Validate()
		if tc.want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, tc.want)
	}
	task := base
	task.Descriptors = map[string]float64{"log10_lr": -2.5, "depth": 2}
	js, err := json.Marshal(task)
	require.NoError(t, err)
	require.Contains(t, string(js), `"descriptors":{"depth":2,"log10_lr":-2.5}`)
	var back Task
	require.NoError(t, json.Unmarshal(js, &back))
	require.Equal(t, task, back)
	js, err = json.Marshal(base)
	require.NoError(t, err)
	require.NotContains(t, string(js), "descriptors")
}
