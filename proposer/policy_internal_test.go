package proposer

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
)

var families = []string{"ar-prose", "ar-code", "diff-prose", "diff-code"}

// randomState draws a valid research state whose history instantiates
// random cards of cat (and, now and then, the no-change or an unknown
// mechanism).
func randomState(rng *rand.Rand, cat []records.Card) records.State {
	fam := families[rng.IntN(len(families))]
	metric := records.BitsPerByte
	if fam[:4] == "diff" {
		metric = records.NatsPerToken
	}
	task := records.Task{ID: fam + "-task", Family: fam, Split: records.Train, Metric: metric,
		RefLoss: 2, SeedNoise: 0.01, Budget: rng.IntN(3000)}
	s := records.State{Task: task}
	for range rng.IntN(records.MaxHistory + 1) {
		var pr records.Proposal
		switch u := rng.IntN(10); {
		case u == 0:
			pr = records.Proposal{Mechanism: records.NoChange}
		case u == 1:
			pr = records.Proposal{Mechanism: "unknown-mechanism"}
		default:
			c := cat[rng.IntN(len(cat))]
			pr = records.Proposal{Mechanism: c.Mechanism, Params: map[string]string{}}
			for _, ps := range c.Params {
				pr.Params[ps.Name] = ps.Choices[rng.IntN(len(ps.Choices))]
			}
		}
		r := records.Record{Task: task, Proposal: pr, Gain: rng.NormFloat64() * 0.01, Source: records.Synthetic}
		if rng.IntN(6) == 0 {
			r.Gain, r.Infeasible = 0, "diverged"
		}
		s.History = append(s.History, r)
	}
	return s
}

func newRandomPolicy(t *testing.T, cfg PolicyConfig, seed uint64) *Policy {
	t.Helper()
	p, err := NewPolicy(SyntheticCatalogue(24), cfg, rand.New(rand.NewPCG(seed, 1)))
	require.NoError(t, err)
	return p
}

// checkGradient compares grad with central differences of f at the
// parameters where grad is non-zero (250 of them, drawn with rng, when
// there are more) and at 150 random others (where the difference must
// vanish too).
func checkGradient(t *testing.T, p *Policy, f func() float64, grad []float64, rng *rand.Rand) {
	t.Helper()
	idx := []int{}
	for i, g := range grad {
		if g != 0 {
			idx = append(idx, i)
		}
	}
	require.NotEmpty(t, idx, "gradient is identically zero")
	if len(idx) > 250 {
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		idx = idx[:250]
	}
	for range 150 {
		idx = append(idx, rng.IntN(len(grad)))
	}
	requireFiniteDifferences(t, p, f, grad, idx, 1e-6, 1e-5)
}

// dapoLoss returns the DAPO loss's result and gradient on batch, and the
// loss as a function of p's parameters; the batch must exercise the clip.
func dapoLoss(t *testing.T, p *Policy, batch []Item) (dapo.Result, []float64, func() float64) {
	t.Helper()
	_, _, res, grad, err := p.dapoGrad(context.Background(), batch)
	require.NoError(t, err)
	require.Positive(t, res.ClipFrac, "the batch should exercise the clip")
	return res, grad, func() float64 {
		_, _, r, _, err := p.dapoGrad(context.Background(), batch)
		require.NoError(t, err)
		return r.Loss
	}
}

// centralDifference is (f(θ + h·e_i) − f(θ − h·e_i)) / 2h with h = 1e-6,
// θ restored after.
func centralDifference(p *Policy, f func() float64, i int) float64 {
	const h = 1e-6
	old := p.theta[i]
	p.theta[i] = old + h
	fp := f()
	p.theta[i] = old - h
	fm := f()
	p.theta[i] = old
	return (fp - fm) / (2 * h)
}

// requireFiniteDifferences requires grad[i] within abs + rel·|fd| of the
// central difference fd of f at every parameter i of idx.
func requireFiniteDifferences(t *testing.T, p *Policy, f func() float64, grad []float64, idx []int, abs, rel float64) {
	t.Helper()
	for _, i := range idx {
		fd := centralDifference(p, f, i)
		require.InDelta(t, fd, grad[i], abs+rel*math.Abs(fd), "parameter %d: finite difference %g, analytic %g", i, fd, grad[i])
	}
}

