package landscape_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/records"
)

func prop1(mech, k, v string) records.Proposal {
	return records.Proposal{Mechanism: mech, Params: map[string]string{k: v}}
}

func roundMap(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = math.Round(v*1e9) / 1e9
	}
	return out
}

// A landscape store by hand: a proposal's gain is its mean over seeds in
// σ_e units, an infeasible run counts InfeasibleGain, a mechanism takes its
// best proposal; a reference run and a no-change run count nothing.
func TestRead(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "land.records")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	task := records.Task{ID: "t1", Family: "f", Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.1}
	add := func(task records.Task, p records.Proposal, src records.Source, seed uint64, gain float64, infeasible string) {
		r := records.Record{Task: task, Proposal: p, Source: src, Loss: 3 - gain, Gain: gain, Seeds: []uint64{seed},
			Infeasible: infeasible, Time: time.Unix(1, 0).UTC()}
		if infeasible != "" {
			r.Loss, r.Gain = 0, 0
		}
		require.NoError(t, s.Append(ctx, r))
	}
	add(task, records.Proposal{Mechanism: records.NoChange}, records.Reference, 1, 0, "")
	add(task, prop1("lr", "k", "2"), records.Real, 1, 0.2, "")
	add(task, prop1("lr", "k", "2"), records.Real, 2, 0.4, "")
	add(task, prop1("lr", "k", "0.5"), records.Real, 1, -0.1, "")
	add(task, prop1("Width", "m", "2"), records.Real, 1, 0, "diverged")
	add(task, records.Proposal{Mechanism: records.NoChange}, records.Real, 1, 0.5, "")
	require.NoError(t, s.Close())
	land, err := landscape.Read(ctx, path)
	require.NoError(t, err)
	require.Len(t, land.Gains, 1)
	require.Len(t, land.Tasks, 1)
	// lr: k=2 (0.2 + 0.4)/2/0.1 = 3 beats k=0.5's −1; width infeasible.
	require.Equal(t, map[string]float64{"lr": 3, "width": landscape.InfeasibleGain}, roundMap(land.Gains["t1"]))
	require.Equal(t, -6.0, landscape.InfeasibleGain)
	// Seed by seed: seed 1 ran every proposal (lr's best 0.2/0.1 = 2 of 2
	// and −1, width infeasible); seed 2 ran lr k=2 alone (0.4/0.1 = 4).
	require.Equal(t, map[string]float64{"lr": 2, "width": landscape.InfeasibleGain}, roundMap(land.BySeed[0]["t1"]))
	require.Equal(t, map[string]float64{"lr": 4}, roundMap(land.BySeed[1]["t1"]))
	require.Equal(t, "f", land.Tasks["t1"].Family)

	_, err = landscape.Read(ctx, filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

// A task run with one seed has no seed-by-seed landscape; a task without
// σ_e (which no store holds) counts nothing; a store of reference runs
// alone is empty.
func TestReadOneSeedAndEmpty(t *testing.T) {
	task := records.Task{ID: "t1", Family: "f", Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.5}
	l := landscape.FromRecords([]records.Record{
		{Task: task, Proposal: prop1("lr", "k", "2"), Source: records.Real, Gain: 1, Seeds: []uint64{7}},
		{Task: task, Proposal: prop1("lr", "k", "2"), Source: records.Real, Gain: 2, Seeds: []uint64{7}},
		{Task: records.Task{ID: "t2"}, Proposal: prop1("lr", "k", "2"), Source: records.Real, Infeasible: "diverged"},
	})
	require.Len(t, l.Tasks, 1)
	require.Equal(t, map[string]float64{"lr": 3}, roundMap(l.Gains["t1"]))
	require.Empty(t, l.BySeed[0])
	require.Empty(t, l.BySeed[1])

	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "refs.records")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	require.NoError(t, s.Append(ctx, records.Record{Task: task, Proposal: records.Proposal{Mechanism: records.NoChange}, Source: records.Reference,
		Loss: 3, Seeds: []uint64{1}, Time: time.Unix(1, 0).UTC()}))
	require.NoError(t, s.Close())
	_, err = landscape.Read(ctx, path)
	require.ErrorIs(t, err, landscape.ErrEmpty)
}
