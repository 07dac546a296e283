package lab_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

func landscapeTask(id, family string, sigma float64) records.Task {
	return records.Task{ID: id, Family: family, Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: sigma}
}

// handSweep: three tasks (σ_e 0.1 and 0.3 in family f, floor 0.2; 0.2 in
// g), four cards, two seeds; every figure below is worked out by hand.
func handSweep() lab.Sweep {
	g := func(xs ...float64) lab.Cell { return lab.Cell{Gains: xs} }
	return lab.Sweep{
		Tasks: []records.Task{landscapeTask("A", "f", 0.1), landscapeTask("B", "f", 0.3), landscapeTask("C", "g", 0.2)},
		Cards: []string{"x", "y", "z", "w"},
		Cells: [][]lab.Cell{
			{g(0.4, 0.4), g(-0.2, -0.6), {}, {Infeasible: 2}},
			{g(0.3, 0.3), g(0.9, 0.9), g(-0.3, -0.3), g(0, 0)},
			{g(-0.6, -0.6), g(0.4, 0.4), g(0.2, 0.2), g(3, 3)},
		},
	}
}

func TestLandscapeHandWorked(t *testing.T) {
	cfg := lab.DefaultLandscapeConfig()
	cfg.SetSize = 2
	r, err := lab.Landscape(handSweep(), cfg)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"f": 0.2, "g": 0.2}, r.Floor)
	// Robust scores: τ = max(σ_e, floor), each seed clipped to ±6, an
	// infeasible seed −6:
	//   A:  2  −2  ·  −6      B: 1  3  −1  0      C: −3  2  1  6
	nan := math.NaN()
	want := [][]float64{{2, -2, nan, -6}, {1, 3, -1, 0}, {-3, 2, 1, 6}}
	for i := range want {
		for k := range want[i] {
			if math.IsNaN(want[i][k]) {
				require.True(t, math.IsNaN(r.Robust.Scores[i][k]))
				continue
			}
			require.InDelta(t, want[i][k], r.Robust.Scores[i][k], 1e-12, "task %d card %d", i, k)
		}
	}
	// Spearman A–B 0.5 (x, y, w), A–C −1, B–C 0: median 0. Only w is
	// above +2 somewhere and below −2 elsewhere (x reaches exactly 2).
	require.InDelta(t, 0, r.Robust.MedianSpearman, 1e-12)
	require.InDelta(t, 0.25, r.Robust.SignChange, 1e-12)
	// Oracle Avg@2: A (2+0)/2, B (3+1)/2, C (6+2)/2 → 7/3. Card means
	// x 0, y 1, z 0, w 0 → fixed set {y, x} → 0.5.
	require.InDelta(t, 7.0/3, r.Robust.Oracle, 1e-12)
	require.InDelta(t, 0.5, r.Robust.Fixed, 1e-12)
	// Per card, strictly beyond ±2: x (2, 1, −3) one below; y (−2, 3, 2)
	// one above; z (·, −1, 1) none; w (−6, 0, 6) one of each.
	wantCards := []lab.CardStats{{Mean: 0, Below: 1}, {Mean: 1, Above: 1}, {Mean: 0}, {Mean: 0, Above: 1, Below: 1}}
	require.Len(t, r.Robust.Cards, 4)
	for k, w := range wantCards {
		got := r.Robust.Cards[k]
		require.InDelta(t, w.Mean, got.Mean, 1e-12, "card %d", k)
		require.Equal(t, [2]int{w.Above, w.Below}, [2]int{got.Above, got.Below}, "card %d", k)
	}
	require.InDelta(t, 7.0/3-0.5, r.Robust.OracleMinusFixed, 1e-12)
	require.Equal(t, []string{"y", "x"}, r.Robust.FixedSet)
	// Raw (σ_e, no clip): A 4 −4 · −6, B as robust, C −3 2 1 15.
	require.InDelta(t, 0.75, r.Raw.SignChange, 1e-12)
	require.InDelta(t, 12.5/3, r.Raw.Oracle, 1e-12)
	require.InDelta(t, 11.0/6, r.Raw.Fixed, 1e-12)
	require.Equal(t, []string{"w", "x"}, r.Raw.FixedSet)
}