func TestLogProbGradientMatchesFiniteDifferences(t *testing.T) {
	// ∂ log π(k)/∂u_j = (1[j=k] − π_j)/T for logits u at temperature T.
	for _, temp := range []float64{1, 0.7, 2.5} {
		t.Run(fmt.Sprintf("T=%g", temp), func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			cfg.InitStd, cfg.Temperature, cfg.NoChange = 0.5, temp, true
			cfg.DescriptorBuckets = 32 // the descriptor block's weights are checked too
			p := newRandomPolicy(t, cfg, 11)
			rng := rand.New(rand.NewPCG(12, 13))
			for trial := range 8 {
				s := randomState(rng, p.cat)
				smp, err := p.Propose(context.Background(), s, 1, rng)
				require.NoError(t, err)
				toks, err := p.lay.encode(smp[0])
				require.NoError(t, err)
				state := p.lay.stateFeatures(s, cfg.FamilyBuckets)
				f, grad, _ := weightedLogProb(p, state, toks, temp, rng)
				t.Logf("trial %d: %d tokens %v", trial, len(toks), smp[0].Tokens)
				checkGradient(t, p, f, grad, rng)
			}
		})
	}
}

// dapoBatch samples a batch from p and sets old log-probs away from the
// current ones by offsets chosen so that ratios ρ = exp(new − old) are
// 1.82, 1.105, 1, 0.905 or 0.61: inside and outside the clip range
// [1 − 0.2, 1 + 0.28] but away from its kinks, where the loss is not
// differentiable.
func dapoBatch(t *testing.T, p *Policy, rng *rand.Rand, n int) []Item {
	t.Helper()
	offsets := []float64{-0.6, -0.1, 0, 0.1, 0.5}
	var items []Item
	for len(items) < n {
		s := randomState(rng, p.cat)
		smp, err := p.Propose(context.Background(), s, 4, rng)
		require.NoError(t, err)
		for _, x := range smp {
			for i, lp := range x.LogProbs {
				old := lp + offsets[rng.IntN(len(offsets))]
				if old > 0 {
					old = lp
				}
				x.LogProbs[i] = old
			}
			items = append(items, Item{State: s, Sample: x, Advantage: rng.NormFloat64()})
		}
	}
	return items
}

func TestDAPOLossGradientMatchesFiniteDifferences(t *testing.T) {
	// METHOD.md §1 Policy optimisation: the token-level clipped surrogate;
	// dapo gives ∂loss/∂new log-prob, the policy chains it to θ.
	dual := dapo.DefaultLossConfig()
	dual.DualClip = 3
	seqMean := dapo.DefaultLossConfig()
	seqMean.Aggregation = dapo.SeqMeanTokenMean
	for name, lc := range map[string]dapo.LossConfig{"default": dapo.DefaultLossConfig(), "dual-clip": dual, "seq-mean": seqMean} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			cfg.InitStd, cfg.Loss = 0.5, lc
			p := newRandomPolicy(t, cfg, 21)
			rng := rand.New(rand.NewPCG(22, 23))
			batch := dapoBatch(t, p, rng, 16)
			res, grad, f := dapoLoss(t, p, batch)
			require.InDelta(t, res.Loss, f(), 0)
			checkGradient(t, p, f, grad, rng)
		})
	}
}

func TestUniformPolicyLogProbs(t *testing.T) {
	// With zero weights every head is uniform: log π = −log(number of
	// options). card-03 has parameters p0 (2+3 mod 4 = 5 choices), p1
	// (2+4 mod 4 = 2) and p2 (2+5 mod 4 = 3) among 24 cards.
	p, err := NewPolicy(SyntheticCatalogue(24), DefaultPolicyConfig(), nil)
	require.NoError(t, err)
	s := randomState(rand.New(rand.NewPCG(1, 1)), p.cat)
	smp := Sample{Proposal: records.Proposal{Mechanism: "card-03", Params: map[string]string{"p0": "2.5", "p1": "b", "p2": "1"}}}
	got, err := p.Score(context.Background(), s, smp)
	require.NoError(t, err)
	require.InDeltaSlice(t, []float64{-math.Log(24), -math.Log(5), -math.Log(2), -math.Log(3)}, got, 1e-12)

	// Supervise reports the mean NLL (log 24 + log 5 + log 2 + log 3)/4
	// and the mean entropy, equal to it for uniform heads.
	st, err := p.Supervise(context.Background(), []Item{{State: s, Sample: smp}})
	require.NoError(t, err)
	want := (math.Log(24) + math.Log(5) + math.Log(2) + math.Log(3)) / 4
	require.InDelta(t, want, st.Loss, 1e-12)
	require.InDelta(t, want, st.Entropy, 1e-12)
	require.Equal(t, 4, st.Tokens)
}

