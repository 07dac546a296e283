package rwm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// knob is an Effector for tests: lr-scale multiplies the descriptor "lr"
// by its factor, and "switch" sets the descriptor "opt" to 1; any other
// mechanism cannot be built.
type knob struct{}

func (knob) ID() string { return "knob" }

func (knob) Effect(t records.Task, p records.Proposal) (map[string]float64, error) {
	out := map[string]float64{}
	for k, v := range t.Descriptors {
		out[k] = v
	}
	switch p.Mechanism {
	case "lr-scale":
		f, err := strconv.ParseFloat(p.Params["factor"], 64)
		if err != nil {
			return nil, err
		}
		out["lr"] *= f
	case "switch":
		out["opt"] = 1
	default:
		return nil, errors.New("knob: cannot build")
	}
	return out, nil
}

// sinhTask is a task whose descriptors have the given asinh values.
func sinhTask(id string, lr, opt float64) records.Task {
	return withDesc(task(id, "fam", records.BitsPerByte), map[string]float64{"lr": math.Sinh(lr), "opt": math.Sinh(opt)})
}

func TestEffectKernelHandDerived(t *testing.T) {
	// EmbeddedConfig.Effects without a context (Kernel): δ are raw asinh
	// changes, and the loss term compares raw asinh descriptors.
	// Base kernel terms: amp² = 6.25, CorrMech 0.6, Mismatch 0.3, φ in log
	// units with ℓ = ln 4, same family 0.8, offset 0 (exact()).
	c := exact()
	c.Effects, c.EffectSigmas = knob{}, 2
	m := newEmbedded(t, c)
	a := withDesc(task("a", "fam", records.BitsPerByte), map[string]float64{"lr": 1, "opt": 0})
	b := withDesc(task("b", "fam", records.BitsPerByte), map[string]float64{"lr": 2, "opt": 0})
	up, down := prop("lr-scale", "factor", "2"), prop("lr-scale", "factor", "0.5")
	da := func(x float64, f float64) float64 { return math.Asinh(x*f) - math.Asinh(x) }
	// Same mechanism, factors 2 and 0.5: φ differ by ln 4, m = e^−½.
	kMech := 0.6 + 0.4*(0.3+0.7*math.Exp(-0.5))
	want := 0.8 * (6.25*kMech + 4*da(1, 2)*da(2, 0.5))
	require.InDelta(t, want, m.Kernel(a, up, b, down), 1e-12)
	require.InDelta(t, want, m.Kernel(b, down, a, up), 1e-12, "symmetry")
	// A change of another mechanism that moves another descriptor: δ·δ′ = 0.
	sw := prop("switch", "to", "lion")
	require.InDelta(t, 0.8*6.25*0.1, m.Kernel(a, up, b, sw), 1e-12)
	// A proposal the Effector cannot build has no effect term.
	bad := prop("width", "factor", "2")
	require.InDelta(t, 0.8*6.25*0.1, m.Kernel(a, up, b, bad), 1e-12)

	// The loss term: G²(k(b,b′) − k(b,a′) − k(a,b′) + k(a,a′)) with b, a the
	// asinh descriptors before and after, here on one task (kTask = 1).
	c = exact()
	c.Effects, c.LossSigmas, c.LossLengthscale = knob{}, 3, 2
	m = newEmbedded(t, c)
	x := sinhTask("x", 1, 0)
	on := prop("switch", "to", "lion") // opt: asinh 0 → asinh 1
	se := func(d2 float64) float64 { return math.Exp(-d2 / 8) }
	// before (1, 0), after (1, asinh 1) for both: |b−b|² = 0, |b−a|² = asinh²1.
	s := math.Asinh(1)
	want = 6.25 + 9*(se(0)-2*se(s*s)+se(0))
	require.InDelta(t, want, m.Kernel(x, on, x, on), 1e-12)
}

func TestEffectTermPredictsTheOpposite(t *testing.T) {
	// One record: doubling the learning rate lost 3 σ_e. With the effect
	// term the model predicts that halving it wins on the same task, and
	// on a task like it; without it, that halving loses as well (the two
	// proposals share a mechanism).
	tk := sinhTask("t", 1, 0)
	near := sinhTask("u", 1.1, 0)
	up, down := prop("lr-scale", "factor", "2"), prop("lr-scale", "factor", "0.5")
	ev := evidence(t, real(tk, up, -3, 1))
	gain := func(c rwm.EmbeddedConfig, q records.Task) float64 {
		return predict(t, newEmbedded(t, c), rwm.Query{Task: q, Proposal: down, Evidence: ev}).Gain / q.SeedNoise
	}
	on := exact()
	on.Effects, on.EffectSigmas = knob{}, 4
	require.Greater(t, gain(on, tk), 0.5)
	require.Greater(t, gain(on, near), 0.5)
	require.Less(t, gain(exact(), tk), -1.0)
}

