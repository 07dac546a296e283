package dapo

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func approx(tol float64) cmp.Option { return cmpopts.EquateApprox(0, tol) }

func TestAdvantagesReference(t *testing.T) {
	// METHOD.md §1 Policy optimisation: mean-centred (LM2LM) or z-scored
	// with the n−1 std (verl, TRL) or the population std (WMRL), with ε.
	tests := []struct {
		name    string
		rewards []float64
		norm    Norm
		eps     float64
		want    []float64
		tol     float64
	}{
		// mean .25, n−1 var .75/3 = .25, std .5 → .75/.500001.
		{"zscore one-hot", []float64{1, 0, 0, 0}, ZScore, 1e-6, []float64{1.499997, -0.499999, -0.499999, -0.499999}, 1e-6},
		{"mean-centred one-hot", []float64{1, 0, 0, 0}, MeanCentered, 1e-6, []float64{0.75, -0.25, -0.25, -0.25}, 1e-15},
		// mean .020025, n−1 std 5e-5 → 7.5e-5/(5e-5+ε).
		{"zscore tiny eps 1e-6", []float64{0.0201, 0.02, 0.02, 0.02}, ZScore, 1e-6, []float64{1.470588, -0.490196, -0.490196, -0.490196}, 1e-6},
		{"zscore tiny eps 1e-4", []float64{0.0201, 0.02, 0.02, 0.02}, ZScore, 1e-4, []float64{0.5, -0.166667, -0.166667, -0.166667}, 1e-6},
		// mean .5, population var .085.
		{"population eps 1e-4", []float64{.1, .4, .9, .6}, ZScorePopulation, 1e-4,
			[]float64{-1.3715182542598654, -0.34287956356496624, 1.3715182542598654, 0.34287956356496624}, 1e-12},
		{"single reward zscore", []float64{3}, ZScore, 1e-6, []float64{0}, 0},
		{"single reward population", []float64{3}, ZScorePopulation, 1e-6, []float64{0}, 0},
		{"empty", nil, ZScore, 1e-6, []float64{}, 0},
		{"flat zscore", []float64{2, 2, 2}, ZScore, 1e-6, []float64{0, 0, 0}, 0},
		// std + ε = 0: 0, not 0/0 = NaN.
		{"flat zscore eps 0", []float64{2, 2, 2}, ZScore, 0, []float64{0, 0, 0}, 0},
		{"flat population eps 0", []float64{-1, -1}, ZScorePopulation, 0, []float64{0, 0}, 0},
		{"single reward eps 0", []float64{3}, ZScore, 0, []float64{0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Advantages(tt.rewards, tt.norm, tt.eps)
			if diff := cmp.Diff(tt.want, got, approx(tt.tol)); diff != "" {
				t.Errorf("Advantages() mismatch (-want +got):\n%s", diff)
			}
			dst := append([]float64(nil), tt.rewards...)
			AdvantagesInto(dst, dst, tt.norm, tt.eps) // aliasing allowed
			if diff := cmp.Diff(got, dst, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("AdvantagesInto() differs from Advantages:\n%s", diff)
			}
		})
	}
	require.Panics(t, func() { Advantages([]float64{1, 2}, Norm(7), 0) })
	require.Panics(t, func() { AdvantagesInto(make([]float64, 1), []float64{1, 2}, ZScore, 0) })
}

func TestAdvantagesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.SliceOfN(rapid.Float64Range(-10, 10), 1, 32).Draw(t, "r")
		// Mean-centred advantages sum to 0 (METHOD.md §1 Policy optimisation).
		var sum, scale float64
		for _, a := range Advantages(r, MeanCentered, 0) {
			sum += a
			scale += math.Abs(a)
		}
		if math.Abs(sum) > 1e-12*(1+scale) {
			t.Fatalf("mean-centred advantages sum to %g", sum)
		}
		// Z-scored advantages keep the (weak) order of the rewards.
		z := Advantages(r, ZScorePopulation, 1e-6)
		for i := range r {
			for j := range r {
				if r[i] < r[j] && z[i] > z[j] {
					t.Fatalf("order broken: r %g < %g but z %g ≥ %g", r[i], r[j], z[i], z[j])
				}
			}
		}
	})
}

