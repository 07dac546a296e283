package rwm_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func withDesc(t records.Task, d map[string]float64) records.Task {
	t.Descriptors = d
	return t
}

func TestDescriptorKernelHandDerived(t *testing.T) {
	// EmbeddedConfig: kTask = kStruct·((1 − w) + w·kDesc), kDesc =
	// exp(−Σ(asinh d − asinh d′)²/(2ℓ²)). w = 0.5, ℓ = 1, offset 0, amp² 6.25.
	c := exact()
	c.DescriptorWeight, c.DescriptorLengthscale = 0.5, 1
	m := newEmbedded(t, c)
	lr2 := prop("lr-scale", "factor", "2")
	a := withDesc(task("a", "fam", records.BitsPerByte), map[string]float64{"x": 0, "y": 3})
	near := withDesc(task("b", "fam", records.BitsPerByte), map[string]float64{"x": 0, "y": 3})
	far := withDesc(task("c", "fam", records.BitsPerByte), map[string]float64{"x": math.Sinh(1), "y": 3}) // Δasinh = 1
	missing := withDesc(task("d", "fam", records.BitsPerByte), map[string]float64{"y": 3, "z": math.Sinh(2)})
	other := withDesc(task("e", "other", records.BitsPerByte), map[string]float64{"x": math.Sinh(1), "y": 3})
	for _, tc := range []struct {
		name string
		tb   records.Task
		want float64
	}{
		{"same descriptors, same family: 0.8·1", near, 6.25 * 0.8},
		{"Δ = 1: 0.8·(0.5 + 0.5·e^−½)", far, 6.25 * 0.8 * (0.5 + 0.5*math.Exp(-0.5))},
		{"x missing = 0, z only on one side: Δ² = 4", missing, 6.25 * 0.8 * (0.5 + 0.5*math.Exp(-2))},
		{"same metric only, Δ = 1", other, 6.25 * 0.5 * (0.5 + 0.5*math.Exp(-0.5))},
		{"same task", a, 6.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, m.Kernel(a, lr2, tc.tb, lr2), 1e-12)
			require.InDelta(t, tc.want, m.Kernel(tc.tb, lr2, a, lr2), 1e-12, "symmetry")
		})
	}
	// Weight 0 (the default) ignores descriptors.
	require.InDelta(t, 6.25*0.8, newEmbedded(t, exact()).Kernel(a, lr2, far, lr2), 1e-12)
}

func TestDescriptorKernelPSD(t *testing.T) {
	// Random tasks with random descriptors: the Gram matrix is a covariance.
	c := exact()
	c.DescriptorWeight, c.DescriptorLengthscale = 0.7, 0.8
	m := newEmbedded(t, c)
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"log10_lr", "width", "depth", "epochs", "objective_ar"}
	const n = 40
	ts := make([]records.Task, n)
	ps := make([]records.Proposal, n)
	for i := range ts {
		d := map[string]float64{}
		for _, name := range names {
			if rng.IntN(4) > 0 {
				d[name] = rng.NormFloat64() * 50
			}
		}
		ts[i] = withDesc(task(string(rune('a'+i%26))+string(rune('a'+i/26)), []string{"f", "g"}[rng.IntN(2)], records.BitsPerByte), d)
		ps[i] = prop([]string{"lr-scale", "width"}[rng.IntN(2)], "factor", []string{"0.5", "2", "4"}[rng.IntN(3)])
	}
	requirePSD(t, m, ts, ps)
}

// requirePSD asserts that m's Gram matrix over the (task, proposal) pairs
// is a covariance: every eigenvalue ≥ −1e-9.
func requirePSD(t *testing.T, m *rwm.Embedded, ts []records.Task, ps []records.Proposal) {
	t.Helper()
	n := len(ts)
	k := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			k.SetSym(i, j, m.Kernel(ts[i], ps[i], ts[j], ps[j]))
		}
	}
	var eig mat.EigenSym
	require.True(t, eig.Factorize(k, false))
	for _, v := range eig.Values(nil) {
		require.GreaterOrEqual(t, v, -1e-9)
	}
}

func TestDescriptorKernelTransfersToNearRecipes(t *testing.T) {
	// One record (+4 σ_e) on a task of the family: with descriptors on, a
	// task with the same recipe inherits more of it than one whose learning
	// rate is 100× off; with them off both inherit alike.
	rec := withDesc(task("seen", "fam", records.BitsPerByte), map[string]float64{"log10_lr": -3})
	near := withDesc(task("near", "fam", records.BitsPerByte), map[string]float64{"log10_lr": -3})
	far := withDesc(task("far", "fam", records.BitsPerByte), map[string]float64{"log10_lr": -1})
	p := prop("lr-scale", "factor", "2")
	ev := evidence(t, real(rec, p, 4, 1))
	gain := func(c rwm.EmbeddedConfig, q records.Task) float64 {
		pr, err := newEmbedded(t, c).Predict(context.Background(), rwm.Query{Task: q, Proposal: p, Evidence: ev})
		require.NoError(t, err)
		return pr.Gain / q.SeedNoise
	}
	on := exact()
	on.DescriptorWeight = 0.8
	require.Greater(t, gain(on, near), gain(on, far)+0.5)
	require.InDelta(t, gain(exact(), near), gain(exact(), far), 1e-12)
}

func TestDescriptorConfigValidate(t *testing.T) {
	for _, f := range []func(*rwm.EmbeddedConfig){
		func(c *rwm.EmbeddedConfig) { c.DescriptorWeight = -0.1 },
		func(c *rwm.EmbeddedConfig) { c.DescriptorWeight = 1.1 },
		func(c *rwm.EmbeddedConfig) { c.DescriptorWeight = math.NaN() },
		func(c *rwm.EmbeddedConfig) { c.DescriptorLengthscale = 0 },
		func(c *rwm.EmbeddedConfig) { c.DescriptorLengthscale = math.Inf(1) },
	} {
		c := rwm.DefaultEmbeddedConfig()
		f(&c)
		require.Error(t, c.Validate())
	}
}