func TestLossTermLearnsCurvature(t *testing.T) {
	// Gains from a loss with its optimum at asinh(lr) = 2 (loss = (x−2)²), so
	// on a task left of the optimum raising the rate wins and lowering it
	// loses, and the other way round on the right. Trained on records of
	// 24 tasks, the loss term ranks the two directions correctly on 40 new
	// tasks (31 of 31 with pairs apart by ≥ 1 σ_e) where the catalogue-only
	// kernel is at chance (16 of 31).
	rng := rand.New(rand.NewPCG(5, 6))
	props := []records.Proposal{prop("lr-scale", "factor", "4"), prop("lr-scale", "factor", "0.25")}
	mk := func(i int) (records.Task, []float64) {
		x := 0.5 + rng.Float64()*3
		tk := withDesc(task(fmt.Sprintf("t%02d", i), "fam", records.BitsPerByte), map[string]float64{"lr": math.Sinh(x)})
		var gains []float64
		for _, p := range props {
			f, _ := strconv.ParseFloat(p.Params["factor"], 64)
			after := math.Asinh(math.Sinh(x) * f)
			gains = append(gains, (x-2)*(x-2)-(after-2)*(after-2))
		}
		return tk, gains
	}
	var rs []records.Record
	for i := range 24 {
		tk, g := mk(i)
		j := rng.IntN(2)
		rs = append(rs, real(tk, props[j], g[j]+rng.NormFloat64()*0.5, 1))
	}
	ev := evidence(t, rs...)
	correct := func(c rwm.EmbeddedConfig, tk records.Task, g []float64) bool {
		m := newEmbedded(t, c)
		p0 := predict(t, m, rwm.Query{Task: tk, Proposal: props[0], Evidence: ev}).Gain
		p1 := predict(t, m, rwm.Query{Task: tk, Proposal: props[1], Evidence: ev}).Gain
		return (p0-p1)*(g[0]-g[1]) > 0
	}
	loss := rwm.DefaultEmbeddedConfig()
	loss.Effects, loss.LossSigmas, loss.LossLengthscale = knob{}, 8, 2
	var withLoss, without, total int
	for i := range 40 {
		tk, g := mk(100 + i)
		if math.Abs(g[0]-g[1]) < 1 {
			continue
		}
		total++
		if correct(loss, tk, g) {
			withLoss++
		}
		if correct(rwm.DefaultEmbeddedConfig(), tk, g) {
			without++
		}
	}
	t.Logf("correct: loss term %d, catalogue-only %d of %d", withLoss, without, total)
	require.GreaterOrEqual(t, float64(withLoss), 0.9*float64(total), "loss term")
	require.LessOrEqual(t, float64(without), 0.65*float64(total), "catalogue-only kernel: about chance")
}

func TestEffectKernelPSD(t *testing.T) {
	// Random tasks and proposals with every term on, standardised
	// descriptors in the context: the Gram matrix factorises (LogMarginal
	// succeeds) and, without a context, its eigenvalues are ≥ 0.
	c := rwm.DefaultEmbeddedConfig()
	c.DescriptorWeight = 0.5
	c = rwm.WithEffects(c, knob{})
	c.Jitter = 0
	m := newEmbedded(t, c)
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 40
	ts := make([]records.Task, n)
	ps := make([]records.Proposal, n)
	var rs []records.Record
	for i := range ts {
		ts[i] = sinhTask(fmt.Sprintf("t%02d", i), rng.NormFloat64(), float64(rng.IntN(2)))
		ps[i] = []records.Proposal{prop("lr-scale", "factor", "2"), prop("lr-scale", "factor", "0.5"), prop("switch", "to", "lion")}[rng.IntN(3)]
		rs = append(rs, real(ts[i], ps[i], rng.NormFloat64()*2, 1))
	}
	requirePSD(t, m, ts, ps)
	_, err := rwm.LogMarginal(context.Background(), c, evidence(t, rs...))
	require.NoError(t, err)
}

