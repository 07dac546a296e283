package rwm_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func task(id, family string, metric records.Metric) records.Task {
	return records.Task{ID: id, Family: family, Split: records.Train, Metric: metric, RefLoss: 1.2, SeedNoise: 0.004, Budget: 100}
}

func prop(mech string, kv ...string) records.Proposal {
	p := records.Proposal{Mechanism: mech, Params: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Params[kv[i]] = kv[i+1]
	}
	return p
}

func real(t records.Task, p records.Proposal, gainSigmas float64, seed uint64) records.Record {
	g := gainSigmas * t.SeedNoise
	return records.Record{Task: t, Proposal: p, Gain: g, Loss: t.RefLoss - g, Source: records.Real, Seeds: []uint64{seed}}
}

func evidence(t *testing.T, rs ...records.Record) records.Evidence {
	t.Helper()
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	return ev
}

// exact is the default config without the diagonal jitter, the task
// offset and the fitted scale, so that hand-derived posteriors of the core
// kernel match to rounding; the offset and the scale have their own tests.
func exact() rwm.EmbeddedConfig {
	c := rwm.DefaultEmbeddedConfig()
	c.Jitter = 0
	c.OffsetSigmas = 0
	c.FitScale = false
	return c
}

func predict(t *testing.T, m rwm.WorldModel, q rwm.Query) rwm.Prediction {
	t.Helper()
	p, err := m.Predict(context.Background(), q)
	require.NoError(t, err)
	return p
}

func TestKernelHandDerived(t *testing.T) {
	// EmbeddedConfig's kernel with the defaults: amp² = 2.5² = 6.25,
	// kTask 1 / 0.8 / 0.5 / 0.3, kMech 0.6 + 0.4·Π(0.3 + 0.7·m), 0.1 across
	// mechanisms; numeric m = exp(−Δφ²/(2·ln²4)). Offset 0 here (see
	// TestKernelOffset).
	m := newEmbedded(t, exact())
	a := task("a", "fam", records.BitsPerByte)
	a2 := task("a2", "fam", records.BitsPerByte)
	b := task("b", "other", records.BitsPerByte)
	c := task("c", "diff", records.NatsPerToken)
	noFam := task("x", "", records.BitsPerByte)
	noFam2 := task("y", "", records.BitsPerByte)
	lr2 := prop("lr-scale", "factor", "2")
	// factors 2 and 4: Δφ = ln 2, m = exp(−1/8) = 0.8824969, kMech =
	// 0.6 + 0.4·(0.3 + 0.7·0.8824969) = 0.9670991.
	const kLR24 = 0.9670991327236866
	tests := []struct {
		name   string
		ta     records.Task
		pa     records.Proposal
		tb     records.Task
		pb     records.Proposal
		want   float64
		digits float64
	}{
		{"same task and proposal", a, lr2, a, lr2, 6.25, 1e-12},
		{"same proposal written differently", a, lr2, a, prop(" LR-Scale ", "Factor", "2.000"), 6.25, 1e-12},
		{"same family", a, lr2, a2, lr2, 6.25 * 0.8, 1e-12},
		{"same metric only", a, lr2, b, lr2, 6.25 * 0.5, 1e-12},
		{"different metric", a, lr2, c, lr2, 6.25 * 0.3, 1e-12},
		{"empty families never match", noFam, lr2, noFam2, lr2, 6.25 * 0.5, 1e-12},
		{"factor 2 vs 4 (log space)", a, lr2, a, prop("lr-scale", "factor", "4"), 6.25 * kLR24, 1e-9},
		{"factor 0.1 vs 0.2 equals 2 vs 4", a, prop("lr-scale", "factor", "0.1"), a, prop("lr-scale", "factor", "0.2"), 6.25 * kLR24, 1e-9},
		{"categorical differs", a, prop("norm", "kind", "rms"), a, prop("norm", "kind", "layer"), 6.25 * (0.6 + 0.4*0.3), 1e-12},
		{"categorical equal", a, prop("norm", "kind", "rms"), a, prop("norm", "kind", " RMS"), 6.25, 1e-12},
		{"parameter missing on one side", a, prop("norm", "kind", "rms"), a, prop("norm"), 6.25 * (0.6 + 0.4*0.3), 1e-12},
		{"two mismatches multiply", a, prop("m", "x", "a", "y", "b"), a, prop("m", "x", "c", "y", "d"), 6.25 * (0.6 + 0.4*0.09), 1e-12},
		{"different mechanisms", a, lr2, a, prop("warmup", "steps", "10"), 6.25 * 0.1, 1e-12},
		{"different mechanism and family", a, lr2, b, prop("warmup"), 6.25 * 0.5 * 0.1, 1e-12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, m.Kernel(tt.ta, tt.pa, tt.tb, tt.pb), tt.digits)
			require.InDelta(t, tt.want, m.Kernel(tt.tb, tt.pb, tt.ta, tt.pa), tt.digits, "symmetry")
		})
	}
}

