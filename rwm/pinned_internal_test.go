package rwm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// The pinned model takes its extension path exactly for the evidences
// that hold the pinned one's records and more, in any order, and e's own
// otherwise.
func TestPinnedPath(t *testing.T) {
	ctx := context.Background()
	rs := make([]records.Record, 24)
	for i := range rs {
		tk := records.Task{ID: string(rune('a' + i%4)), Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1.2, SeedNoise: 0.004}
		p := records.Proposal{Mechanism: "m" + string(rune('0'+i%3))}
		rs[i] = records.Record{Task: tk, Proposal: p, Gain: 0.001 * float64(i%7-3), Loss: 1.2, Source: records.Real, Seeds: []uint64{uint64(i)}}
	}
	ev := func(rs ...records.Record) records.Evidence {
		e, err := records.NewEvidence(rs...)
		require.NoError(t, err)
		return e
	}
	changed := rs[0]
	changed.Gain, changed.Loss = 0.002, 1.198
	tu, err := NewTuned(DefaultEmbeddedConfig(), nil)
	require.NoError(t, err)
	w, err := tu.Pin(ctx, ev(rs[:20]...))
	require.NoError(t, err)
	pin := w.(*pinned)
	for _, tc := range []struct {
		name   string
		ev     records.Evidence
		extend bool
	}{
		{"suffix", ev(rs...), true},
		{"reordered", ev(append(append([]records.Record{}, rs[20:]...), rs[:20]...)...), true},
		{"missing one", ev(append(append([]records.Record{}, rs[1:20]...), rs[20:]...)...), false},
		{"fewer added", ev(append(append([]records.Record{}, rs[:20]...), rs[21:]...)...), true},
		{"changed one", ev(append([]records.Record{changed}, rs[1:]...)...), false},
	} {
		q := Query{Task: rs[0].Task, Proposal: records.Proposal{Mechanism: "m1"}, Evidence: tc.ev}
		_, err := w.Predict(ctx, q)
		require.NoError(t, err, tc.name)
		f, shared, err := pin.factors.do(ctx, tc.ev.Fingerprint(), func(context.Context) (*factor, error) {
			t.Fatalf("%s: not memoised", tc.name)
			return nil, nil
		})
		require.NoError(t, err)
		require.True(t, shared, tc.name)
		require.Equal(t, tc.extend, f != nil, tc.name)
	}
}