func TestInformative(t *testing.T) {
	a := 0.1         // a variable: constant arithmetic would be exact
	residue := 7 * a // 0.7000000000000001
	tests := []struct {
		name string
		r    []float64
		tol  float64
		want bool
	}{
		{"float residue is flat", []float64{0.7, residue, 0.7}, 1e-9, false},
		{"exactly flat, tol 0", []float64{0.7, 0.7, 0.7}, 0, false},
		// Residue is flat even with tol 0: 7·0.1 is one ulp (2⁻⁵³ ≈ 1.1e-16)
		// above 0.7, far below 64·2⁻⁵²·0.7 ≈ 9.9e-15.
		{"float residue is flat, tol 0", []float64{0.7, residue, 0.7}, 0, false},
		{"sum residue is flat, tol 0", []float64{0.1 * 3, a + a + a, 0.3}, 0, false},
		// A real difference far above residue is signal with tol 0.
		{"tiny signal, tol 0", []float64{1, 1 + 1e-12}, 0, true},
		{"zeros flat, tol 0", []float64{0, 0}, 0, false},
		{"near zero signal, tol 0", []float64{0, 1e-300}, 0, true},
		{"signal", []float64{0, 1, 0}, 1e-9, true},
		{"below tol", []float64{1, 1 + 1e-12}, 1e-9, false},
		{"above tol", []float64{1, 1 + 1e-6}, 1e-9, true},
		{"single", []float64{1}, 0, false},
		{"empty", nil, 0, false},
		{"nan", []float64{0, math.NaN(), 1}, 1e-9, false},
		{"inf spread", []float64{0, math.Inf(1)}, 1e-9, true},
		{"inf spread, tol 0", []float64{math.Inf(-1), math.Inf(1)}, 0, true},
		{"all inf flat", []float64{math.Inf(1), math.Inf(1)}, 0, false},
	}
	require.NotEqual(t, residue, 0.7) // the residue case is real
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Informative(tt.r, tt.tol))
		})
	}
}

func TestSelect(t *testing.T) {
	// METHOD.md §1: sample more states than needed, drop flat groups, keep the quota.
	groups := [][]float64{{1, 1}, {0, 1}, {2, 2, 2}, {0, 3}, {5, 4}, {1, 2}}
	kept, rep, err := Select(groups, 2, 1e-9)
	require.NoError(t, err)
	require.Equal(t, []int{1, 3}, kept)
	require.Equal(t, Report{Draws: 6, Kept: 2, Flat: 2, Surplus: 2}, rep)

	kept, rep, err = Select(groups, 5, 1e-9)
	require.ErrorIs(t, err, ErrShortBatch)
	require.Equal(t, []int{1, 3, 4, 5}, kept)
	require.Equal(t, Report{Draws: 6, Kept: 4, Flat: 2, Short: true}, rep)

	kept, rep, err = Select(groups, 0, 1e-9)
	require.NoError(t, err)
	require.Empty(t, kept)
	require.Equal(t, 4, rep.Surplus)
}

func TestFill(t *testing.T) {
	seq := func(groups ...[]float64) func() ([]float64, bool) {
		i := 0
		return func() ([]float64, bool) {
			if i >= len(groups) {
				return nil, false
			}
			i++
			return groups[i-1], true
		}
	}
	flat, inf := []float64{1, 1}, []float64{0, 1}
	t.Run("fills and stops", func(t *testing.T) {
		calls := 0
		draw := seq(flat, inf, flat, inf, inf, inf)
		kept, rep, err := Fill(2, 100, 1e-9, func() ([]float64, bool) { calls++; return draw() })
		require.NoError(t, err)
		require.Equal(t, []int{1, 3}, kept)
		require.Equal(t, Report{Draws: 4, Kept: 2, Flat: 2}, rep)
		require.Equal(t, 4, calls, "Fill draws no more than needed")
	})
	t.Run("max draws", func(t *testing.T) {
		kept, rep, err := Fill(3, 4, 1e-9, seq(flat, inf, flat, flat, inf, inf))
		require.ErrorIs(t, err, ErrShortBatch)
		require.Equal(t, []int{1}, kept)
		require.Equal(t, Report{Draws: 4, Kept: 1, Flat: 3, Short: true}, rep)
	})
	t.Run("exhausted", func(t *testing.T) {
		kept, rep, err := Fill(3, 100, 1e-9, seq(inf, flat))
		require.True(t, errors.Is(err, ErrShortBatch))
		require.Contains(t, err.Error(), "exhausted")
		require.Equal(t, []int{0}, kept)
		require.Equal(t, Report{Draws: 2, Kept: 1, Flat: 1, Short: true, Exhausted: true}, rep)
	})
	t.Run("zero quota draws nothing", func(t *testing.T) {
		kept, rep, err := Fill(0, 100, 1e-9, func() ([]float64, bool) { panic("drawn") })
		require.NoError(t, err)
		require.Empty(t, kept)
		require.Equal(t, Report{}, rep)
	})
}

