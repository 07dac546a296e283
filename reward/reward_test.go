package reward

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lm2lm/lm2lm/records"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestDefaultConfig(t *testing.T) {
	// METHOD.md §1 Reward: c = 6, no change −3, δ = 1, λ = 0.3.
	require.Equal(t, Config{Clip: 6, NoOpReward: -3, DupPenalty: 1, DiversityScale: 0.3}, DefaultConfig())
	require.NoError(t, DefaultConfig().Validate())
}

func TestValidate(t *testing.T) {
	mod := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	tests := []struct {
		name string
		cfg  Config
	}{
		{"zero clip", mod(func(c *Config) { c.Clip = 0 })},
		{"nan clip", mod(func(c *Config) { c.Clip = math.NaN() })},
		{"inf clip", mod(func(c *Config) { c.Clip = math.Inf(1) })},
		{"no-op below -clip", mod(func(c *Config) { c.NoOpReward = -7 })},
		{"no-op above clip", mod(func(c *Config) { c.NoOpReward = 6.5 })},
		{"negative dup penalty", mod(func(c *Config) { c.DupPenalty = -1 })},
		{"negative diversity", mod(func(c *Config) { c.DiversityScale = -0.1 })},
		{"pessimism above 1", mod(func(c *Config) { c.Pessimism = 1.5 })},
		{"pessimism nan", mod(func(c *Config) { c.Pessimism = math.NaN() })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrConfig), "%v does not wrap ErrConfig", err)
		})
	}
	require.NoError(t, mod(func(c *Config) { c.DiversityScale = 0; c.Pessimism = 1; c.DupPenalty = 0 }).Validate())
}

func TestNormalise(t *testing.T) {
	// METHOD.md §1 Reward 1: r = clip(ĝ/τ, −c, c).
	tests := []struct {
		name            string
		gain, tau, want float64
	}{
		{"inside", 3, 1.5, 2},
		{"negative inside", -4.5, 1.5, -3},
		{"clipped high", 100, 1, 6},
		{"clipped low", -100, 1, -6},
		{"at the bound", 12, 2, 6},
		{"tau zero positive", 1, 0, 6},
		{"tau zero negative", -1e-9, 0, -6},
		{"tau zero zero gain", 0, 0, 0},
		{"tau nan", 2, math.NaN(), 6},
		{"tau negative", -2, -1, -6},
		{"inf gain", math.Inf(1), 1, 6},
		{"-inf gain", math.Inf(-1), 1, -6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, Normalise(tt.gain, tt.tau, DefaultConfig()), 1e-12)
		})
	}
	require.True(t, math.IsNaN(Normalise(math.NaN(), 1, DefaultConfig())))
}

func TestTaskScale(t *testing.T) {
	// METHOD.md §1 Reward 1: τ_e = max(σ_e, 1.4826·MAD_e).
	nan := math.NaN()
	tests := []struct {
		name  string
		sigma float64
		pred  []float64
		want  float64
	}{
		// median 3, |dev| = [2 1 0 1 97] → MAD 1.
		{"odd count", 0.5, []float64{1, 2, 3, 4, 100}, 1.4826},
		// median 2.5, |dev| = [1.5 .5 .5 1.5] → MAD 1.
		{"even count", 0.5, []float64{4, 1, 3, 2}, 1.4826},
		{"sigma dominates", 2, []float64{1, 2, 3, 4, 100}, 2},
		{"non-finite ignored", 0.5, []float64{1, nan, 2, math.Inf(1), 3, 4, 100}, 1.4826},
		{"no gains", 0.7, nil, 0.7},
		{"one gain", 0.7, []float64{5}, 0.7},
		{"one finite gain", 0.7, []float64{5, nan}, 0.7},
		{"equal gains", 0.7, []float64{5, 5, 5}, 0.7},
		{"nan sigma counts as 0", nan, []float64{1, 2, 3, 4, 100}, 1.4826},
		{"negative sigma counts as 0", -1, []float64{1, 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.pred...)
			require.InDelta(t, tt.want, TaskScale(tt.sigma, tt.pred), 1e-12)
			require.Equal(t, len(in), len(tt.pred))
			for i := range in { // the input is not reordered
				require.True(t, in[i] == tt.pred[i] || math.IsNaN(in[i]))
			}
		})
	}
}

