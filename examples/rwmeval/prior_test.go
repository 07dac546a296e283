package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// committedPrior reads the lab's committed prior (examples/priorcorpus).
func committedPrior(t *testing.T) *rwm.Prior {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "lab", "prior", "v2.prior"))
	require.NoError(t, err)
	p, err := rwm.ReadPrior(b)
	require.NoError(t, err)
	return p
}

// The prior's models need -prior; the prior loads over a lab of another
// corpus size (the lab's effects do not depend on its task list), and
// not into a world model without the lab's effects.
func TestPriorModelsNeedTheirPrior(t *testing.T) {
	for _, k := range priorKeys {
		_, err := landscapeModels([]string{k}, nil, 8)
		require.ErrorContains(t, err, k+" needs -prior")
	}
	p := committedPrior(t)
	_, err := landscapeModels([]string{"fx-prior"}, p, 7)
	require.NoError(t, err)
	_, err = p.Config(rwm.DefaultEmbeddedConfig())
	require.ErrorIs(t, err, rwm.ErrPriorMismatch)
	ms, err := landscapeModels(append([]string{"fx-tuned"}, priorKeys...), p, 8)
	require.NoError(t, err)
	require.Len(t, ms, 5)
}

// prior-mean predicts the prior's mean gain (σ_e units × the task's σ_e)
// whatever the context holds; fx-prior on no records predicts the same.
func TestPriorMeanModel(t *testing.T) {
	p := committedPrior(t)
	ms, err := landscapeModels([]string{"fx-prior", "prior-mean"}, p, 8)
	require.NoError(t, err)
	su := lab.SuiteV2(lab.DefaultSuiteSeed)
	cfg := lab.DefaultConfig()
	cfg.Tasks = append(su.All(), lab.PretrainTasks(8)...)
	lb, err := lab.New(cfg, records.NewMemStore())
	require.NoError(t, err)
	wc := setting.Validated().WorldConfig(lb)
	spec := su.Validation[0]
	task := records.Task{ID: spec.ID, Family: spec.Family, Metric: spec.Metric(), Split: records.HeldOut, RefLoss: 3, SeedNoise: 0.02,
		Descriptors: map[string]float64{"log_steps": 6, "epochs": 2}}
	var prop records.Proposal
	for _, c := range lab.Catalogue() {
		for _, q := range cards.Proposals(c) {
			if prop.Mechanism == "" && lab.Changes(spec, q) {
				prop = q
			}
		}
	}
	require.NotEmpty(t, prop.Mechanism)
	other := records.Record{Task: records.Task{ID: su.Train[0].ID, Family: su.Train[0].Family, Metric: su.Train[0].Metric(), Split: records.Train, RefLoss: 3, SeedNoise: 0.02},
		Proposal: prop, Source: records.Real, Loss: 2.9, Gain: 0.1, Seeds: []uint64{1}}
	ev, err := records.NewEvidence(other)
	require.NoError(t, err)
	ctx := context.Background()
	got, err := ms[1].model.Predict(ctx, rwm.Query{Task: task, Proposal: prop, Evidence: ev})
	require.NoError(t, err)
	bare, err := ms[0].model.Predict(ctx, rwm.Query{Task: task, Proposal: prop})
	require.NoError(t, err)
	require.InDelta(t, bare.Gain, got.Gain, 1e-12)
	fallback := wc.MeanSigmas
	if pr, ok := rwm.PriorsFromCards(lab.Catalogue())[records.CanonicalName(prop.Mechanism)]; ok {
		fallback = pr.Mean
	}
	want := p.Mean(task, prop, wc.Effects, fallback) * task.SeedNoise
	require.InDelta(t, want, got.Gain, 1e-9)
	require.NotZero(t, want)

	// fx-prior-clip reads the context's gains clipped to ±6 σ_e: a record
	// within the clip (5 σ_e) moves it as it moves fx-prior, one beyond it
	// (50 σ_e) as a 6 σ_e record does.
	cl, err := landscapeModels([]string{"fx-prior", "fx-prior-clip"}, p, 8)
	require.NoError(t, err)
	at := func(m rwm.WorldModel, sigmas float64) float64 {
		r := other
		r.Gain, r.Loss = sigmas*0.02, 3-sigmas*0.02
		ev, err := records.NewEvidence(r)
		require.NoError(t, err)
		got, err := m.Predict(ctx, rwm.Query{Task: task, Proposal: prop, Evidence: ev})
		require.NoError(t, err)
		return got.Gain
	}
	require.InDelta(t, at(cl[0].model, 5), at(cl[1].model, 5), 1e-12)
	require.InDelta(t, at(cl[0].model, 6), at(cl[1].model, 50), 1e-12)
	require.NotEqual(t, at(cl[0].model, 6), at(cl[0].model, 50))
}