func TestKernelPriorScalesAmplitude(t *testing.T) {
	// A mechanism prior N(Mean·σ_e, (Std·σ_e)²) sets amp(a) = Std.
	cfg := exact()
	cfg.Priors = map[string]records.Prior{"LR-scale": {Mean: -1, Std: 2}}
	m := newEmbedded(t, cfg)
	a := task("a", "fam", records.BitsPerByte)
	require.InDelta(t, 4.0, m.Kernel(a, prop("lr-scale"), a, prop("lr-scale")), 1e-12)
	require.InDelta(t, 2*2.5*0.1, m.Kernel(a, prop("lr-scale"), a, prop("warmup")), 1e-12)
}

func TestKernelOffset(t *testing.T) {
	// The default task offset adds Offset²·kTask = 4·kTask to every pair.
	m := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	a := task("a", "fam", records.BitsPerByte)
	a2 := task("a2", "fam", records.BitsPerByte)
	c := task("c", "diff", records.NatsPerToken)
	lr := prop("lr-scale", "factor", "2")
	wu := prop("warmup")
	require.InDelta(t, 6.25+4, m.Kernel(a, lr, a, lr), 1e-12)
	require.InDelta(t, 0.625+4, m.Kernel(a, lr, a, wu), 1e-12)
	require.InDelta(t, (0.625+4)*0.8, m.Kernel(a, lr, a2, wu), 1e-12)
	require.InDelta(t, (6.25+4)*0.3, m.Kernel(a, lr, c, lr), 1e-12)
}

func TestScaleHandDerived(t *testing.T) {
	// EmbeddedConfig: c = (ν₀ + rᵀK₁⁻¹r)/(ν₀ + n). One record y = 3 of the
	// same task and proposal: K₁ = 7.25, rᵀK₁⁻¹r = 9/7.25 = 1.2413793,
	// c = (4 + 1.2413793)/5 = 1.0482759. The mean is unchanged (2.5862069);
	// the predictive sd is √(c·(0.8620690 + 1)) = 1.3971264.
	cfg := exact()
	cfg.FitScale = true
	m := newEmbedded(t, cfg)
	a := task("a", "fam", records.BitsPerByte)
	p := prop("lr-scale", "factor", "2")
	got := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, real(a, p, 3, 1))})
	c := (4 + 9/7.25) / 5
	sd := math.Sqrt(c * (6.25/7.25 + 1))
	require.InDelta(t, 1.3971264, sd, 1e-7)
	require.InDelta(t, 2.586206896551724*0.004, got.Gain, 1e-12)
	require.InDelta(t, (2.586206896551724+rwm.Z90*sd)*0.004, got.High, 1e-12)
	// Records far larger than the prior expects widen the interval: 3
	// records at y = 30: K₁ = 6.25·J + I, rᵀK₁⁻¹r = 3·900/(1 + 3·6.25) =
	// 136.71, c = (4 + 136.71)/7 = 20.10, so the interval is √c = 4.48
	// times wider than with c = 1.
	ev := evidence(t, real(a, p, 30, 1), real(a, p, 30, 2), real(a, p, 30, 3))
	big := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: ev})
	fixed := predict(t, newEmbedded(t, exact()), rwm.Query{Task: a, Proposal: p, Evidence: ev})
	require.InDelta(t, fixed.Gain, big.Gain, 1e-12)
	require.InDelta(t, math.Sqrt((4+2700/19.75)/7), (big.High-big.Low)/(fixed.High-fixed.Low), 1e-9)
}