func TestFirstAdamStepIsSignedLR(t *testing.T) {
	// Adam (Kingma and Ba 2015): after one step m̂ = g and v̂ = g², so every
	// parameter moves by −α·g/(|g| + ε).
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.2
	p := newRandomPolicy(t, cfg, 31)
	batch := dapoBatch(t, p, rand.New(rand.NewPCG(32, 33)), 16)
	_, _, _, grad, err := p.dapoGrad(context.Background(), batch)
	require.NoError(t, err)
	before := append([]float64(nil), p.theta...)
	_, err = p.Update(context.Background(), batch)
	require.NoError(t, err)
	for i, g := range grad {
		want := before[i] - cfg.Adam.LR*g/(math.Abs(g)+cfg.Adam.Eps)
		require.InDelta(t, want, p.theta[i], 1e-12, "parameter %d", i)
	}

	// Second step: m = β₁(1−β₁)g₁ + (1−β₁)g₂, v = β₂(1−β₂)g₁² + (1−β₂)g₂²,
	// step α·(m/(1−β₁²))/(√(v/(1−β₂²)) + ε).
	_, _, _, grad2, err := p.dapoGrad(context.Background(), batch)
	require.NoError(t, err)
	before = append(before[:0], p.theta...)
	_, err = p.Update(context.Background(), batch)
	require.NoError(t, err)
	a := cfg.Adam
	for i := range grad {
		m := a.Beta1*(1-a.Beta1)*grad[i] + (1-a.Beta1)*grad2[i]
		v := a.Beta2*(1-a.Beta2)*grad[i]*grad[i] + (1-a.Beta2)*grad2[i]*grad2[i]
		want := before[i]
		if m != 0 {
			want -= a.LR * (m / (1 - a.Beta1*a.Beta1)) / (math.Sqrt(v/(1-a.Beta2*a.Beta2)) + a.Eps)
		}
		require.InDelta(t, want, p.theta[i], 1e-12, "parameter %d", i)
	}
}

func TestBudgetBucket(t *testing.T) {
	tests := []struct{ budget, want int }{
		{0, 0}, {-5, 0}, {1, 1}, {2, 2}, {3, 2}, {4, 3}, {300, 9}, {1 << 14, 15}, {1 << 15, 16}, {1 << 40, 16},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, budgetBucket(tt.budget), "budget %d", tt.budget)
	}
}

func TestStateFeatures(t *testing.T) {
	cat := SyntheticCatalogue(4)
	p, err := NewPolicy(cat, DefaultPolicyConfig(), nil)
	require.NoError(t, err)
	l := &p.lay
	task := records.Task{ID: "t", Family: "ar-prose", Split: records.Train, Metric: records.NatsPerToken, RefLoss: 1, SeedNoise: 1, Budget: 300}
	rec := func(mech string, gain float64, inf string) records.Record {
		return records.Record{Task: task, Proposal: records.Proposal{Mechanism: mech}, Gain: gain, Infeasible: inf, Source: records.Real}
	}
	s := records.State{Task: task, History: []records.Record{
		rec("card-02", 0.1, ""), rec("card-02", 0.3, ""), rec("none", 0, ""), rec("mystery", -1, ""), rec("card-00", 0, "diverged"),
	}}
	got := l.stateFeatures(s, 32)
	// 4 cards → slots 0..3, no-change slot 4, unknown slot 5.
	fam := got[0]
	require.GreaterOrEqual(t, fam, l.famOff)
	require.Less(t, fam, l.famOff+32)
	want := []int{
		fam,
		l.metricOff + 1, // nats per token
		l.budgetOff + 9, // 1 + ⌊log₂ 300⌋
		l.histLen + 5,   // five records
		l.histSet + 2*3 + outPositive,
		l.histSet + 4*3 + outNonPositive,
		l.histSet + 5*3 + outNonPositive,
		l.histSet + 0*3 + outInfeasible,
		l.histLast + 0*3 + outInfeasible,
	}
	require.Equal(t, want, got)
	// The family feature depends only on the canonical family name.
	s.Task.Family = "  AR-Prose "
	require.Equal(t, fam, l.stateFeatures(s, 32)[0])
}