func TestLossReference(t *testing.T) {
	// METHOD.md §1 Policy optimisation: token-level clipped surrogate,
	// ε_low 0.2, ε_high 0.28; dual clip 3 for negative advantages.
	cfg := DefaultLossConfig()
	cfg.DualClip = 3
	tests := []struct {
		adv, ratio, want, wantGrad float64
	}{
		{+1, 1.5, -1.28, 0}, // clipped at 1+ε_high
		{+1, 1.25, -1.25, -1.25},
		{+1, 0.5, -0.5, -0.5}, // min picks the unclipped term
		{-1, 0.5, 0.8, 0},     // clipped at 1−ε_low
		{-1, 1.5, 1.5, 1.5},
		{-1, 5, 3, 0}, // dual clip: capped at −c·A
	}
	for _, tt := range tests {
		seq := Sequence{OldLogProbs: []float64{-1}, NewLogProbs: []float64{-1 + math.Log(tt.ratio)}, Advantage: tt.adv}
		loss, grad := Loss(cfg, []Sequence{seq})
		require.InDelta(t, tt.want, loss, 1e-12, "A=%g ρ=%g", tt.adv, tt.ratio)
		require.InDelta(t, tt.wantGrad, grad[0][0], 1e-12, "A=%g ρ=%g", tt.adv, tt.ratio)
		l, d := TokenLoss(cfg, tt.adv, tt.ratio)
		require.InDelta(t, tt.want, l, 1e-12)
		require.InDelta(t, tt.wantGrad/tt.ratio, d, 1e-12)
	}
	// Without the dual clip (−1, 5) costs 5.
	loss, _ := Loss(DefaultLossConfig(), []Sequence{{OldLogProbs: []float64{0}, NewLogProbs: []float64{math.Log(5)}, Advantage: -1}})
	require.InDelta(t, 5, loss, 1e-12)
}

func TestLossAggregation(t *testing.T) {
	// Ratio 1, lengths 2 (A +1) and 4 (A −1): token losses −1,−1,+1,+1,+1,+1.
	seqs := []Sequence{
		{OldLogProbs: []float64{-1, -2}, NewLogProbs: []float64{-1, -2}, Advantage: 1},
		{OldLogProbs: []float64{-1, -1, -1, -1}, NewLogProbs: []float64{-1, -1, -1, -1}, Advantage: -1},
	}
	cfg := DefaultLossConfig()
	loss, grad := Loss(cfg, seqs)
	require.InDelta(t, 1.0/3, loss, 1e-15) // (−2 + 4)/6
	want := [][]float64{{-1.0 / 6, -1.0 / 6}, {1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6}}
	if diff := cmp.Diff(want, grad, approx(1e-15)); diff != "" {
		t.Errorf("token-mean grad (-want +got):\n%s", diff)
	}
	cfg.Aggregation = SeqMeanTokenMean
	loss, grad = Loss(cfg, seqs)
	require.InDelta(t, 0, loss, 1e-15) // (−1 + 1)/2
	want = [][]float64{{-0.25, -0.25}, {0.125, 0.125, 0.125, 0.125}}
	if diff := cmp.Diff(want, grad, approx(1e-15)); diff != "" {
		t.Errorf("seq-mean-token-mean grad (-want +got):\n%s", diff)
	}
	// An empty sequence is not counted by seq-mean-token-mean.
	loss, grad = Loss(cfg, append(seqs, Sequence{Advantage: 5}))
	require.InDelta(t, 0, loss, 1e-15)
	require.Len(t, grad, 3)
	require.Empty(t, grad[2])
}