func TestPosteriorHandDerived(t *testing.T) {
	// METHOD.md §1 Research World Model: the prediction is the GP posterior
	// given the records M. Units: σ_e = 0.004, gains in σ_e units.
	m := newEmbedded(t, exact())
	a := task("a", "fam", records.BitsPerByte)
	p := prop("lr-scale", "factor", "2")
	other := prop("warmup", "steps", "10")

	t.Run("no records", func(t *testing.T) {
		// Prior: mean 0, variance 6.25 + noise 1, sd = √7.25.
		got := predict(t, m, rwm.Query{Task: a, Proposal: p})
		sd := math.Sqrt(7.25) * 0.004
		require.True(t, got.Valid)
		require.True(t, got.HasInterval)
		require.InDelta(t, 0, got.Gain, 1e-15)
		require.InDelta(t, -rwm.Z90*sd, got.Low, 1e-12)
		require.InDelta(t, rwm.Z90*sd, got.High, 1e-12)
	})
	t.Run("one record", func(t *testing.T) {
		// y = 3. K = 6.25 + 1 = 7.25; mean = 6.25/7.25·3 = 2.5862069;
		// var_f = 6.25 − 6.25²/7.25 = 0.8620690; predictive sd =
		// √(0.8620690 + 1) = 1.3645765.
		got := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, real(a, p, 3, 1))})
		require.InDelta(t, 2.586206896551724*0.004, got.Gain, 1e-12)
		require.InDelta(t, (2.586206896551724-rwm.Z90*1.364576478442026)*0.004, got.Low, 1e-12)
		require.InDelta(t, (2.586206896551724+rwm.Z90*1.364576478442026)*0.004, got.High, 1e-12)
	})
	t.Run("two records", func(t *testing.T) {
		// y = (3, −1) for (p, other) on task a: k(p, other) = 6.25·0.1 =
		// 0.625. K = [[7.25, .625], [.625, 7.25]], det = 52.171875,
		// α = K⁻¹y = (22.375, −9.125)/det; k* = (6.25, 0.625):
		// mean = k*·α = 2.5711291; var_f = 6.25 − k*ᵀK⁻¹k* = 0.8610362.
		ev := evidence(t, real(a, p, 3, 1), real(a, other, -1, 2))
		got := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: ev})
		sd := math.Sqrt(0.8610362383947283 + 1)
		require.InDelta(t, 2.571129080563043*0.004, got.Gain, 1e-12)
		require.InDelta(t, (2.571129080563043+rwm.Z90*sd)*0.004, got.High, 1e-12)
	})
	t.Run("prior mean", func(t *testing.T) {
		// Prior N(−2, 1.5²) σ_e for lr-scale and one record at y = 1:
		// mean = −2 + 2.25/3.25·(1 − (−2)) = 0.0769231.
		cfg := exact()
		cfg.Priors = map[string]records.Prior{"lr-scale": {Mean: -2, Std: 1.5}}
		mp := newEmbedded(t, cfg)
		got := predict(t, mp, rwm.Query{Task: a, Proposal: p})
		require.InDelta(t, -2*0.004, got.Gain, 1e-15)
		got = predict(t, mp, rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, real(a, p, 1, 1))})
		require.InDelta(t, (-2+2.25/3.25*3)*0.004, got.Gain, 1e-12)
	})
	t.Run("infeasible record", func(t *testing.T) {
		// An infeasible record counts as y = InfeasibleSigmas = −6:
		// mean = 6.25/7.25·(−6).
		r := records.Record{Task: a, Proposal: p, Source: records.Real, Infeasible: "diverged", Seeds: []uint64{1}}
		got := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, r)})
		require.InDelta(t, 6.25/7.25*-6*0.004, got.Gain, 1e-12)
	})
	t.Run("task units", func(t *testing.T) {
		// Gains are shared in σ_e units: a record of +3σ on a task with
		// σ = 0.004 predicts 2.586σ on a task of the same ID... and a task
		// of the same family with σ = 0.02 gets 6.25·0.8/7.25·3 σ of its own.
		b := task("b", "fam", records.BitsPerByte)
		b.SeedNoise = 0.02
		got := predict(t, m, rwm.Query{Task: b, Proposal: p, Evidence: evidence(t, real(a, p, 3, 1))})
		require.InDelta(t, 5.0/7.25*3*0.02, got.Gain, 1e-12)
	})
}