func TestShapeHandDerived(t *testing.T) {
	// METHOD.md §1 Reward 1–4 on one group, τ = 1, defaults.
	group := []Candidate{
		{Predicted: 2, Valid: true, Key: "a", Mechanism: "m1"},      // scored 2
		{Predicted: 1, Valid: true, Key: "b", Mechanism: "m1"},      // scored 1
		{Predicted: 8, Valid: true, Key: "c", Mechanism: "m2"},      // scored, clipped to 6
		{Predicted: 5, Valid: true, Key: "a", Mechanism: "m1"},      // duplicate of 0: min(2,1,6) − 1 = 0
		{Predicted: 9, Valid: false, Mechanism: "m3"},               // invalid: −6
		{Valid: true, NoOp: true, Key: "none{}", Mechanism: "none"}, // no change: −3
	}
	// Base r = [2 1 6 0 −6 −3], mean 0, σ_G = sqrt(86/6).
	sigma := math.Sqrt(86.0 / 6)
	// n: m1 = 3, m2 = 1 → d over scored = [1/3 1/3 1], mean 5/9 → d̃ = [0.6 0.6 1.8].
	want := []Detail{
		{Scored, 2, 0.3 * sigma * 0.6, 2 + 0.3*sigma*0.6},
		{Scored, 1, 0.3 * sigma * 0.6, 1 + 0.3*sigma*0.6},
		{Scored, 6, 0.3 * sigma * 1.8, 6 + 0.3*sigma*1.8},
		{Duplicate, 0, 0, 0},
		{Invalid, -6, 0, -6},
		{NoOp, -3, 0, -3},
	}
	got := Explain(DefaultConfig(), 1, group)
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("Explain() mismatch (-want +got):\n%s", diff)
	}
	rewards := Shape(DefaultConfig(), 1, group)
	for i := range want {
		require.InDelta(t, want[i].Reward, rewards[i], 1e-12)
	}
}

