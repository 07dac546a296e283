package evalstat

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Hand-derived cases of the judgement diagnostic.
func TestJudgeByHand(t *testing.T) {
	blind := map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2}
	s1 := Judged{Region: "r1", Policy: blind, Gains: map[string]float64{"a": 1, "b": 2, "c": 0}} // best b
	s2 := Judged{Region: "r1", Policy: blind, Gains: map[string]float64{"a": 0, "b": 0, "c": 3}} // best c
	s3 := Judged{Region: "r2", Policy: map[string]float64{"a": 1}, Gains: map[string]float64{"a": 5}}

	// A policy blind to the state: the best changes differ, its choices do
	// not. Ranks: b is 2nd (below a), c is 3rd.
	j, err := Judge([]Judged{s1, s2})
	require.NoError(t, err)
	require.Equal(t, Judgement{States: 2, BestRank: 2.5, ChanceRank: 2, BestMass: 0.25, PolicySpread: 0, BestSpread: 1, Dependence: 0}, j)

	// An oracle: all mass on each state's best change.
	o1, o2 := s1, s2
	o1.Policy, o2.Policy = map[string]float64{"b": 1}, map[string]float64{"c": 1}
	j, err = Judge([]Judged{o1, o2})
	require.NoError(t, err)
	require.Equal(t, Judgement{States: 2, BestRank: 1, ChanceRank: 2, BestMass: 1, PolicySpread: 1, BestSpread: 1, Dependence: 1}, j)

	// Ties in probability take the mean rank: uniform over three gives
	// the chance rank 2.
	u := s1
	u.Policy = map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3}
	j, err = Judge([]Judged{u})
	require.NoError(t, err)
	require.Equal(t, 2.0, j.BestRank)
	require.Equal(t, 2.0, j.ChanceRank)
	require.True(t, math.IsNaN(j.Dependence), "one state: no pair")

	// Regions. All three: pairs (1,2) TV 0, (1,3) and (2,3) TV ½·(0.5 +
	// 0.3 + 0.2) = 0.5, every pair's best differs: spread 1/3, dependence
	// 1/3; ranks 2, 3, 1; chance 2, 2, 1; mass 0.3, 0.2, 1.
	js, err := JudgeRegions([]Judged{s1, s2, s3})
	require.NoError(t, err)
	require.Len(t, js, 3)
	all := js[0]
	require.Equal(t, "", all.Region)
	require.Equal(t, 3, all.States)
	require.InDelta(t, 2.0, all.BestRank, 1e-12)
	require.InDelta(t, 5.0/3, all.ChanceRank, 1e-12)
	require.InDelta(t, 0.5, all.BestMass, 1e-12)
	require.InDelta(t, 1.0/3, all.PolicySpread, 1e-12)
	require.Equal(t, 1.0, all.BestSpread)
	require.InDelta(t, 1.0/3, all.Dependence, 1e-12)
	require.Equal(t, "r1", js[1].Region)
	require.Equal(t, 0.0, js[1].Dependence)
	require.Equal(t, "r2", js[2].Region)
	require.Equal(t, 1, js[2].States)
	require.True(t, math.IsNaN(js[2].Dependence))

	// Equal best gains: the smallest key is the best.
	tie := Judged{Policy: map[string]float64{"z": 1}, Gains: map[string]float64{"z": 1, "y": 1}}
	j, err = Judge([]Judged{tie})
	require.NoError(t, err)
	require.Equal(t, 2.0, j.BestRank, "y is best, below z")
}

func TestJudgeRefuses(t *testing.T) {
	_, err := Judge(nil)
	require.ErrorIs(t, err, ErrEmpty)
	for _, s := range []Judged{
		{Policy: map[string]float64{"a": 1}},
		{Policy: map[string]float64{"a": 0.5}, Gains: map[string]float64{"a": 1}},
		{Policy: map[string]float64{"a": 1.5, "b": -0.5}, Gains: map[string]float64{"a": 1}},
		{Policy: map[string]float64{"a": math.NaN()}, Gains: map[string]float64{"a": 1}},
		{Policy: map[string]float64{"a": 1}, Gains: map[string]float64{"a": math.Inf(1)}},
	} {
		_, err := Judge([]Judged{s})
		require.ErrorIs(t, err, ErrData, "%+v", s)
	}
}

// Properties on random states: ranks lie between 1 and the number of
// changes, spreads and mass in [0, 1]; a policy identical across states has
// no spread; putting all mass on each state's best gives rank 1, mass 1.
func TestJudgeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 0))
	for range 200 {
		n := 1 + rng.IntN(6)
		keys := []string{"a", "b", "c", "d", "e", "f"}[:n]
		var states, oracle []Judged
		shared := map[string]float64{}
		for s := range 2 + rng.IntN(5) {
			g, p := map[string]float64{}, map[string]float64{}
			sum := 0.0
			for _, k := range keys {
				g[k] = math.Round(rng.NormFloat64()*4) / 2
				p[k] = rng.Float64()
				sum += p[k]
			}
			for k := range p {
				p[k] /= sum
			}
			if s == 0 {
				shared = p
			}
			states = append(states, Judged{Policy: p, Gains: g})
			st := Judged{Gains: g}
			st.Policy = map[string]float64{st.best(): 1}
			oracle = append(oracle, st)
		}
		j, err := Judge(states)
		require.NoError(t, err)
		require.GreaterOrEqual(t, j.BestRank, 1.0)
		require.LessOrEqual(t, j.BestRank, float64(n))
		for _, x := range []float64{j.BestMass, j.PolicySpread, j.BestSpread} {
			require.GreaterOrEqual(t, x, 0.0)
			require.LessOrEqual(t, x, 1.0+1e-12)
		}
		for i := range states {
			states[i].Policy = shared
		}
		j, err = Judge(states)
		require.NoError(t, err)
		require.Equal(t, 0.0, j.PolicySpread)
		j, err = Judge(oracle)
		require.NoError(t, err)
		require.Equal(t, 1.0, j.BestRank)
		require.Equal(t, 1.0, j.BestMass)
		require.InDelta(t, j.BestSpread, j.PolicySpread, 1e-12, "one-hot on the best: spread = share of differing bests")
	}
}

// BestRank by hand: gains' best is b (5); the scores put it after a and
// level with c; a key the scores lack scores the missing value.
func TestBestRankByHand(t *testing.T) {
	gains := map[string]float64{"a": 1, "b": 5, "c": 2, "d": 0}
	for _, c := range []struct {
		name    string
		score   map[string]float64
		missing float64
		want    float64
	}{
		{"first", map[string]float64{"b": 3, "a": 2, "c": 1, "d": 0}, 0, 1},
		{"after a, level with c", map[string]float64{"a": 3, "b": 2, "c": 2, "d": 1}, 0, 2.5},
		{"unscored keys last", map[string]float64{"a": 1}, math.Inf(-1), 1 + 1 + 2.0/2},
		{"unscored keys as probability 0", map[string]float64{"a": 0.5, "d": 0.5}, 0, 1 + 2 + 1.0/2},
		{"no scores: every key ties", nil, math.Inf(-1), 1 + 3.0/2},
	} {
		require.InDelta(t, c.want, BestRank(c.score, gains, c.missing), 1e-12, c.name)
	}
	require.Zero(t, BestRank(map[string]float64{"a": 1}, nil, 0), "no gains, no rank")
	// Equal gains: the smallest key is the best.
	require.InDelta(t, 2.0, BestRank(map[string]float64{"b": 1, "a": 0}, map[string]float64{"a": 1, "b": 1}, 0), 1e-12)
}