// The held-out figures choose on one seed and score on the other: a card
// that wins on one seed only looks as good as a steady one in sample and
// loses out of sample. Worked by hand (τ = 0.1 everywhere, K = 1):
//
//	P: a 4 −2, b 0.5 0.5, c infeasible ×2      Q: a −2 4, b 1.5 0.5, c −6 −6
//
// In sample: P's best mean is a's 1, Q's a's or b's 1: oracle 1; card means
// a 1, b 0.75, c −6: fixed {a} 1.
// Choosing on seed 1: P → a, scored on seed 2 −2; Q → b, 0.5. On seed 2:
// P → b, 0.5; Q → a, −2. Held-out oracle (−1.5 − 1.5)/4 = −0.75. The fixed
// set is a both ways (seed-1 sums a 2, b 2, tie to the first; seed-2 sums
// a 2, b 1), scored (−2 + 4) and (4 − 2): held-out fixed 4/4 = 1.
func TestLandscapeHeldOutSeeds(t *testing.T) {
	g := func(xs ...float64) lab.Cell { return lab.Cell{Gains: xs} }
	sw := lab.Sweep{
		Tasks: []records.Task{landscapeTask("P", "f", 0.1), landscapeTask("Q", "f", 0.1)},
		Cards: []string{"a", "b", "c"},
		Cells: [][]lab.Cell{
			{g(0.4, -0.2), g(0.05, 0.05), {Infeasible: 2}},
			{g(-0.2, 0.4), g(0.15, 0.05), g(-1, -1)},
		},
	}
	cfg := lab.DefaultLandscapeConfig()
	cfg.SetSize = 1
	r, err := lab.Landscape(sw, cfg)
	require.NoError(t, err)
	for _, st := range []lab.LandscapeStats{r.Robust, r.Raw} {
		require.InDelta(t, 1, st.Oracle, 1e-12)
		require.InDelta(t, 1, st.Fixed, 1e-12)
		require.InDelta(t, -0.75, st.HeldOutOracle, 1e-12)
		require.InDelta(t, 1, st.HeldOutFixed, 1e-12)
		require.InDelta(t, -1.75, st.HeldOutOracleMinusFixed, 1e-12)
	}
	// Raw scores are not clipped: Q's c scores −10 per seed, still never
	// chosen; the robust figures clip it to −6.
	require.InDelta(t, -10, r.Raw.Scores[1][2], 1e-12)
	require.InDelta(t, -6, r.Robust.Scores[1][2], 1e-12)

	// One seed leaves nothing to hold out.
	sw.Cells[0][1] = g(0.05)
	r, err = lab.Landscape(sw, cfg)
	require.NoError(t, err)
	require.True(t, math.IsNaN(r.Robust.HeldOutOracleMinusFixed))
	require.InDelta(t, 1, r.Robust.Oracle, 1e-12)
}

// Identical tasks agree perfectly and leave nothing to an oracle.
func TestLandscapeContextFree(t *testing.T) {
	s := handSweep()
	s.Cells[1], s.Cells[2] = s.Cells[0], s.Cells[0]
	s.Tasks[1].SeedNoise, s.Tasks[2].SeedNoise = 0.1, 0.1
	s.Tasks[2].Family = "f"
	r, err := lab.Landscape(s, lab.DefaultLandscapeConfig())
	require.NoError(t, err)
	require.InDelta(t, 1, r.Robust.MedianSpearman, 1e-12)
	require.InDelta(t, 0, r.Robust.SignChange, 1e-12)
	require.InDelta(t, 0, r.Robust.OracleMinusFixed, 1e-12)
}