func TestShapeRules(t *testing.T) {
	cfg := DefaultConfig()
	noBonus := cfg
	noBonus.DiversityScale = 0
	pess := func(k float64) Config { c := noBonus; c.Pessimism = k; return c }
	tests := []struct {
		name  string
		cfg   Config
		scale float64
		group []Candidate
		want  []float64
	}{
		{"empty group", cfg, 1, nil, []float64{}},
		{"scale divides", noBonus, 2, []Candidate{{Predicted: 3, Valid: true}, {Predicted: -1, Valid: true}}, []float64{1.5, -0.5}},
		// Repeat flag: min(scored) − δ = 1.5 − 1.
		{"history repeat", noBonus, 2, []Candidate{{Predicted: 3, Valid: true, Key: "x"}, {Predicted: 10, Valid: true, Key: "y", Repeat: true}}, []float64{1.5, 0.5}},
		// No scored candidate: m falls back to NoOpReward → −3 − 1 = −4.
		{"duplicate without scored", noBonus, 1, []Candidate{{Valid: true, NoOp: true, Key: "k"}, {Predicted: 1, Valid: true, Key: "z", Repeat: true}}, []float64{-3, -4}},
		// Duplicate of an invalid earlier candidate with the same key is still a duplicate.
		{"duplicate of invalid", noBonus, 1, []Candidate{{Valid: false, Key: "k"}, {Predicted: 1, Valid: true, Key: "k"}, {Predicted: 2, Valid: true, Key: "j"}}, []float64{-6, 1, 2}},
		// min − δ below −c is clamped to −c.
		{"duplicate clamped", noBonus, 1, []Candidate{{Predicted: -50, Valid: true, Key: "k"}, {Predicted: 1, Valid: true, Key: "k"}}, []float64{-6, -6}},
		{"empty key never duplicates", noBonus, 1, []Candidate{{Predicted: 1, Valid: true}, {Predicted: 2, Valid: true}}, []float64{1, 2}},
		{"second no-op stays no-op", noBonus, 1, []Candidate{{Valid: true, NoOp: true, Key: "n"}, {Valid: true, NoOp: true, Key: "n"}}, []float64{-3, -3}},
		{"invalid beats no-op", noBonus, 1, []Candidate{{Valid: false, NoOp: true}}, []float64{-6}},
		{"nan prediction is invalid", noBonus, 1, []Candidate{{Predicted: math.NaN(), Valid: true}}, []float64{-6}},
		{"pessimism off ignores low", noBonus, 1, []Candidate{{Predicted: 3, Low: -2, HasLow: true, Valid: true}}, []float64{3}},
		{"pessimism 1 uses q10", pess(1), 1, []Candidate{{Predicted: 3, Low: -2, HasLow: true, Valid: true}}, []float64{-2}},
		{"pessimism 0.5 blends", pess(0.5), 1, []Candidate{{Predicted: 3, Low: -2, HasLow: true, Valid: true}}, []float64{0.5}},
		{"pessimism without low", pess(1), 1, []Candidate{{Predicted: 3, Valid: true}}, []float64{3}},
		// Bonus: r = [1 −1], σ_G = 1, distinct mechanisms → d̃ = 1, b = 0.3.
		{"bonus distinct", cfg, 1, []Candidate{{Predicted: 1, Valid: true, Mechanism: "a"}, {Predicted: -1, Valid: true, Mechanism: "b"}}, []float64{1.3, -0.7}},
		// Bonus only to scored: r = [2 −6], σ_G = 4, d̃ = 1 → b = 1.2.
		{"bonus only scored", cfg, 1, []Candidate{{Predicted: 2, Valid: true, Mechanism: "a"}, {Valid: false, Mechanism: "b"}}, []float64{3.2, -6}},
		// Flat group: σ_G = 0 → no bonus.
		{"flat group", cfg, 1, []Candidate{{Predicted: 1, Valid: true, Mechanism: "a"}, {Predicted: 1, Valid: true, Mechanism: "b"}}, []float64{1, 1}},
		{"single candidate", cfg, 1, []Candidate{{Predicted: 1, Valid: true, Mechanism: "a"}}, []float64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Shape(tt.cfg, tt.scale, tt.group)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("Shape() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// refExplain is a slow, obvious restatement of Explain's documented rules.
func refExplain(cfg Config, scale float64, g []Candidate) []Detail {
	out := make([]Detail, len(g))
	for i, c := range g {
		dupKey := false
		for j := 0; j < i; j++ {
			if c.Key != "" && g[j].Key == c.Key {
				dupKey = true
			}
		}
		v := c.Predicted
		if cfg.Pessimism > 0 && c.HasLow {
			v = (1-cfg.Pessimism)*c.Predicted + cfg.Pessimism*c.Low
		}
		switch {
		case !c.Valid || (!c.NoOp && !c.Repeat && !dupKey && math.IsNaN(v)):
			out[i] = Detail{Kind: Invalid, Base: -cfg.Clip}
		case c.NoOp:
			out[i] = Detail{Kind: NoOp, Base: cfg.NoOpReward}
		case c.Repeat || dupKey:
			out[i] = Detail{Kind: Duplicate}
		default:
			out[i] = Detail{Kind: Scored, Base: Normalise(v, scale, cfg)}
		}
	}
	var scored []float64
	for _, d := range out {
		if d.Kind == Scored {
			scored = append(scored, d.Base)
		}
	}
	m := cfg.NoOpReward
	if len(scored) > 0 {
		m = scored[0]
		for _, s := range scored {
			m = math.Min(m, s)
		}
	}
	for i := range out {
		if out[i].Kind == Duplicate {
			out[i].Base = math.Max(-cfg.Clip, math.Min(cfg.Clip, m-cfg.DupPenalty))
		}
	}
	var mean, ss float64
	for _, d := range out {
		mean += d.Base / float64(len(out))
	}
	for _, d := range out {
		ss += (d.Base - mean) * (d.Base - mean)
	}
	sigma := 0.0
	if len(out) > 0 {
		sigma = math.Sqrt(ss / float64(len(out)))
	}
	var dMean float64
	dd := make([]float64, len(out))
	for i, d := range out {
		if d.Kind != Scored {
			continue
		}
		n := 0
		for _, c := range g {
			if c.Mechanism == g[i].Mechanism {
				n++
			}
		}
		dd[i] = 1 / float64(n)
		dMean += dd[i] / float64(len(scored))
	}
	for i := range out {
		if out[i].Kind == Scored && len(g) > 1 && sigma > 0 {
			out[i].Bonus = cfg.DiversityScale * sigma * dd[i] / dMean
		}
		out[i].Reward = out[i].Base + out[i].Bonus
	}
	return out
}

func candidateGen(t *rapid.T, n int) []Candidate {
	keys := []string{"", "a", "b", "c", "d", "e"}
	mechs := []string{"", "lr", "wd", "arch", "none"}
	g := make([]Candidate, n)
	for i := range g {
		g[i] = Candidate{
			Predicted: rapid.Float64Range(-50, 50).Draw(t, "pred"),
			Valid:     rapid.Float64Range(0, 1).Draw(t, "v") < 0.85,
			NoOp:      rapid.Float64Range(0, 1).Draw(t, "noop") < 0.1,
			Key:       rapid.SampledFrom(keys).Draw(t, "key"),
			Repeat:    rapid.Float64Range(0, 1).Draw(t, "rep") < 0.1,
			Mechanism: rapid.SampledFrom(mechs).Draw(t, "mech"),
			Low:       rapid.Float64Range(-80, 50).Draw(t, "low"),
			HasLow:    rapid.Bool().Draw(t, "haslow"),
		}
	}
	return g
}

func TestShapeProperties(t *testing.T) {
	// METHOD.md §1 Reward: clipped rewards stay in [−c, c] before the bonus;
	// the bonus goes to scored candidates only and is never negative.
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Clip = rapid.Float64Range(0.5, 10).Draw(t, "clip")
		cfg.NoOpReward = rapid.Float64Range(-cfg.Clip, cfg.Clip).Draw(t, "noopr")
		cfg.DupPenalty = rapid.Float64Range(0, 3).Draw(t, "delta")
		cfg.DiversityScale = rapid.Float64Range(0, 1).Draw(t, "lambda")
		cfg.Pessimism = rapid.SampledFrom([]float64{0, 0.5, 1}).Draw(t, "kappa")
		scale := rapid.Float64Range(0, 5).Draw(t, "scale")
		n := rapid.IntRange(0, 48).Draw(t, "n") // crosses the map threshold
		g := candidateGen(t, n)
		got := Explain(cfg, scale, g)
		shaped := Shape(cfg, scale, g)
		want := refExplain(cfg, scale, g)
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-12, 1e-12)); diff != "" {
			t.Fatalf("Explain differs from the reference (-want +got):\n%s", diff)
		}
		for i, d := range got {
			if d.Base < -cfg.Clip || d.Base > cfg.Clip {
				t.Fatalf("base reward %g outside [−%g, %g]", d.Base, cfg.Clip, cfg.Clip)
			}
			if d.Bonus < 0 || (d.Kind != Scored && d.Bonus != 0) {
				t.Fatalf("candidate %d (%v) got bonus %g", i, d.Kind, d.Bonus)
			}
			if shaped[i] != d.Reward {
				t.Fatalf("Shape()[%d] = %g, Explain = %g", i, shaped[i], d.Reward)
			}
		}
	})
}

