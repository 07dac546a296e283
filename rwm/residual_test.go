package rwm_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// residualRecord is a real record of proposal p on task t with gain g σ_e.
func residualRecord(t records.Task, p records.Proposal, g float64, seed uint64) records.Record {
	return records.Record{Task: t, Proposal: p, Gain: g * t.SeedNoise, Loss: t.RefLoss - g*t.SeedNoise,
		Source: records.Real, Seeds: []uint64{seed}}
}

// TestResidualByHand checks the correction against the posterior mean of
// ResidualConfig's kernel worked by hand, over a base that predicts 0 σ_e
// everywhere (so a residual is the record's gain).
//
// One record, gain +3 σ_e on (task-0, lr-scale factor 2), default σ's
// (σ_m = σ_k = σ_t = 1, σ_p = 2, σ_n = 1): k(x, x) = 1 + 1 + 1 + 4 = 7, so
// α = 3 / (7 + 1) = 0.375, and the correction at a pair is k(pair, x)·α:
// the calibrated pair 7·0.375 = 2.625; another mechanism on task-0 1·0.375;
// the other direction of lr-scale on task-1 (same mechanism) 1·0.375; the
// same proposal on task-1 (mechanism and key) 2·0.375 = 0.75; another
// mechanism on another task 0.
func TestResidualByHand(t *testing.T) {
	ctx := context.Background()
	ps := rwmtest.Proposals() // lr-scale 2, lr-scale 0.5, warmup, norm, dropout
	t0, t1 := rwmtest.Task(0), rwmtest.Task(1)
	base := &rwmtest.Fixed{Default: rwm.Prediction{Valid: true, HasInterval: true, Low: -0.004, High: 0.004}}
	m0 := mustEvidence([]records.Record{residualRecord(t1, ps[2], 1, 1)})
	m, err := rwm.NewResidual(base, m0, rwm.DefaultResidualConfig())
	require.NoError(t, err)
	ev, err := m0.AddReal(residualRecord(t0, ps[0], 3, 2))
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		task records.Task
		prop records.Proposal
		want float64
	}{
		{"calibrated pair", t0, ps[0], 2.625},
		{"same task", t0, ps[2], 0.375},
		{"same mechanism, other direction, other task", t1, ps[1], 0.375},
		{"same proposal, other task", t1, ps[0], 0.75},
		{"other task, other mechanism", t1, ps[3], 0},
	} {
		p, err := m.Predict(ctx, rwm.Query{Task: c.task, Proposal: c.prop, Evidence: ev})
		require.NoError(t, err)
		require.InDelta(t, c.want, p.Gain/c.task.SeedNoise, 1e-12, c.name)
		require.InDelta(t, c.want-1, p.Low/c.task.SeedNoise, 1e-12, c.name+": the interval moves with the gain")
		require.InDelta(t, c.want+1, p.High/c.task.SeedNoise, 1e-12, c.name)
	}

	// Two records on one pair, +3 and +1 σ_e: K = [[7, 7], [7, 7]] + I,
	// α = (K + I)⁻¹·r with r = (3, 1): (K+I) = [[8, 7], [7, 8]], det 15,
	// α = (8·3 − 7·1, −7·3 + 8·1)/15 = (17/15, −13/15); the pair's
	// correction 7·(17 − 13)/15 = 28/15.
	ev2, err := ev.AddReal(residualRecord(t0, ps[0], 1, 3))
	require.NoError(t, err)
	p, err := m.Predict(ctx, rwm.Query{Task: t0, Proposal: ps[0], Evidence: ev2})
	require.NoError(t, err)
	require.InDelta(t, 28.0/15, p.Gain/t0.SeedNoise, 1e-12)

	// An infeasible record counts InfeasibleSigmas (−6), clipped at 6
	// like the base's prediction: residual −6, correction at its pair
	// 7·(−6/8) = −5.25.
	inf := residualRecord(t0, ps[3], 0, 4)
	inf.Infeasible = "diverged"
	ev3, err := m0.AddReal(inf)
	require.NoError(t, err)
	p, err = m.Predict(ctx, rwm.Query{Task: t0, Proposal: ps[3], Evidence: ev3})
	require.NoError(t, err)
	require.InDelta(t, -5.25, p.Gain/t0.SeedNoise, 1e-12)
}

