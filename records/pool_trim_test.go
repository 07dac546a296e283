package records_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// TestTrimSynthetic keeps the newest synthetic records of each task and
// every real one, in pool order.
func TestTrimSynthetic(t *testing.T) {
	a := records.Task{ID: "a", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.1}
	b := records.Task{ID: "b", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.1}
	rec := func(task records.Task, src records.Source, gain float64) records.Record {
		return records.Record{Task: task, Proposal: records.Proposal{Mechanism: "m", Params: map[string]string{"x": "1"}}, Gain: gain, Source: src}
	}
	p, err := records.NewPool(
		rec(a, records.Synthetic, 1), rec(a, records.Real, 2), rec(b, records.Synthetic, 3), rec(a, records.Synthetic, 4),
		rec(a, records.Synthetic, 5), rec(b, records.Synthetic, 6),
	)
	require.NoError(t, err)
	require.Equal(t, 0, p.TrimSynthetic(-1))
	require.Equal(t, 0, p.TrimSynthetic(3))
	require.Equal(t, 3, p.TrimSynthetic(1)) // a's gains 1 and 4 go, and b's 3
	var got []float64
	for _, r := range p.Records("a") {
		got = append(got, r.Gain)
	}
	require.Equal(t, []float64{2, 5}, got)
	require.Equal(t, 1, p.Count("b"))
	require.Equal(t, 6.0, p.Records("b")[0].Gain)
	require.Equal(t, 3, p.Len())
	// Shared reads the same records, and a later add or trim leaves what
	// it returned as it was.
	shared := p.Shared("a")
	require.Equal(t, p.Records("a"), shared)
	require.NoError(t, p.Add(rec(a, records.Synthetic, 7)))
	require.Equal(t, 1, p.TrimSynthetic(1)) // a's gain 5 goes
	require.Equal(t, []float64{2, 5}, []float64{shared[0].Gain, shared[1].Gain})
	require.Equal(t, map[string]string{"x": "1"}, shared[1].Proposal.Params)
	require.Equal(t, p.Records("a"), p.Shared("a"))
	require.Equal(t, 3, p.Len())
	require.Equal(t, 2, p.TrimSynthetic(0))
	require.Equal(t, 1, p.Len())
	require.Equal(t, records.Real, p.Records("a")[0].Source)
}