func TestExplainMeanBonus(t *testing.T) {
	// With d̃ normalised by its mean over scored candidates, the mean bonus
	// over them is λ·σ_G (the documented normalisation).
	g := []Candidate{
		{Predicted: 1, Valid: true, Mechanism: "a"},
		{Predicted: 2, Valid: true, Mechanism: "a"},
		{Predicted: 0.5, Valid: true, Mechanism: "b"},
		{Predicted: -1, Valid: true, Mechanism: "c"},
		{Valid: false, Mechanism: "a"},
	}
	det := Explain(DefaultConfig(), 1, g)
	var mean, ss, bonus float64
	for _, d := range det {
		mean += d.Base / 5
	}
	for _, d := range det {
		ss += (d.Base - mean) * (d.Base - mean)
		bonus += d.Bonus / 4
	}
	require.InDelta(t, 0.3*math.Sqrt(ss/5), bonus, 1e-12)
}

func TestKindString(t *testing.T) {
	require.Equal(t, "scored", Scored.String())
	require.Equal(t, "duplicate", Duplicate.String())
	require.Equal(t, "Kind(9)", Kind(9).String())
}

func TestNewCandidate(t *testing.T) {
	task := records.Task{ID: "t", SeedNoise: 0.5}
	p := records.Proposal{Mechanism: " LR-Scale ", Params: map[string]string{"factor": "2.0"}}
	s := records.State{Task: task, History: []records.Record{
		{Task: task, Proposal: records.Proposal{Mechanism: "wd"}},
	}}
	c := NewCandidate(s, p, 1.5, true)
	require.Equal(t, Candidate{Predicted: 1.5, Valid: true, Key: "lr-scale{factor=2}", Mechanism: "lr-scale"}, c)

	s.History = append(s.History, records.Record{Task: task, Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}})
	require.True(t, NewCandidate(s, p, 1.5, true).Repeat, "same key as a history record")

	noop := NewCandidate(records.State{Task: task}, records.Proposal{Mechanism: records.NoChange}, 0, true)
	require.True(t, noop.NoOp)
	require.Equal(t, records.NoChange, noop.Mechanism)

	require.InDelta(t, 1.4826, ScaleFor(task, []float64{1, 2, 3, 4, 100}), 1e-12)
	require.InDelta(t, 0.5, ScaleFor(task, nil), 1e-12)
}