// TestResidualBaseOnly: a context that holds only base records is answered
// by the base, with the context as it came.
func TestResidualBaseOnly(t *testing.T) {
	ctx := context.Background()
	emb := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	m0 := rwmtest.Evidence(12)
	m, err := rwm.NewResidual(emb, m0, rwm.DefaultResidualConfig())
	require.NoError(t, err)
	for _, p := range rwmtest.Proposals() {
		q := rwm.Query{Task: rwmtest.Task(1), Proposal: p, Evidence: m0}
		want, err := emb.Predict(ctx, q)
		require.NoError(t, err)
		got, err := m.Predict(ctx, q)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// TestResidualLocalProperty: over an embedded base that carries strength
// across tasks and mechanisms, records beyond M_0 never move a pair of
// another task and another mechanism, whatever their gains, and the base
// model given the same records does move it.
func TestResidualLocalProperty(t *testing.T) {
	ctx := context.Background()
	ps := rwmtest.Proposals()
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.CorrAny, cfg.CorrOtherMech = 0.5, 0.5 // a base that moves everything
	emb := newEmbedded(t, cfg)
	m0 := rwmtest.Evidence(8)
	m, err := rwm.NewResidual(emb, m0, rwm.DefaultResidualConfig())
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(7, 0))
	for trial := range 20 {
		var extra []records.Record
		calTask, calMech := map[string]bool{}, map[string]bool{}
		for i := range 1 + rng.IntN(6) {
			tk, p := rwmtest.Task(rng.IntN(2)), ps[rng.IntN(2)] // tasks 0–1, lr-scale only
			extra = append(extra, residualRecord(tk, p, 12*rng.Float64()-6, uint64(1000+100*trial+i)))
			calTask[tk.ID], calMech[records.CanonicalName(p.Mechanism)] = true, true
		}
		after, err := m0.AddReal(extra...)
		require.NoError(t, err)
		moved := false
		for ti := 2; ti < 4; ti++ {
			for _, p := range ps[2:] {
				q := rwm.Query{Task: rwmtest.Task(ti), Proposal: p, Evidence: m0}
				a, err := m.Predict(ctx, q)
				require.NoError(t, err)
				q.Evidence = after
				b, err := m.Predict(ctx, q)
				require.NoError(t, err)
				require.Equal(t, a.Gain, b.Gain, "trial %d: %s on %s moved", trial, p.Key(), q.Task.ID)
				eb, err := emb.Predict(ctx, q)
				require.NoError(t, err)
				moved = moved || eb.Gain != a.Gain
			}
		}
		require.True(t, moved, "trial %d: the base itself moves unrelated pairs, or the test shows nothing", trial)
	}
}

func TestResidualConformance(t *testing.T) {
	rwmtest.Run(t, func(t *testing.T) rwm.WorldModel {
		m, err := rwm.NewResidual(newEmbedded(t, rwm.DefaultEmbeddedConfig()), rwmtest.Evidence(5), rwm.DefaultResidualConfig())
		require.NoError(t, err)
		return m
	}, rwmtest.Options{Deterministic: true})
}

func TestResidualConfigRefused(t *testing.T) {
	for _, mut := range []func(*rwm.ResidualConfig){
		func(c *rwm.ResidualConfig) { c.MechanismSigmas = -1 },
		func(c *rwm.ResidualConfig) { c.PairSigmas = math.Inf(1) },
		func(c *rwm.ResidualConfig) { c.TaskSigmas = math.NaN() },
		func(c *rwm.ResidualConfig) { c.NoiseSigmas = 0 },
		func(c *rwm.ResidualConfig) { c.InfeasibleSigmas = 1 },
		func(c *rwm.ResidualConfig) { c.ClipSigmas = -2 },
	} {
		c := rwm.DefaultResidualConfig()
		mut(&c)
		_, err := rwm.NewResidual(&rwmtest.Fixed{}, records.Evidence{}, c)
		require.Error(t, err)
		require.True(t, errors.Is(err, rwm.ErrConfig), "%v", err)
	}
	_, err := rwm.NewResidual(nil, records.Evidence{}, rwm.DefaultResidualConfig())
	require.ErrorIs(t, err, rwm.ErrConfig)
}