func TestWithEffects(t *testing.T) {
	base := rwm.DefaultEmbeddedConfig()
	c := rwm.WithEffects(base, knob{})
	require.Equal(t, 2.0, c.EffectSigmas)
	require.Equal(t, 8.0, c.LossSigmas)
	require.Equal(t, 4.0, c.LossLengthscale)
	require.False(t, c.DescriptorStandardise, "descriptor kernel off: nothing to standardise")
	base.DescriptorWeight = 1
	c = rwm.WithEffects(base, knob{})
	require.True(t, c.DescriptorStandardise)
	require.Equal(t, 4.0, c.DescriptorLengthscale)
	require.NoError(t, c.Validate())
	// The Effector's ID is part of the model's.
	require.NotEqual(t, newEmbedded(t, base).ID(), newEmbedded(t, c).ID())
	for _, f := range []func(*rwm.EmbeddedConfig){
		func(c *rwm.EmbeddedConfig) { c.EffectSigmas = -1 },
		func(c *rwm.EmbeddedConfig) { c.LossSigmas = math.NaN() },
		func(c *rwm.EmbeddedConfig) { c.LossLengthscale = 0 },
	} {
		bad := c
		f(&bad)
		require.Error(t, bad.Validate())
	}
}

func TestEffectsBitIdentical(t *testing.T) {
	// Fresh models on the same records give bit-identical predictions,
	// whatever order Go's maps iterate descriptors and parameters in.
	rng := rand.New(rand.NewPCG(9, 10))
	names := []string{"lr", "opt", "a", "b", "c", "d", "e", "f"}
	var rs []records.Record
	for i := range 30 {
		d := map[string]float64{}
		for _, n := range names {
			d[n] = rng.NormFloat64() * 3
		}
		tk := withDesc(task(fmt.Sprintf("t%02d", i), "fam", records.BitsPerByte), d)
		p := prop("lr-scale", "factor", []string{"2", "0.5"}[rng.IntN(2)], "x", "1", "y", "2", "z", "3")
		rs = append(rs, real(tk, p, rng.NormFloat64()*2, 1))
	}
	ev := evidence(t, rs...)
	c := rwm.DefaultEmbeddedConfig()
	c.DescriptorWeight = 0.5
	c = rwm.WithEffects(c, knob{})
	q := rwm.Query{Task: rs[3].Task, Proposal: prop("lr-scale", "factor", "4", "x", "1", "y", "2", "z", "3"), Evidence: ev}
	first := predict(t, newEmbedded(t, c), q)
	for range 20 {
		require.Equal(t, first, predict(t, newEmbedded(t, c), q))
	}
}

func TestTunedEffectsSharedBitIdentical(t *testing.T) {
	// Tuned with effects on: the Effector runs once per distinct (task,
	// proposal) for the tuning, whose factorisation of the chosen
	// configuration the tuned model keeps, and once per query (before:
	// once per record and grid configuration, 81 × 60 for the tuning, then
	// once more per distinct pair for the tuned model's own
	// factorisation), and the predictions equal
	// (==) those of an Embedded with the configuration of the highest
	// LogMarginal, each configuration's records prepared on their own.
	ev := dialsEvidence(60, 6, 13)
	distinct := map[string]bool{}
	for _, r := range ev.Records() {
		distinct[r.Task.ID+"\x00"+r.Proposal.Key()] = true
	}
	require.Less(t, len(distinct), ev.Len(), "some pairs repeat")
	var calls atomic.Int64
	base := dialsConfig(dials{&calls})
	ctx := context.Background()
	best, bestLM := base, math.Inf(-1)
	for _, c := range rwm.TuneGrid(base) {
		lm, err := rwm.LogMarginal(ctx, c, ev)
		require.NoError(t, err)
		if lm > bestLM {
			best, bestLM = c, lm
		}
	}
	require.Equal(t, int64(81*len(distinct)), calls.Load(), "LogMarginal alone: once per distinct pair")
	calls.Store(0)
	tuned := newTuned(t, base, nil)
	cfg, lm, err := tuned.Config(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, bestLM, lm)
	require.Equal(t, newEmbedded(t, best).ID(), newEmbedded(t, cfg).ID())
	require.Equal(t, int64(len(distinct)), calls.Load(), "tuning: once per distinct pair")
	alone := newEmbedded(t, best)
	rng := rand.New(rand.NewPCG(15, 16))
	for i := range 12 {
		q := rwm.Query{Task: ev.At(rng.IntN(ev.Len())).Task, Proposal: prop(fmt.Sprintf("s%d", rng.IntN(7)), "factor", "3"), Evidence: ev}
		calls.Store(0)
		got := predict(t, tuned, q)
		require.Equal(t, int64(1), calls.Load(), "query %d: the tuning's factorisation serves it", i)
		require.Equal(t, predict(t, alone, q), got, "query %d", i)
	}
}