func TestLandscapeErrors(t *testing.T) {
	for name, edit := range map[string]func(*lab.Sweep, *lab.LandscapeConfig){
		"one task":   func(s *lab.Sweep, _ *lab.LandscapeConfig) { s.Tasks, s.Cells = s.Tasks[:1], s.Cells[:1] },
		"ragged":     func(s *lab.Sweep, _ *lab.LandscapeConfig) { s.Cells[1] = s.Cells[1][:2] },
		"nan gain":   func(s *lab.Sweep, _ *lab.LandscapeConfig) { s.Cells[0][0].Gains[0] = math.NaN() },
		"bad task":   func(s *lab.Sweep, _ *lab.LandscapeConfig) { s.Tasks[0].SeedNoise = 0 },
		"set size":   func(_ *lab.Sweep, c *lab.LandscapeConfig) { c.SetSize = 5 },
		"clip":       func(_ *lab.Sweep, c *lab.LandscapeConfig) { c.Clip = 0 },
		"rows":       func(s *lab.Sweep, _ *lab.LandscapeConfig) { s.Cells = s.Cells[:2] },
		"sign sigma": func(_ *lab.Sweep, c *lab.LandscapeConfig) { c.SignSigma = math.NaN() },
	} {
		s, cfg := handSweep(), lab.DefaultLandscapeConfig()
		edit(&s, &cfg)
		_, err := lab.Landscape(s, cfg)
		require.ErrorIs(t, err, lab.ErrLandscape, name)
	}
}