func TestEmbeddedValidity(t *testing.T) {
	cards := []records.Card{{
		Mechanism: "lr-scale",
		Params: []records.ParamSpec{
			{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}, Min: 0.1, Max: 10},
			{Name: "steps", Kind: "int", Choices: []string{"1", "5"}, Min: 1, Max: 100},
			{Name: "kind", Kind: "enum", Choices: []string{"cosine", "linear"}},
		},
	}}
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.Cards = cards
	m := newEmbedded(t, cfg)
	a := task("a", "fam", records.BitsPerByte)
	tests := []struct {
		name  string
		p     records.Proposal
		valid bool
	}{
		{"in catalogue", prop("LR-Scale", "factor", "3", "kind", "Cosine", "steps", "7"), true},
		{"no change", prop(records.NoChange), false},
		{"unknown mechanism", prop("wings"), false},
		{"unknown parameter", prop("lr-scale", "colour", "red"), false},
		{"out of range", prop("lr-scale", "factor", "20"), false},
		{"not an integer", prop("lr-scale", "steps", "2.5"), false},
		{"not a number", prop("lr-scale", "factor", "big"), false},
		{"enum outside choices", prop("lr-scale", "kind", "step"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := predict(t, m, rwm.Query{Task: a, Proposal: tt.p})
			require.Equal(t, tt.valid, got.Valid, got.Reason)
			require.NotEmpty(t, got.Reason)
		})
	}
	// Without cards, only the no-change proposal is invalid.
	free := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	require.True(t, predict(t, free, rwm.Query{Task: a, Proposal: prop("wings")}).Valid)
	require.False(t, predict(t, free, rwm.Query{Task: a, Proposal: prop(" NONE ")}).Valid)
}

func TestEvidenceIsRealOnly(t *testing.T) {
	// METHOD.md §1 Synthetic state expansion: predicted and synthetic
	// records are never evidence; a Query's Evidence can hold only real ones.
	a := task("a", "fam", records.BitsPerByte)
	r := real(a, prop("lr-scale"), 1, 1)
	for _, src := range []records.Source{records.Predicted, records.Synthetic} {
		bad := r
		bad.Source = src
		_, err := records.NewEvidence(r, bad)
		require.ErrorIs(t, err, records.ErrNotEvidence, "source %s", src)
		ev, err := records.RealOnly([]records.Record{r, bad})
		require.NoError(t, err)
		require.Equal(t, 1, ev.Len())
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, rwm.DefaultEmbeddedConfig().Validate())
	for name, mut := range map[string]func(*rwm.EmbeddedConfig){
		"signal":    func(c *rwm.EmbeddedConfig) { c.SignalSigmas = 0 },
		"noise":     func(c *rwm.EmbeddedConfig) { c.NoiseSigmas = math.NaN() },
		"task corr": func(c *rwm.EmbeddedConfig) { c.CorrAny = 0.9 },
		"mech corr": func(c *rwm.EmbeddedConfig) { c.CorrMech = 1.5 },
		"length":    func(c *rwm.EmbeddedConfig) { c.Lengthscale = -1 },
		"scale":     func(c *rwm.EmbeddedConfig) { c.NumericScale = 0 },
		"mismatch":  func(c *rwm.EmbeddedConfig) { c.Mismatch = 2 },
		"infeas":    func(c *rwm.EmbeddedConfig) { c.InfeasibleSigmas = math.Inf(-1) },
		"cache":     func(c *rwm.EmbeddedConfig) { c.CacheSize = 0 },
		"prior":     func(c *rwm.EmbeddedConfig) { c.Priors = map[string]records.Prior{"x": {Std: 0}} },
	} {
		c := rwm.DefaultEmbeddedConfig()
		mut(&c)
		require.Error(t, c.Validate(), name)
		_, err := rwm.NewEmbedded(c)
		require.ErrorIs(t, err, rwm.ErrConfig, name)
		require.EqualError(t, err, c.Validate().Error(), name)
	}
	require.Error(t, rwm.CacheConfig{}.Validate())
	require.Error(t, rwm.RetryConfig{Attempts: 1, Multiplier: 0.5}.Validate())
	require.NoError(t, rwm.DefaultRetryConfig().Validate())
	require.NoError(t, rwm.DefaultCacheConfig().Validate())
}