func TestLossEdges(t *testing.T) {
	loss, grad := Loss(DefaultLossConfig(), nil)
	require.Zero(t, loss)
	require.Empty(t, grad)
	loss, grad = Loss(DefaultLossConfig(), []Sequence{{Advantage: 1}})
	require.Zero(t, loss)
	require.Len(t, grad, 1)
	require.Panics(t, func() {
		Loss(DefaultLossConfig(), []Sequence{{OldLogProbs: []float64{0}, NewLogProbs: nil}})
	})
	require.Panics(t, func() {
		ClipFraction(DefaultLossConfig(), []Sequence{{OldLogProbs: []float64{0}, NewLogProbs: nil}})
	})
}

func TestClipFraction(t *testing.T) {
	cfg := DefaultLossConfig()
	cfg.DualClip = 3
	lg := math.Log
	seqs := []Sequence{
		{OldLogProbs: []float64{0, 0, 0}, NewLogProbs: []float64{lg(1.5), lg(1.1), lg(0.5)}, Advantage: 1}, // 1 ε clip
		{OldLogProbs: []float64{0, 0, 0}, NewLogProbs: []float64{lg(0.5), lg(5), lg(1.2)}, Advantage: -1},  // 1 ε, 1 dual
		{OldLogProbs: []float64{0, 0}, NewLogProbs: []float64{lg(9), lg(0.1)}, Advantage: 0},               // A = 0: none
	}
	require.InDelta(t, 3.0/8, ClipFraction(cfg, seqs), 1e-15)
	r := Evaluate(cfg, seqs)
	require.InDelta(t, 2.0/8, r.ClipFrac, 1e-15)
	require.InDelta(t, 1.0/8, r.DualClipFrac, 1e-15)
	require.Equal(t, 8, r.Tokens)
	require.Zero(t, ClipFraction(cfg, nil))
}

func TestLossGradientFiniteDifferences(t *testing.T) {
	// ∂Loss/∂new_t matches central differences away from the clip kinks.
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		cfg := DefaultLossConfig()
		if trial%2 == 1 {
			cfg.Aggregation = SeqMeanTokenMean
		}
		if trial%3 == 0 {
			cfg.DualClip = 1.6
		}
		seqs := make([]Sequence, 1+rng.IntN(4))
		for i := range seqs {
			n := rng.IntN(5)
			s := Sequence{OldLogProbs: make([]float64, n), NewLogProbs: make([]float64, n), Advantage: rng.NormFloat64()}
			for t := range n {
				s.OldLogProbs[t] = -rng.ExpFloat64()
				s.NewLogProbs[t] = s.OldLogProbs[t] + 0.6*rng.NormFloat64()
			}
			seqs[i] = s
		}
		_, grad := Loss(cfg, seqs)
		const h = 1e-6
		for i := range seqs {
			for tk := range seqs[i].NewLogProbs {
				rho := math.Exp(seqs[i].NewLogProbs[tk] - seqs[i].OldLogProbs[tk])
				near := func(b float64) bool { return math.Abs(rho-b) < 1e-4 }
				if near(1-cfg.EpsLow) || near(1+cfg.EpsHigh) || (cfg.DualClip > 0 && near(cfg.DualClip)) {
					continue // kink
				}
				orig := seqs[i].NewLogProbs[tk]
				seqs[i].NewLogProbs[tk] = orig + h
				up, _ := Loss(cfg, seqs)
				seqs[i].NewLogProbs[tk] = orig - h
				down, _ := Loss(cfg, seqs)
				seqs[i].NewLogProbs[tk] = orig
				fd := (up - down) / (2 * h)
				if math.Abs(fd-grad[i][tk]) > 1e-6*(1+math.Abs(fd)) {
					t.Fatalf("trial %d seq %d token %d: grad %g, finite difference %g", trial, i, tk, grad[i][tk], fd)
				}
			}
		}
	}
}