// Size cards are relative to the reference: the representative doubles its
// value (or adds a layer) and the opposite halves it (or removes one), so
// a card means the same change on every task; a result outside the card's
// range skips it. The configurations are derived by hand from the
// reference (hidden 64, embed 16, context 8, batch 128 with 223 steps and
// 22 warm-up steps, 1 layer).
func TestRelativeRepresentative(t *testing.T) {
	byName := map[string]records.Card{}
	for _, c := range lab.Catalogue() {
		byName[c.Mechanism] = c
	}
	spec := lab.SuiteV2(1).Validation[0]
	c := &spec.Config
	c.Hidden, c.Embed, c.Context, c.Batch, c.Layers, c.Activation = 64, 16, 8, 128, 1, "tanh"
	require.Equal(t, [2]int{223, 22}, [2]int{c.Steps, c.Warmup})
	ref := spec.Config
	type edit func(c *model.Config)
	for _, tc := range []struct {
		card, rep string
		repEdit   edit
		opp       string // "" when the card has no opposite
		oppEdit   edit
	}{
		{"width", "width factor=2", func(c *model.Config) { c.Hidden = 128 },
			"width factor=0.5", func(c *model.Config) { c.Hidden = 32 }},
		{"embed-dim", "embed-dim factor=2", func(c *model.Config) { c.Embed = 32 },
			"embed-dim factor=0.5", func(c *model.Config) { c.Embed = 8 }},
		{"context", "context factor=2", func(c *model.Config) { c.Context = 16 },
			"context factor=0.5", func(c *model.Config) { c.Context = 4 }},
		// Fixed tokens: 223·128/256 = 111.5 → 112 steps, warm-up 11;
		// 223·2 = 446 steps, warm-up 44.
		{"batch-size", "batch-size factor=2", func(c *model.Config) { c.Batch, c.Steps, c.Warmup = 256, 112, 11 },
			"batch-size factor=0.5", func(c *model.Config) { c.Batch, c.Steps, c.Warmup = 64, 446, 44 }},
		{"batch-size-sqrt-lr", "batch-size-sqrt-lr factor=2", func(c *model.Config) {
			c.Batch, c.Steps, c.Warmup, c.LR = 256, 112, 11, c.LR*math.Sqrt2
		}, "batch-size-sqrt-lr factor=0.5", func(c *model.Config) {
			c.Batch, c.Steps, c.Warmup, c.LR = 64, 446, 44, c.LR*math.Sqrt(0.5)
		}},
		{"depth", "depth add=1", func(c *model.Config) { c.Layers = 2 },
			"depth add=-1", func(c *model.Config) { c.Layers = 0 }},
		{"residual-depth", "residual-depth add=1", func(c *model.Config) { c.Layers, c.Residual = 2, true }, "", nil},
		{"deep-normed", "deep-normed add=1 norm=rmsnorm", func(c *model.Config) { c.Layers, c.Residual, c.Norm = 2, true, "rmsnorm" }, "", nil},
		{"lr-scale", "lr-scale factor=2", func(c *model.Config) { c.LR *= 2 },
			"lr-scale factor=0.5", func(c *model.Config) { c.LR *= 0.5 }},
		{"model-scale", "model-scale factor=2", func(c *model.Config) { c.Hidden, c.Embed = 128, 32 },
			"model-scale factor=0.5", func(c *model.Config) { c.Hidden, c.Embed = 32, 8 }},
		{"dropout", "dropout rate=0.1", func(c *model.Config) { c.Dropout = 0.1 }, "", nil},
	} {
		check := func(p records.Proposal, text string, e edit) {
			require.Equal(t, text, cards.Render(p), tc.card)
			got, err := lab.ApplyProposal(ref, p)
			require.NoError(t, err, text)
			want := ref
			e(&want)
			require.InDelta(t, want.LR, got.LR, 1e-15*want.LR, text)
			want.LR = got.LR
			require.Equal(t, want, got, text)
		}
		p, ok := lab.RelativeRepresentative(spec, byName[tc.card])
		require.True(t, ok, tc.card)
		check(p, tc.rep, tc.repEdit)
		p, ok = lab.RelativeOpposite(spec, byName[tc.card])
		require.Equal(t, tc.opp != "", ok, tc.card)
		label, hasLabel := lab.OppositeLabel(byName[tc.card])
		require.Equal(t, ok, hasLabel, tc.card)
		if ok {
			check(p, tc.opp, tc.oppEdit)
			require.NotEmpty(t, label)
		}
	}
	for card, want := range map[string]string{"width": "width ×½", "depth": "depth −1", "lr-scale": "lr-scale factor=0.5"} {
		got, ok := lab.OppositeLabel(byName[card])
		require.True(t, ok)
		require.Equal(t, want, got)
	}
	choices := func(card string) []string {
		var got []string
		if p, ok := lab.RelativeRepresentative(spec, byName[card]); ok {
			got = append(got, cards.Render(p))
		}
		if p, ok := lab.RelativeOpposite(spec, byName[card]); ok {
			got = append(got, cards.Render(p))
		}
		return got
	}
	// Out of the card's range: ×2 of a width of 512 (the representative
	// does not fall back to ×½, the opposite direction), ×½ of a width of 8,
	// of a batch of 8 and of a context of 2, a layer fewer than none.
	c.Hidden, c.Batch, c.Context, c.Layers = 512, 8, 2, 0
	require.Equal(t, []string{"width factor=0.5"}, choices("width"))
	require.Equal(t, []string{"batch-size factor=2"}, choices("batch-size"))
	require.Equal(t, []string{"context factor=2"}, choices("context"))
	require.Equal(t, []string{"depth add=1"}, choices("depth"))
	c.Hidden = 8
	require.Equal(t, []string{"width factor=2"}, choices("width"))
	// ×½ divides as integers: a context of 5 becomes 2.
	c.Context = 5
	p, ok := lab.RelativeOpposite(spec, byName["context"])
	require.True(t, ok)
	got, err := lab.ApplyProposal(spec.Config, p)
	require.NoError(t, err)
	require.Equal(t, 2, got.Context)
	spec.Config.Activation = "gelu" // the first activation choice is a no-op
	p, ok = lab.RelativeRepresentative(spec, byName["activation"])
	require.True(t, ok)
	require.Equal(t, "activation name=relu", cards.Render(p))
}

func TestChanges(t *testing.T) {
	spec := lab.SuiteV2(1).Validation[0]
	parse := func(s string) records.Proposal {
		p, err := lab.ParseProposal(s)
		require.NoError(t, err)
		return p
	}
	require.True(t, lab.Changes(spec, parse("width factor=2")))
	require.True(t, lab.Changes(spec, parse("width factor=0.5")))
	require.False(t, lab.Changes(spec, parse("optimizer name="+spec.Config.Optimizer)), "a no-op")
	spec.Config.Layers = 6
	require.False(t, lab.Changes(spec, parse("depth add=1")), "7 layers is out of the card's range")
	require.True(t, lab.Changes(spec, parse("depth add=-1")))
}