func TestNewPolicyRejects(t *testing.T) {
	good := SyntheticCatalogue(3)
	edit := func(f func(c []records.Card) []records.Card) []records.Card { return f(cloneCatalogue(good)) }
	tests := []struct {
		name string
		cat  []records.Card
	}{
		{"empty", nil},
		{"empty mechanism", edit(func(c []records.Card) []records.Card { c[0].Mechanism = " "; return c })},
		{"duplicate mechanism", edit(func(c []records.Card) []records.Card { c[1].Mechanism = "CARD-00"; return c })},
		{"no-change card", edit(func(c []records.Card) []records.Card { c[0].Mechanism = records.NoChange; return c })},
		{"no choices", edit(func(c []records.Card) []records.Card { c[1].Params[0].Choices = nil; return c })},
		{"duplicate choice", edit(func(c []records.Card) []records.Card {
			c[1].Params[0].Choices = []string{"0.5", "5e-1"}
			return c
		})},
		{"duplicate parameter", edit(func(c []records.Card) []records.Card {
			c[2].Params[1].Name = "P0"
			return c
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.cat, DefaultPolicyConfig(), nil)
			require.ErrorIs(t, err, ErrCatalogue)
		})
	}
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.1
	_, err := NewPolicy(good, cfg, nil)
	require.ErrorIs(t, err, ErrConfig, "InitStd > 0 without an rng")
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultPolicyConfig().Validate())
	tests := []struct {
		name string
		edit func(c *PolicyConfig)
	}{
		{"zero temperature", func(c *PolicyConfig) { c.Temperature = 0 }},
		{"NaN temperature", func(c *PolicyConfig) { c.Temperature = math.NaN() }},
		{"no family buckets", func(c *PolicyConfig) { c.FamilyBuckets = 0 }},
		{"negative init", func(c *PolicyConfig) { c.InitStd = -1 }},
		{"zero LR", func(c *PolicyConfig) { c.Adam.LR = 0 }},
		{"beta1 = 1", func(c *PolicyConfig) { c.Adam.Beta1 = 1 }},
		{"beta2 < 0", func(c *PolicyConfig) { c.Adam.Beta2 = -0.1 }},
		{"zero eps", func(c *PolicyConfig) { c.Adam.Eps = 0 }},
		{"bad loss", func(c *PolicyConfig) { c.Loss.EpsLow = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultPolicyConfig()
			tt.edit(&c)
			require.ErrorIs(t, c.Validate(), ErrConfig)
		})
	}
}

func TestZeroAdvantagesChangeNothing(t *testing.T) {
	// METHOD.md §1 Policy optimisation: ℓ = −min(ρA, clip(ρ)A) is 0 with a
	// zero gradient when A = 0, so Adam's moments stay 0 and θ is unmoved;
	// the k3 KL estimate is then (ρ − 1) − log ρ with ρ = π_new/π_old.
	cfg := DefaultPolicyConfig()
	cfg.InitStd = 0.3
	p := newRandomPolicy(t, cfg, 41)
	batch := dapoBatch(t, p, rand.New(rand.NewPCG(42, 43)), 16)
	want := 0.0
	n := 0
	for i := range batch {
		batch[i].Advantage = 0
		cur, err := p.Score(context.Background(), batch[i].State, batch[i].Sample)
		require.NoError(t, err)
		for j, lp := range cur {
			d := lp - batch[i].Sample.LogProbs[j]
			want += math.Exp(d) - 1 - d
			n++
		}
	}
	before := append([]float64(nil), p.theta...)
	st, err := p.Update(context.Background(), batch)
	require.NoError(t, err)
	require.Equal(t, before, p.theta)
	require.Zero(t, st.Loss)
	require.Equal(t, n, st.Tokens)
	require.InDelta(t, want/float64(n), st.KL, 1e-12)
	require.Positive(t, st.KL, "old log-probs were shifted, so KL(old‖new) > 0")
}

func TestDescriptionFeatures(t *testing.T) {
	// Hashed words of the task description: distinct, sorted, inside the
	// block; numbers stay whole ("0.008" and "8e-3" are words).
	l := layout{descOff: 100, descN: 64}
	hash := func(w string) int {
		h := fnv.New64a()
		h.Write([]byte(w))
		return 100 + int(h.Sum64()%64)
	}
	want := map[int]bool{}
	for _, w := range []string{"adam", "lr", "0.008", "batch", "32", "8e-3"} {
		want[hash(w)] = true
	}
	got := l.descriptionFeatures("Adam lr 0.008, batch 32; Adam LR 8e-3.")
	require.Len(t, got, len(want))
	require.True(t, sort.IntsAreSorted(got))
	for _, f := range got {
		require.True(t, want[f], "feature %d", f)
		require.GreaterOrEqual(t, f, 100)
		require.Less(t, f, 164)
	}
	require.NotEqual(t, l.descriptionFeatures("lr 0.008"), l.descriptionFeatures("lr 0.002"))
	require.Empty(t, l.descriptionFeatures(""))
	require.Empty(t, (&layout{descOff: 100}).descriptionFeatures("lr 0.008"), "0 buckets = off")
}