func TestInverseVarianceWeights(t *testing.T) {
	// METHOD.md §2: w_k ∝ 1/v_k.
	tests := []struct {
		name string
		v    []float64
		want []float64
	}{
		{"two", []float64{1, 4}, []float64{0.8, 0.2}}, // (1, 1/4)/(5/4)
		{"three", []float64{1, 2, 2}, []float64{0.5, 0.25, 0.25}},
		{"zero dominates", []float64{0, 3, 0}, []float64{0.5, 0, 0.5}},
		{"inf ignored", []float64{2, math.Inf(1)}, []float64{1, 0}},
		{"all inf equal", []float64{math.Inf(1), math.Inf(1)}, []float64{0.5, 0.5}},
		{"empty", nil, []float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, InverseVarianceWeights(tt.v), approx(1e-15)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	require.Panics(t, func() { InverseVarianceWeights([]float64{-1}) })
	require.Panics(t, func() { InverseVarianceWeights([]float64{math.NaN()}) })
}

func TestCombine(t *testing.T) {
	// (x_a/v_a + x_w/v_w)/(1/v_a + 1/v_w) with v_a 1, v_w 4: 0.8·x_a + 0.2·x_w.
	got := Combine([][]float64{{1, 2}, {6, -3}}, []float64{1, 4})
	if diff := cmp.Diff([]float64{2, 1}, got, approx(1e-15)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	require.Nil(t, Combine(nil, nil))
	require.Panics(t, func() { Combine([][]float64{{1}}, []float64{1, 2}) })
	require.Panics(t, func() { Combine([][]float64{{1}, {1, 2}}, []float64{1, 2}) })

	a := []float64{1, -2}
	ScaleAdvantages(a, 2)
	require.Equal(t, []float64{2, -4}, a)
}

func TestCombineVarianceIsLower(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical")
	}
	// The combined estimate's variance is 1/(1/v_a + 1/v_w), below both.
	rng := rand.New(rand.NewPCG(9, 9))
	const n = 100000
	var s, ss float64
	for range n {
		x := Combine([][]float64{{rng.NormFloat64()}, {2 * rng.NormFloat64()}}, []float64{1, 4})[0]
		s += x
		ss += x * x
	}
	v := ss/n - (s/n)*(s/n)
	require.InDelta(t, 0.8, v, 0.02) // 1/(1 + 1/4)
}

func TestConfig(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	d := DefaultLossConfig()
	require.Equal(t, LossConfig{EpsLow: 0.2, EpsHigh: 0.28}, d)
	bad := []func(*Config){
		func(c *Config) { c.GroupSize = 1 },
		func(c *Config) { c.Quota = 0 },
		func(c *Config) { c.MaxDraws = 10 },
		func(c *Config) { c.Norm = 9 },
		func(c *Config) { c.Eps = -1 },
		func(c *Config) { c.FlatTol = math.NaN() },
		func(c *Config) { c.Loss.EpsLow = 1 },
		func(c *Config) { c.Loss.EpsHigh = -0.1 },
		func(c *Config) { c.Loss.DualClip = 0.5 },
		func(c *Config) { c.Loss.Aggregation = 5 },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		require.ErrorIs(t, c.Validate(), ErrConfig, "case %d", i)
	}
	require.Equal(t, "token-mean", TokenMean.String())
	require.Equal(t, "seq-mean-token-mean", SeqMeanTokenMean.String())
	require.Equal(t, "z-score", ZScore.String())
	require.Equal(t, "Norm(9)", Norm(9).String())
}

func TestAggregationsAgreeOnEqualLengths(t *testing.T) {
	// With equal lengths, token-mean and seq-mean-token-mean coincide, and
	// Evaluate agrees with Loss.
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "tokens")
		seqs := make([]Sequence, rapid.IntRange(1, 5).Draw(t, "seqs"))
		for i := range seqs {
			seqs[i] = Sequence{
				OldLogProbs: rapid.SliceOfN(rapid.Float64Range(-5, 0), n, n).Draw(t, "old"),
				NewLogProbs: rapid.SliceOfN(rapid.Float64Range(-5, 0), n, n).Draw(t, "new"),
				Advantage:   rapid.Float64Range(-3, 3).Draw(t, "adv"),
			}
		}
		cfg := DefaultLossConfig()
		cfg.DualClip = rapid.SampledFrom([]float64{0, 3}).Draw(t, "c")
		a, ga := Loss(cfg, seqs)
		cfg.Aggregation = SeqMeanTokenMean
		b, gb := Loss(cfg, seqs)
		if math.Abs(a-b) > 1e-12*(1+math.Abs(a)) {
			t.Fatalf("token-mean %g != seq-mean-token-mean %g", a, b)
		}
		if diff := cmp.Diff(ga, gb, approx(1e-12)); diff != "" {
			t.Fatalf("gradients differ:\n%s", diff)
		}
		r := Evaluate(cfg, seqs)
		if r.Loss != b || r.Tokens != n*len(seqs) {
			t.Fatalf("Evaluate %+v disagrees with Loss %g", r, b)
		}
	})
}