func TestPriorsFromCards(t *testing.T) {
	cards := []records.Card{{Mechanism: "A", Prior: &records.Prior{Mean: 1, Std: 2}}, {Mechanism: "b"}}
	require.Equal(t, map[string]records.Prior{"a": {Mean: 1, Std: 2}}, rwm.PriorsFromCards(cards))
}

// genRecord draws a real record over a small vocabulary of tasks and
// proposals, so that draws overlap.
func genRecord(t *rapid.T, label string) records.Record {
	fams := []string{"f1", "f2"}
	ti := rapid.IntRange(0, 3).Draw(t, label+"task")
	tk := task(fmt.Sprintf("t%d", ti), fams[ti%2], records.BitsPerByte)
	tk.SeedNoise = []float64{0.004, 0.01, 0.02, 0.004}[ti]
	mech := rapid.SampledFrom([]string{"lr", "wd", "norm"}).Draw(t, label+"mech")
	var p records.Proposal
	if mech == "norm" {
		p = prop(mech, "kind", rapid.SampledFrom([]string{"rms", "layer"}).Draw(t, label+"kind"))
	} else {
		p = prop(mech, "x", rapid.SampledFrom([]string{"0.5", "1", "2", "8"}).Draw(t, label+"x"))
	}
	r := real(tk, p, rapid.Float64Range(-8, 8).Draw(t, label+"gain"), rapid.Uint64().Draw(t, label+"seed"))
	if rapid.IntRange(0, 9).Draw(t, label+"infeasible") == 0 {
		r.Infeasible, r.Gain, r.Loss = "diverged", 0, 0
	}
	return r
}

func TestPropertyMoreEvidenceNarrows(t *testing.T) {
	// Conditioning a Gaussian never increases the posterior variance: with
	// the scale c fixed, adding any record (in particular one of the same
	// task and proposal) keeps the q10–q90 interval as narrow or narrower.
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.FitScale = false
	m := newEmbedded(t, cfg)
	rapid.Check(t, func(t *rapid.T) {
		q, ev := genContext(t)
		p0, err := m.Predict(context.Background(), rwm.Query{Task: q.Task, Proposal: q.Proposal, Evidence: ev})
		require.NoError(t, err)
		extra := genRecord(t, "extra")
		if rapid.Bool().Draw(t, "same") {
			extra.Task, extra.Proposal = q.Task, q.Proposal
		}
		ev2, err := ev.Add(extra)
		require.NoError(t, err)
		p1, err := m.Predict(context.Background(), rwm.Query{Task: q.Task, Proposal: q.Proposal, Evidence: ev2})
		require.NoError(t, err)
		w0, w1 := p0.High-p0.Low, p1.High-p1.Low
		if w1 > w0*(1+1e-9) {
			t.Fatalf("interval widened from %g to %g after adding %s/%s", w0, w1, extra.Task.ID, extra.Proposal.Key())
		}
	})
}