func TestDescriptorBin(t *testing.T) {
	// ⌊4·sign(v)·log₂(1 + |v|)⌋, hand-computed.
	for _, tc := range []struct {
		v    float64
		want int64
	}{
		{0, 0}, {1, 4}, {-1, -4}, {3, 8}, {-3, -8}, {0.1, 0}, {0.2, 1},
		{63, 24}, {127, 28}, {-2.5, -8}, {-2, -7}, // log₂3.5·4 = 7.23 → −8; log₂3·4 = 6.34 → −7
	} {
		require.Equal(t, tc.want, descriptorBin(tc.v), "v = %g", tc.v)
	}
}

func TestDescriptorFeatures(t *testing.T) {
	l := layout{dscOff: 200, dscN: 1 << 12}
	d := map[string]float64{"log10_lr": -2.5, "width": 64, "objective_ar": 1}
	got := l.descriptorFeatures(d)
	require.Len(t, got, 3, "3 descriptors, 4096 buckets: no collision for these names")
	require.True(t, sort.IntsAreSorted(got))
	for _, f := range got {
		require.GreaterOrEqual(t, f, 200)
		require.Less(t, f, 200+1<<12)
	}
	require.Equal(t, got, l.descriptorFeatures(maps.Clone(d)), "map order does not matter")
	hot := maps.Clone(d)
	hot["log10_lr"] = -1.5
	require.NotEqual(t, got, l.descriptorFeatures(hot), "a learning rate 10× hotter is another bin")
	near := maps.Clone(d)
	near["width"] = 65
	require.Equal(t, got, l.descriptorFeatures(near), "widths 64 and 65 share a bin")
	require.Empty(t, (&layout{dscOff: 200}).descriptorFeatures(d), "0 buckets = off")
	require.Empty(t, l.descriptorFeatures(nil))
}

func TestDescriptorFeatureIsItsBinsBucket(t *testing.T) {
	// A descriptor turns on exactly the bucket FNV-1a(name, 0, bin) of its
	// quarter-octave bin: width 64 is bin ⌊4·log₂65⌋ = 24; a non-finite
	// value has the one bin math.MinInt64.
	bucket := func(l layout, name string, bin int64) int {
		var buf [8]byte
		h := fnv.New64a()
		h.Write([]byte(name))
		h.Write([]byte{0})
		binary.LittleEndian.PutUint64(buf[:], uint64(bin))
		h.Write(buf[:])
		return l.dscOff + int(h.Sum64()%uint64(l.dscN))
	}
	l := layout{dscOff: 10, dscN: 1 << 14}
	require.Equal(t, int64(24), descriptorBin(64))
	require.Equal(t, []int{bucket(l, "width", 24)}, l.descriptorFeatures(map[string]float64{"width": 64}))
	require.Equal(t, []int{bucket(l, "x", math.MinInt64)}, l.descriptorFeatures(map[string]float64{"x": math.Inf(1)}))
	two := l.descriptorFeatures(map[string]float64{"width": 64, "log10_lr": -2})
	want := []int{bucket(l, "width", 24), bucket(l, "log10_lr", descriptorBin(-2))}
	sort.Ints(want)
	require.Equal(t, want, two)
}

// weightedLogProb returns f = Σ_t w_t·log π(tok_t) of one sequence with
// random weights w drawn from rng, its analytic gradient from backward,
// and the forward pass the gradient came from: what the finite-difference
// gradient tests compare.
func weightedLogProb(p *Policy, state []int, toks []int, temp float64, rng *rand.Rand) (f func() float64, grad []float64, ps pass) {
	w := make([]float64, len(toks))
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	f = func() float64 {
		var v float64
		ps := p.forward(state, toks, temp)
		for i, lp := range ps.tokenLogProbs() {
			v += w[i] * lp
		}
		return v
	}
	grad = make([]float64, p.lay.nParams)
	ps = p.forward(state, toks, temp)
	ps.backward(w, grad)
	return f, grad, ps
}
