package evalstat

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// handNoise: family ar has σ_e 0.01, 0.03, 0.02 (median 0.02), mdm has
// 0.02 and 0.04 (median of two: their mean, 0.03); over all five the
// median is 0.02.
var handNoise = []Noise{{"ar", 0.01}, {"ar", 0.03}, {"ar", 0.02}, {"mdm", 0.02}, {"mdm", 0.04}}

func TestNewScaleFloorsAreFamilyMedians(t *testing.T) {
	in := slices.Clone(handNoise)
	s, err := NewScale(in, 6)
	require.NoError(t, err)
	require.Equal(t, handNoise, in, "NewScale must not modify its input")
	require.InDelta(t, 0.02, s.Floors["ar"], 1e-15)
	require.InDelta(t, 0.03, s.Floors["mdm"], 1e-15)
	require.Len(t, s.Floors, 2)
	require.InDelta(t, 0.02, s.Fallback, 1e-15)
	require.Equal(t, 6.0, s.Clip)
	require.Equal(t, s.Floors["mdm"], s.Floor("mdm"))
	require.Equal(t, s.Fallback, s.Floor("ssm"), "a family without a floor takes the fallback")
}

// TestApplyHand: g_robust = clip(g·σ_e/τ_e, −c, c), τ_e = max(σ_e, floor),
// every value derived by hand with the floors of handNoise and c = 6.
func TestApplyHand(t *testing.T) {
	s, err := NewScale(handNoise, 6)
	require.NoError(t, err)
	tests := []struct {
		name           string
		family         string
		sigma, g, want float64
	}{
		{"σ above the floor: identity", "ar", 0.04, 1.5, 1.5},
		{"σ at the floor: identity", "ar", 0.02, -2.25, -2.25},
		{"σ above the floor, clipped above", "ar", 0.04, 7, 6},
		{"σ above the floor, clipped below", "ar", 0.04, -6.5, -6},
		{"σ half the floor halves the gain", "ar", 0.01, 3, 1.5},             // 3·0.01/0.02
		{"σ a quarter of the floor, then clipped", "ar", 0.005, -40, -6},     // −40·0.25 = −10
		{"mdm: σ half its floor", "mdm", 0.015, 2, 1},                        // 2·0.015/0.03
		{"mdm: tiny σ", "mdm", 0.0015, -100, -5},                             // −100·0.0015/0.03
		{"mdm: one bad proposal of the lab", "mdm", 0.0015, -1054, -6},       // −52.7 clipped
		{"unknown family uses the fallback 0.02", "ssm", 0.01, 4, 2},         // 4·0.01/0.02
		{"unknown family above the fallback", "ssm", 0.05, 4, 4},             // identity
		{"zero gain stays zero", "mdm", 0.001, 0, 0},                         //
		{"infinite gain is clipped", "ar", 0.04, math.Inf(-1), -6},           //
		{"the infeasible −c shrinks: callers keep it", "ar", 0.01, -6, -3.0}, // why the caller keeps −c
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, s.Apply(tt.family, tt.sigma, tt.g), 1e-12)
		})
	}
	require.True(t, math.IsNaN(s.Apply("ar", 0, 1)), "σ_e = 0")
	require.True(t, math.IsNaN(s.Apply("ar", -0.1, 1)), "σ_e < 0")
	require.True(t, math.IsNaN(s.Apply("ar", math.Inf(1), 1)), "σ_e = +Inf")
	require.True(t, math.IsNaN(s.Apply("ar", math.NaN(), 1)), "σ_e = NaN")
	require.True(t, math.IsNaN(s.Apply("ar", 0.1, math.NaN())), "g = NaN")
}

func TestScaleErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		noise []Noise
		clip  float64
		want  string
	}{
		{"no noise", nil, 6, "no seed noise"},
		{"zero σ", []Noise{{"ar", 0}}, 6, `family "ar" has seed noise 0`},
		{"NaN σ", []Noise{{"ar", 0.1}, {"mdm", math.NaN()}}, 6, `family "mdm" has seed noise NaN`},
		{"infinite σ", []Noise{{"ar", math.Inf(1)}}, 6, "seed noise +Inf"},
		{"zero clip", handNoise, 0, "Clip = 0"},
		{"negative clip", handNoise, -6, "Clip = -6"},
		{"NaN clip", handNoise, math.NaN(), "Clip = NaN"},
		{"infinite clip", handNoise, math.Inf(1), "Clip = +Inf"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewScale(tt.noise, tt.clip)
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
	require.NoError(t, Scale{Clip: 6, Fallback: 0.1}.Validate(), "no floors: every family takes the fallback")
	err := Scale{Clip: 6, Fallback: 0.1, Floors: map[string]float64{"b": -1, "a": 0}}.Validate()
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, `family "a" = 0`, "the first bad family in name order")
	err = Scale{Clip: 6}.Validate()
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "Fallback = 0")
}

// genScale draws a valid Scale over families a, b, c (d has no floor).
func genScale(t *rapid.T) Scale {
	s := Scale{Floors: map[string]float64{}, Fallback: rapid.Float64Range(1e-4, 1).Draw(t, "fallback"),
		Clip: rapid.Float64Range(0.1, 20).Draw(t, "clip")}
	for _, f := range []string{"a", "b", "c"} {
		if rapid.Bool().Draw(t, "has "+f) {
			s.Floors[f] = rapid.Float64Range(1e-4, 1).Draw(t, "floor "+f)
		}
	}
	return s
}

func TestPropertyScale(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScale(t)
		require.NoError(t, s.Validate())
		fam := rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "family")
		sigma := rapid.Float64Range(1e-5, 2).Draw(t, "sigma")
		g1 := rapid.Float64Range(-2000, 2000).Draw(t, "g1")
		g2 := rapid.Float64Range(-2000, 2000).Draw(t, "g2")
		if g1 > g2 {
			g1, g2 = g2, g1
		}
		r1, r2 := s.Apply(fam, sigma, g1), s.Apply(fam, sigma, g2)
		require.LessOrEqual(t, r1, r2, "monotone in g")
		for _, r := range []float64{r1, r2} {
			require.GreaterOrEqual(t, r, -s.Clip, "bounded below by −c")
			require.LessOrEqual(t, r, s.Clip, "bounded above by +c")
		}
		if sigma >= s.Floor(fam) {
			for _, g := range []float64{g1, g2} {
				if math.Abs(g) <= s.Clip {
					require.Equal(t, g, s.Apply(fam, sigma, g), "identity when σ_e ≥ floor and |g| ≤ c")
				}
			}
		}
		// The robust gain never exceeds the raw one in magnitude, and
		// keeps its sign.
		require.LessOrEqual(t, math.Abs(r1), math.Abs(g1))
		require.False(t, r1*g1 < 0, "sign kept")
	})
}

func TestPropertyNewScaleFloorsWithinFamilyRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		noise := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Noise {
			return Noise{rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "family"), rapid.Float64Range(1e-4, 1).Draw(t, "sigma")}
		}), 1, 20).Draw(t, "noise")
		s, err := NewScale(noise, 6)
		require.NoError(t, err)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, n := range noise {
			lo, hi = min(lo, n.Sigma), max(hi, n.Sigma)
			var below, above int
			for _, m := range noise {
				if m.Family == n.Family && m.Sigma <= s.Floors[n.Family] {
					below++
				}
				if m.Family == n.Family && m.Sigma >= s.Floors[n.Family] {
					above++
				}
			}
			k := 0
			for _, m := range noise {
				if m.Family == n.Family {
					k++
				}
			}
			// A median: at least half the family on each side.
			require.GreaterOrEqual(t, 2*below, k)
			require.GreaterOrEqual(t, 2*above, k)
		}
		require.GreaterOrEqual(t, s.Fallback, lo)
		require.LessOrEqual(t, s.Fallback, hi)
	})
}
