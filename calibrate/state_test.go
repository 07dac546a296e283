package calibrate

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// feed pushes n noisy monotone pairs (and one NaN pair) into d and folds
// group disagreements into w.
func feed(d *OnlineDebiaser, w *Weighter, rng *rand.Rand, n int) {
	for i := 0; i < n; i++ {
		x := rng.Float64()
		d.Push(x, math.Min(1, math.Max(0, 0.8*x+0.1*rng.NormFloat64())))
		w.Observe(rng.Float64())
	}
	d.Push(math.NaN(), 0)
}

func TestStateRoundTripIsBitIdentical(t *testing.T) {
	// METHOD.md §2: a restored debiaser and weighter continue exactly as the
	// originals: same map, same refits, same weights, through a full ring
	// buffer (capacity 40 < 60 pairs) and a frozen scale.
	cfg := DefaultWMRLConfig()
	cfg.MinPairs, cfg.RefitEvery, cfg.Capacity, cfg.Warmup, cfg.HalfLife = 10, 7, 40, 3, 5
	rng := rand.New(rand.NewPCG(1, 2))
	d, w := debiaser(t, cfg), cfg.NewWeighter()
	feed(d, w, rng, 60)
	db, err := d.MarshalBinary()
	require.NoError(t, err)
	wb, err := w.MarshalBinary()
	require.NoError(t, err)
	d2, w2 := debiaser(t, cfg), cfg.NewWeighter()
	require.NoError(t, d2.UnmarshalBinary(db))
	require.NoError(t, w2.UnmarshalBinary(wb))
	require.True(t, d2.Calibrated())
	require.Equal(t, 1, d2.Rejected())
	r1, r2 := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	feed(d, w, r1, 50)
	feed(d2, w2, r2, 50)
	require.Equal(t, d.Map(), d2.Map())
	require.Equal(t, d.Fits(), d2.Fits())
	x1, y1 := d.Pairs()
	x2, y2 := d2.Pairs()
	require.Equal(t, x1, x2)
	require.Equal(t, y1, y2)
	require.Equal(t, math.Float64bits(w.Weight()), math.Float64bits(w2.Weight()))
	require.Equal(t, math.Float64bits(w.Disagreement()), math.Float64bits(w2.Disagreement()))
}

func TestStateRefusesBadInput(t *testing.T) {
	cfg := DefaultWMRLConfig()
	d, w := debiaser(t, cfg), cfg.NewWeighter()
	for _, bad := range []string{
		``, `{}`, `[1]`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":1,"refit_every":64,"bins":10,"capacity":5000}`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":200,"refit_every":64,"bins":10,"capacity":5000,"x":[0.5],"y":[]}`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":200,"refit_every":64,"bins":10,"capacity":5000,"since":-1}`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":200,"refit_every":64,"bins":10,"capacity":5000,"map":{"X":[0.5],"Y":[0.1]}}`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":200,"refit_every":64,"bins":10,"capacity":5000,"fits":1,"map":{"X":[0.5,0.4],"Y":[0.1,0.2]}}`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":200,"refit_every":64,"bins":10,"capacity":5000,"fits":1,"map":{"X":[0.1,0.4],"Y":[0.3,0.2]}}`,
		`{"format":"lm2lm/calibrate.OnlineDebiaser/v1","min_pairs":200,"refit_every":64,"bins":10,"capacity":5000,"x":[1e999],"y":[0]}`,
	} {
		require.ErrorIs(t, d.UnmarshalBinary([]byte(bad)), ErrState, bad)
	}
	require.Zero(t, d.Len(), "a refused state leaves the debiaser unchanged")
	wb, _ := w.MarshalBinary()
	for _, bad := range []string{
		``, `{"format":"x"}`,
		`{"format":"lm2lm/calibrate.Weighter/v1","alpha":0.5,"warmup":32,"max_weight":4,"target":2}`,
		`{"format":"lm2lm/calibrate.Weighter/v1","alpha":` + alpha(w) + `,"warmup":32,"max_weight":4,"target":2,"d":-1,"n":1}`,
		`{"format":"lm2lm/calibrate.Weighter/v1","alpha":` + alpha(w) + `,"warmup":32,"max_weight":4,"target":2,"c":1,"n":1,"d":1}`,
		`{"format":"lm2lm/calibrate.Weighter/v1","alpha":` + alpha(w) + `,"warmup":32,"max_weight":4,"target":2,"d":1}`,
	} {
		require.ErrorIs(t, w.UnmarshalBinary([]byte(bad)), ErrState, bad)
	}
	require.NoError(t, w.UnmarshalBinary(wb))
}

func alpha(w *Weighter) string {
	b, _ := w.MarshalBinary()
	var s struct{ Alpha float64 }
	_ = jsonUnmarshal(b, &s)
	return formatFloat(s.Alpha)
}

// FuzzStateUnmarshal: any input either restores a state that marshals back
// to an equivalent one and keeps every invariant, or fails with ErrState
// and leaves the receiver unchanged.
func FuzzStateUnmarshal(f *testing.F) {
	cfg := DefaultWMRLConfig()
	cfg.MinPairs, cfg.RefitEvery, cfg.Capacity, cfg.Warmup = 10, 7, 40, 3
	d, w := debiaser(f, cfg), cfg.NewWeighter()
	feed(d, w, rand.New(rand.NewPCG(5, 6)), 30)
	db, _ := d.MarshalBinary()
	wb, _ := w.MarshalBinary()
	f.Add(db)
	f.Add(wb)
	f.Add([]byte(`{"format":"lm2lm/calibrate.OnlineDebiaser/v1"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d2, w2 := debiaser(t, cfg), cfg.NewWeighter()
		if err := d2.UnmarshalBinary(data); err != nil {
			require.ErrorIs(t, err, ErrState)
			require.Zero(t, d2.Len())
			require.False(t, d2.Calibrated())
		} else {
			x, y := d2.Pairs()
			for i := range x {
				require.True(t, stat.Finite(x[i]) && stat.Finite(y[i]))
			}
			require.LessOrEqual(t, d2.Len(), cfg.Capacity)
			require.NoError(t, d2.Map().validate())
			_ = d2.Apply(0.5)
			d2.Push(0.5, 0.5) // must not panic
		}
		if err := w2.UnmarshalBinary(data); err != nil {
			require.ErrorIs(t, err, ErrState)
			require.Equal(t, 1.0, w2.Weight())
		} else {
			wt := w2.Weight()
			require.True(t, wt >= 1 && wt <= cfg.MaxWeight, "weight %g", wt)
		}
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// debiaser is cfg's debiaser, failing the test on an error.
func debiaser(t testing.TB, cfg WMRLConfig) *OnlineDebiaser {
	t.Helper()
	d, err := cfg.NewOnlineDebiaser()
	require.NoError(t, err)
	return d
}