func TestRate(t *testing.T) {
	// METHOD.md §1 Reward 1–2 with c = 6, no-change −3, τ = 0.5.
	cfg := DefaultConfig()
	for _, c := range []struct {
		name string
		cand Candidate
		want float64
	}{
		{"scored", Candidate{Predicted: 1, Valid: true}, 2},                              // 1/0.5
		{"clipped", Candidate{Predicted: 10, Valid: true}, 6},                            // 20 → 6
		{"invalid", Candidate{Predicted: 1}, -6},                                         // rule 2
		{"invalid beats no-op", Candidate{NoOp: true}, -6},                               // precedence
		{"no-op", Candidate{Valid: true, NoOp: true, Predicted: 3}, -3},                  // rule 2
		{"NaN is invalid", Candidate{Predicted: math.NaN(), Valid: true}, -6},            // unreadable
		{"repeat ignored", Candidate{Predicted: -0.25, Valid: true, Repeat: true}, -0.5}, // group/history rule left out
	} {
		require.Equal(t, c.want, Rate(cfg, 0.5, c.cand), c.name)
	}
	// Pessimism κ = 0.5 normalises (ĝ + q10)/2 = 0.5 → 1.
	cfg.Pessimism = 0.5
	require.Equal(t, 1.0, Rate(cfg, 0.5, Candidate{Predicted: 1, Low: 0, HasLow: true, Valid: true}))
}

func TestRateIsExplainsBaseAlone(t *testing.T) {
	// A candidate alone in its group and not repeating its history gets
	// Explain's base reward: Rate is that rule, not a second copy of it.
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Pessimism = rapid.SampledFrom([]float64{0, 0.5, 1}).Draw(t, "kappa")
		scale := rapid.Float64Range(0, 5).Draw(t, "scale")
		c := candidateGen(t, 1)[0]
		c.Repeat = false
		want := Explain(cfg, scale, []Candidate{c})[0].Base
		if got := Rate(cfg, scale, c); got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("Rate = %g, Explain base = %g for %+v", got, want, c)
		}
	})
}