func TestPropertyConfirmingEvidenceNarrows(t *testing.T) {
	// With the fitted scale (the default), a record of the same task and
	// proposal that lands on the predicted gain narrows the interval: rᵀK⁻¹r
	// grows by the squared standardised prediction error, here 0, while n
	// grows by one, so c shrinks, and so does the posterior variance.
	m := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	rapid.Check(t, func(t *rapid.T) {
		q, ev := genContext(t)
		p0, err := m.Predict(context.Background(), rwm.Query{Task: q.Task, Proposal: q.Proposal, Evidence: ev})
		require.NoError(t, err)
		r := q
		r.Gain, r.Loss, r.Infeasible = p0.Gain, q.Task.RefLoss-p0.Gain, ""
		ev2, err := ev.Add(r)
		require.NoError(t, err)
		p1, err := m.Predict(context.Background(), rwm.Query{Task: q.Task, Proposal: q.Proposal, Evidence: ev2})
		require.NoError(t, err)
		require.InDelta(t, p0.Gain, p1.Gain, 1e-9)
		w0, w1 := p0.High-p0.Low, p1.High-p1.Low
		if w1 > w0*(1+1e-9) {
			t.Fatalf("interval widened from %g to %g after a confirming record", w0, w1)
		}
	})
}

// genContext draws up to 12 records and a query record.
func genContext(t *rapid.T) (records.Record, records.Evidence) {
	n := rapid.IntRange(0, 12).Draw(t, "n")
	var rs []records.Record
	for i := range n {
		rs = append(rs, genRecord(t, fmt.Sprint(i)))
	}
	q := genRecord(t, "query")
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	return q, ev
}

func TestPropertySameProposalShrinksStrictly(t *testing.T) {
	// k copies of the same task and proposal: posterior variance
	// a²/(1 + k·a²) in σ_e² (noise 1), strictly decreasing in k, and the
	// interval approaches ±Z90·σ_e (noise only).
	m := newEmbedded(t, exact())
	a := task("a", "fam", records.BitsPerByte)
	p := prop("lr-scale", "factor", "2")
	prev := math.Inf(1)
	var rs []records.Record
	for k := range 6 {
		got := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, rs...)})
		w := got.High - got.Low
		vf := 6.25 / (1 + float64(k)*6.25)
		require.InDelta(t, 2*rwm.Z90*math.Sqrt(vf+1)*0.004, w, 1e-12, "k=%d", k)
		require.Less(t, w, prev)
		prev = w
		rs = append(rs, real(a, p, 2, uint64(k)))
	}
}

func TestPropertyOrderIndependent(t *testing.T) {
	// Predictions depend on the set of records only (the model sorts them),
	// bit for bit.
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 10).Draw(t, "n")
		var rs []records.Record
		for i := range n {
			rs = append(rs, genRecord(t, fmt.Sprint(i)))
		}
		q := genRecord(t, "query")
		perm := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "s"), 1)).Perm(n)
		shuf := make([]records.Record, n)
		for i, j := range perm {
			shuf[i] = rs[j]
		}
		a, err := newEmbedded(t, rwm.DefaultEmbeddedConfig()).Predict(context.Background(),
			rwm.Query{Task: q.Task, Proposal: q.Proposal, Evidence: evidence2(rs)})
		require.NoError(t, err)
		b, err := newEmbedded(t, rwm.DefaultEmbeddedConfig()).Predict(context.Background(),
			rwm.Query{Task: q.Task, Proposal: q.Proposal, Evidence: evidence2(shuf)})
		require.NoError(t, err)
		require.Equal(t, a, b)
	})
}

func evidence2(rs []records.Record) records.Evidence {
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		panic(err)
	}
	return ev
}

func TestEmbeddedReusesFactorisation(t *testing.T) {
	// Repeated predictions against one context agree with a fresh model
	// (the cached factorisation is the same one), for several contexts
	// beyond the cache size.
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.CacheSize = 2
	shared := newEmbedded(t, cfg)
	a := task("a", "fam", records.BitsPerByte)
	ps := []records.Proposal{prop("lr", "x", "1"), prop("lr", "x", "4"), prop("norm", "kind", "rms")}
	var evs []records.Evidence
	var rs []records.Record
	for i := range 5 {
		rs = append(rs, real(a, ps[i%3], float64(i)-2, uint64(i)))
		evs = append(evs, evidence(t, rs...))
	}
	for round := range 2 {
		for i, ev := range slices.Backward(evs) {
			for _, p := range ps {
				q := rwm.Query{Task: a, Proposal: p, Evidence: ev}
				require.Equal(t, predict(t, newEmbedded(t, cfg), q), predict(t, shared, q), "round %d context %d", round, i)
			}
		}
	}
}

