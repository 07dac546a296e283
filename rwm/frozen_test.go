package rwm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func TestFrozenConformance(t *testing.T) {
	rwmtest.Run(t, func(t *testing.T) rwm.WorldModel {
		f, err := rwm.NewFrozen(newTuned(t, rwm.DefaultEmbeddedConfig(), nil), evidence(t, flatRecords()...))
		require.NoError(t, err)
		return f
	}, rwmtest.Options{Deterministic: true, Parallel: 6})
}

// Frozen predicts with the configuration tuned on its base, whatever
// records a query's evidence adds: on M_0 it is the Tuned model; on M_0
// plus calibration records that would re-tune it, it is the embedded model
// of M_0's configuration conditioned on all of them; pinned on M_0 without
// a task, it uses that evidence's configuration.
func TestFrozenKeepsTheBaseConfig(t *testing.T) {
	ctx := context.Background()
	base := rwm.DefaultEmbeddedConfig()
	tuned := newTuned(t, base, nil)
	m0 := evidence(t, flatRecords()...)
	f, err := rwm.NewFrozen(tuned, m0)
	require.NoError(t, err)
	cfg0, _, err := tuned.Config(ctx, m0)
	require.NoError(t, err)

	// Calibration records that break the flat pattern: m1 gains on task
	// a, the opposite of M_0's m1.
	a := task("a", "f1", records.BitsPerByte)
	var cal []records.Record
	for i := range 12 {
		cal = append(cal, real(a, prop("m1"), 4, uint64(100+i)))
	}
	m1, err := m0.AddReal(cal...)
	require.NoError(t, err)
	cfg1, _, err := tuned.Config(ctx, m1)
	require.NoError(t, err)
	require.NotEqual(t, cfg0, cfg1, "the calibration records re-tune the Tuned model")

	for _, tk := range []records.Task{a, task("new", "f9", records.BitsPerByte), rwmtest.Task(1)} {
		for _, p := range append(rwmtest.Proposals(), prop("m1"), prop("m5")) {
			q := rwm.Query{Task: tk, Proposal: p, Evidence: m0}
			require.Equal(t, predict(t, tuned, q), predict(t, f, q), "on M_0: the Tuned model")
			q.Evidence = m1
			want := predict(t, newEmbedded(t, cfg0), q)
			got := predict(t, f, q)
			require.InDelta(t, want.Gain, got.Gain, 1e-9*max(1, abs(want.Gain)), "%s on %s", p.Key(), tk.ID)
			require.InDelta(t, want.High-want.Low, got.High-got.Low, 1e-9*max(1, want.High-want.Low))
		}
	}

	// Pinned on M_1 without task a: the configuration of M_0 without a.
	var noA []records.Record
	for _, r := range m1.Records() {
		if r.Task.ID != "a" {
			noA = append(noA, r)
		}
	}
	ev := evidence(t, noA...)
	w, err := f.Pin(ctx, ev)
	require.NoError(t, err)
	var m0noA []records.Record
	for _, r := range m0.Records() {
		if r.Task.ID != "a" {
			m0noA = append(m0noA, r)
		}
	}
	cfgNoA, _, err := tuned.Config(ctx, evidence(t, m0noA...))
	require.NoError(t, err)
	q := rwm.Query{Task: a, Proposal: prop("m2"), Evidence: ev}
	want := predict(t, newEmbedded(t, cfgNoA), q)
	require.InDelta(t, want.Gain, predict(t, w, q).Gain, 1e-9*max(1, abs(want.Gain)))

	_, err = rwm.NewFrozen(nil, m0)
	require.ErrorIs(t, err, rwm.ErrConfig)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