func TestTokenLossAtClipBoundaries(t *testing.T) {
	// METHOD.md §1 Policy optimisation, ε_low 0.2, ε_high 0.28, dual clip 3.
	// Exactly on a kink the unclipped term counts as active (the subgradient
	// PyTorch's clamp passes), so ∂ℓ/∂ρ = −A; just past it the clip holds
	// and the derivative is 0. The loss is continuous across each kink.
	cfg := DefaultLossConfig()
	cfg.DualClip = 3
	const h = 1e-9
	tests := []struct {
		name            string
		adv, rho        float64
		wantLoss, wantD float64 // at the kink
		pastRho         float64 // just inside the clipped region
	}{
		{"1+ε_high, A>0", 1, 1.28, -1.28, -1, 1.28 + h},
		{"1−ε_low, A<0", -1, 0.8, 0.8, 1, 0.8 - h},
		{"dual clip c, A<0", -1, 3, 3, 1, 3 + h},
		{"1+ε_high, A=2", 2, 1.28, -2.56, -2, 1.28 + h},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, d := TokenLoss(cfg, tt.adv, tt.rho)
			require.Equal(t, tt.wantLoss, l)
			require.Equal(t, tt.wantD, d)
			lp, dp := TokenLoss(cfg, tt.adv, tt.pastRho)
			require.Zero(t, dp, "clipped past the kink")
			require.InDelta(t, l, lp, 1e-8, "continuous at the kink")
		})
	}
	// A < 0 between 1+ε_high and c is not clipped: ρ·|A|, slope −A.
	l, d := TokenLoss(cfg, -2, 2)
	require.Equal(t, 4.0, l)
	require.Equal(t, 2.0, d)
	// A = 0 contributes nothing anywhere.
	l, d = TokenLoss(cfg, 0, 7)
	require.Zero(t, l)
	require.Zero(t, d)
}

func TestInformativeResidueProperty(t *testing.T) {
	// METHOD.md §1 Policy optimisation: float residue counts as
	// flat for every tol ≥ 0, while a relative spread of 1e-12 is signal.
	rapid.Check(t, func(t *rapid.T) {
		// Residue is relative to the rewards' magnitude; at exactly 0 any
		// non-zero spread is signal, so x stays away from 0.
		x := rapid.Float64Range(1e-3, 10).Draw(t, "x")
		if rapid.Bool().Draw(t, "neg") {
			x = -x
		}
		ulps := rapid.IntRange(0, 8).Draw(t, "ulps")
		y := x
		for range ulps {
			y = math.Nextafter(y, math.Inf(1))
		}
		tol := rapid.SampledFrom([]float64{0, 1e-12, 1e-9}).Draw(t, "tol")
		if Informative([]float64{x, y, x}, tol) {
			t.Fatalf("Informative([%v %v %v], %g) = true, want flat", x, y, x, tol)
		}
		if !Informative([]float64{x, x + 1e-12*math.Abs(x) + 1e-12}, 0) {
			t.Fatalf("spread 1e-12 at %v not informative with tol 0", x)
		}
	})
}