func ExampleEmbedded() {
	// One task family, σ_e = 0.004 bits per byte; two real records of
	// doubling the learning rate on a sibling task.
	t1 := records.Task{ID: "t1", Family: "ar", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1.3, SeedNoise: 0.004}
	t2 := t1
	t2.ID = "t2"
	lr2 := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}
	var rs []records.Record
	for seed, gain := range []float64{0.010, 0.014} {
		rs = append(rs, records.Record{Task: t1, Proposal: lr2, Gain: gain, Loss: t1.RefLoss - gain,
			Source: records.Real, Seeds: []uint64{uint64(seed)}})
	}
	ev, _ := records.NewEvidence(rs...)

	m, err := rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	if err != nil {
		panic(err)
	}
	for _, p := range []records.Proposal{lr2, {Mechanism: "lr-scale", Params: map[string]string{"factor": "4"}}, {Mechanism: "warmup"}} {
		pred, _ := m.Predict(context.Background(), rwm.Query{Task: t2, Proposal: p, Evidence: ev})
		fmt.Printf("%-22s gain %+.4f  q10 %+.4f  q90 %+.4f\n", p.Key(), pred.Gain, pred.Low, pred.High)
	}
	// Output:
	// lr-scale{factor=2}     gain +0.0092  q10 -0.0017  q90 +0.0200
	// lr-scale{factor=4}     gain +0.0090  q10 -0.0021  q90 +0.0200
	// warmup{}               gain +0.0041  q10 -0.0111  q90 +0.0194
}

func TestClipSigmasHandDerived(t *testing.T) {
	// One record at the query's own task and proposal, in exact() (k =
	// amp² = 6.25, noise s² = 1, prior mean 0): the posterior mean is
	// k/(k + s²)·y. A gain of 20 σ_e predicts 6.25/7.25·20 unclipped and
	// 6.25/7.25·6 with ClipSigmas 6; an infeasible record counts
	// InfeasibleSigmas −6, clipped to −3 with ClipSigmas 3.
	a, p := task("a", "fam", records.BitsPerByte), prop("lr-scale", "factor", "2")
	q := func(cfg rwm.EmbeddedConfig, r records.Record) float64 {
		return predict(t, newEmbedded(t, cfg), rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, r)}).Gain / a.SeedNoise
	}
	big := real(a, p, 20, 1)
	bad := records.Record{Task: a, Proposal: p, Infeasible: "out of memory", Source: records.Real, Seeds: []uint64{1}}
	cfg := exact()
	require.InDelta(t, 6.25/7.25*20, q(cfg, big), 1e-9)
	require.InDelta(t, 6.25/7.25*-6, q(cfg, bad), 1e-9)
	cfg.ClipSigmas = 6
	require.InDelta(t, 6.25/7.25*6, q(cfg, big), 1e-9)
	require.InDelta(t, 6.25/7.25*-6, q(cfg, bad), 1e-9)
	cfg.ClipSigmas = 3
	require.InDelta(t, 6.25/7.25*3, q(cfg, big), 1e-9)
	require.InDelta(t, 6.25/7.25*-3, q(cfg, bad), 1e-9)
	// The clip is part of the model's ID; no clip leaves the ID as it was.
	require.NotEqual(t, newEmbedded(t, exact()).ID(), newEmbedded(t, cfg).ID())
	cfg.ClipSigmas = 0
	require.Equal(t, newEmbedded(t, exact()).ID(), newEmbedded(t, cfg).ID())
	for _, c := range []float64{-1, math.NaN(), math.Inf(1)} {
		cfg.ClipSigmas = c
		_, err := rwm.NewEmbedded(cfg)
		require.ErrorIs(t, err, rwm.ErrConfig, "clip %g", c)
	}
}
