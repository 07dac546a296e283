package probe

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// measureLocality on the embedded world model: every pair is in one class (the
// calibrated pair alone in its own), nothing moves when the calibration
// adds nothing, and a surprising calibration record moves its own pair and
// closes its gap.
func TestLocality(t *testing.T) {
	ctx := context.Background()
	var train []records.Task
	for i := range 4 {
		train = append(train, rwmtest.Task(i))
	}
	w, err := rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	require.NoError(t, err)
	m0 := rwmtest.Evidence(24)
	// A calibration record far above what M_0 says of lr-scale ×2 on
	// task 0: +3 σ_e better than b_e.
	t0 := train[0]
	p := rwmtest.Proposals()[0]
	rec := records.Record{Task: t0, Proposal: p, Source: records.Real, Loss: t0.RefLoss - 3*t0.SeedNoise, Gain: 3 * t0.SeedNoise,
		Seeds: []uint64{99}, Time: time.Unix(1, 0).UTC()}
	m1, err := m0.AddReal(rec)
	require.NoError(t, err)
	mon := NewMonitor(Config{World: w, Evidence: m1, Train: train, Seed: 1})
	c := &lm2lm.CalibrationReport{Records: []records.Record{rec}}
	loc, err := mon.measureLocality(ctx, 16, m0, c)
	require.NoError(t, err)
	require.Equal(t, 16, loc.Step)
	require.Len(t, loc.Classes, 4)
	require.Equal(t, "calibrated", loc.Classes[0].Class)
	require.Equal(t, 1, loc.Classes[0].Pairs)
	total := 0
	for _, cl := range loc.Classes {
		total += cl.Pairs
	}
	// 4 tasks × the distinct proposals (the calibrated one and up to 8
	// drawn ones), every prediction valid.
	require.Zero(t, total%4)
	require.GreaterOrEqual(t, total/4, 2)
	require.LessOrEqual(t, total/4, 9)
	require.Positive(t, *loc.Classes[0].MeanAbsShift)
	require.Less(t, abs(*loc.GapAfter), abs(*loc.GapBefore), "conditioning on the record closes its gap")

	// No new record: nothing moves.
	mon.evidence = m0
	loc, err = mon.measureLocality(ctx, 16, m0, c)
	require.NoError(t, err)
	for _, cl := range loc.Classes {
		if cl.MeanAbsShift != nil {
			require.Zero(t, *cl.MeanAbsShift, cl.Class)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
