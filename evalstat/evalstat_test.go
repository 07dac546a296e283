package evalstat

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func rng() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func TestStatsOf(t *testing.T) {
	// METHOD.md §1 Data and evaluation: Avg@K (mean), Best@K (max),
	// negative-gain rate, share above 2σ_e.
	s := statsOf([]float64{-1, 0, 3, 5}, 2)
	require.Equal(t, cellStats{avg: 1.75, best: 5, neg: 0.5, above: 0.5}, s)
	s = statsOf([]float64{-4}, 2)
	require.Equal(t, cellStats{avg: -4, best: -4, neg: 1, above: 0}, s)
}

func TestIQM(t *testing.T) {
	tests := []struct {
		name string
		x    []float64
		want float64
	}{
		{"eight values drop two each side", []float64{8, 1, 7, 2, 6, 3, 5, 4}, 4.5}, // mean(3,4,5,6)
		{"three values keep all", []float64{1, 2, 3}, 2},
		{"five values drop one each side", []float64{10, 1, 2, 3, 100}, 5}, // mean(2,3,10)
		{"one value", []float64{-7}, -7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.x...)
			require.InDelta(t, tt.want, IQM(tt.x), 1e-12)
			require.Equal(t, in, tt.x, "IQM must not modify its input")
		})
	}
	require.True(t, math.IsNaN(IQM(nil)))
}

// handCells: two seeds of two states each (numbers derived in the comments).
func handCells() []Cell {
	return []Cell{
		{Seed: 1, State: "a", Gains: []float64{1, 3}},  // avg 2, best 3, neg 0, above ½
		{Seed: 1, State: "b", Gains: []float64{-2, 0}}, // avg −1, best 0, neg 1, above 0
		{Seed: 2, State: "a", Gains: []float64{4, 4}},  // avg 4, best 4, neg 0, above 1
		{Seed: 2, State: "b", Gains: []float64{-1, 2}}, // avg ½, best 2, neg ½, above 0
	}
}

func TestSummarizePoints(t *testing.T) {
	s, err := Summarize(DefaultConfig(), "m", handCells(), rng())
	require.NoError(t, err)
	require.Equal(t, "m", s.Method)
	require.Equal(t, 2, s.Seeds)
	require.Equal(t, 4, s.States)
	require.Equal(t, 8, s.Proposals)
	require.InDelta(t, 1.375, s.AvgK.Point, 1e-12)         // (2 − 1 + 4 + ½)/4
	require.InDelta(t, 2.25, s.BestK.Point, 1e-12)         // (3 + 0 + 4 + 2)/4
	require.InDelta(t, 0.375, s.NegativeRate.Point, 1e-12) // (0 + 1 + 0 + ½)/4
	require.InDelta(t, 0.375, s.Above.Point, 1e-12)        // (½ + 0 + 1 + 0)/4
	require.InDelta(t, 1.25, s.IQM.Point, 1e-12)           // mean(½, 2) of {−1, ½, 2, 4}
	require.Equal(t, 2.0, s.Threshold)
}

func TestIntervalTwoCells(t *testing.T) {
	// One seed, two states with Avg@K 0 and 1: a replicate's mean is 0
	// (p ¼), ½ (p ½) or 1 (p ¼), so the 2.5% and 97.5% percentiles of 2000
	// replicates are 0 and 1.
	cells := []Cell{{Seed: 1, State: "a", Gains: []float64{0}}, {Seed: 1, State: "b", Gains: []float64{1}}}
	s, err := Summarize(DefaultConfig(), "m", cells, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{Point: 0.5, Low: 0, High: 1}, s.AvgK)
	// The same values on two seeds of one state each: seeds are drawn the
	// same way.
	cells[1].Seed, cells[1].State = 2, "a"
	s, err = Summarize(DefaultConfig(), "m", cells, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{Point: 0.5, Low: 0, High: 1}, s.AvgK)
}

func TestIntervalStrataKeepTheirShare(t *testing.T) {
	// Two strata: one always gains 0, the other always 10. Stratified
	// resampling keeps one state of each per replicate, so the mean never
	// moves from 5.
	cells := []Cell{
		{Seed: 1, State: "a", Stratum: "x", Gains: []float64{0}},
		{Seed: 1, State: "b", Stratum: "y", Gains: []float64{10}},
	}
	s, err := Summarize(DefaultConfig(), "m", cells, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{Point: 5, Low: 5, High: 5}, s.AvgK)
}

func TestIntervalWidthMatchesNormalTheory(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical check; runs without -short")
	}
	// 400 states of N(0, 1) gains on one seed: the 95% interval of the mean
	// should be about 2 · 1.96 / √400 = 0.196 wide.
	r := rand.New(rand.NewPCG(7, 7))
	var cells []Cell
	for i := range 400 {
		cells = append(cells, Cell{Seed: 1, State: string(rune('a'+i%26)) + string(rune('a'+i/26)), Gains: []float64{r.NormFloat64()}})
	}
	s, err := Summarize(DefaultConfig(), "m", cells, rng())
	require.NoError(t, err)
	require.InDelta(t, 0.196, s.AvgK.High-s.AvgK.Low, 0.03)
}

func TestZeroVarianceCollapses(t *testing.T) {
	var cells []Cell
	for seed := uint64(1); seed <= 5; seed++ {
		for _, st := range []string{"a", "b", "c"} {
			cells = append(cells, Cell{Seed: seed, State: st, Stratum: st, Gains: []float64{2.5, 2.5, 2.5, 2.5}})
		}
	}
	s, err := Summarize(DefaultConfig(), "m", cells, rng())
	require.NoError(t, err)
	for name, iv := range map[string]Interval{"AvgK": s.AvgK, "BestK": s.BestK, "IQM": s.IQM} {
		require.InDelta(t, 2.5, iv.Point, 1e-12, name)
		require.InDelta(t, 0, iv.High-iv.Low, 1e-12, name)
	}
	require.Equal(t, Interval{0, 0, 0}, s.NegativeRate)
	require.Equal(t, Interval{1, 1, 1}, s.Above)
}

func TestCompareHand(t *testing.T) {
	a := []Cell{
		{Seed: 1, State: "s1", Gains: []float64{2}},
		{Seed: 1, State: "s2", Gains: []float64{0}},
		{Seed: 1, State: "s3", Gains: []float64{1}},
	}
	b := []Cell{
		{Seed: 1, State: "s1", Gains: []float64{1}},
		{Seed: 1, State: "s2", Gains: []float64{0}},
		{Seed: 2, State: "s1", Gains: []float64{5}},
	}
	p, err := Compare(DefaultConfig(), "a", a, "b", b, rng())
	require.NoError(t, err)
	require.Equal(t, 2, p.Pairs)
	require.Equal(t, 1, p.UnpairedMethod)
	require.Equal(t, 1, p.UnpairedAgainst)
	// s1: 2 − 1 = 1 (a wins), s2: 0 − 0 = 0 (a tie counts ½).
	require.Equal(t, Interval{Point: 0.5, Low: 0, High: 1}, p.Diff)
	require.Equal(t, Interval{Point: 0.75, Low: 0.5, High: 1}, p.PImprove)
	require.Equal(t, "a", p.Method)
	require.Equal(t, "b", p.Against)
}

func TestCompareAgainstItself(t *testing.T) {
	c := handCells()
	p, err := Compare(DefaultConfig(), "m", c, "m", c, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{0, 0, 0}, p.Diff)
	require.Equal(t, Interval{0.5, 0.5, 0.5}, p.PImprove)
}

func TestErrors(t *testing.T) {
	good := handCells()
	tests := []struct {
		name  string
		cfg   Config
		cells []Cell
		want  error
		text  string
	}{
		{"no resamples", Config{Resamples: 0, Level: 0.95, Threshold: 2}, good, ErrConfig, "Resamples = 0"},
		{"level 1", Config{Resamples: 10, Level: 1, Threshold: 2}, good, ErrConfig, "Level = 1"},
		{"NaN threshold", Config{Resamples: 10, Level: 0.9, Threshold: math.NaN()}, good, ErrConfig, "Threshold"},
		{"no cells", DefaultConfig(), nil, ErrEmpty, "no cells"},
		{"no gains", DefaultConfig(), []Cell{{Seed: 3, State: "x"}}, ErrData, `seed 3 state "x" has no gains`},
		{"NaN gain", DefaultConfig(), []Cell{{Seed: 1, State: "x", Gains: []float64{1, math.NaN()}}}, ErrData, "NaN"},
		{"Inf gain", DefaultConfig(), []Cell{{Seed: 1, State: "x", Gains: []float64{math.Inf(1)}}}, ErrData, "+Inf"},
		{"duplicate", DefaultConfig(), append(handCells(), Cell{Seed: 2, State: "b", Gains: []float64{1}}), ErrData, "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Summarize(tt.cfg, "m", tt.cells, rng())
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, tt.text)
			_, err = Compare(tt.cfg, "m", tt.cells, "b", good, rng())
			require.ErrorIs(t, err, tt.want)
		})
	}
	_, err := Compare(DefaultConfig(), "m", good, "b", []Cell{{Seed: 9, State: "z", Gains: []float64{1}}}, rng())
	require.ErrorIs(t, err, ErrEmpty)
	_, err = Compare(DefaultConfig(), "m", good, "b", []Cell{{Seed: 9, State: "z"}}, rng())
	require.ErrorIs(t, err, ErrData)
	require.False(t, errors.Is(err, ErrEmpty))
}

func TestDeterministic(t *testing.T) {
	a, err := Summarize(DefaultConfig(), "m", handCells(), rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	b, err := Summarize(DefaultConfig(), "m", handCells(), rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// genCells draws cells of 1–4 seeds, 1–6 states each, 1–4 gains each.
func genCells(t *rapid.T, label string) []Cell {
	var cells []Cell
	seeds := rapid.IntRange(1, 4).Draw(t, label+"seeds")
	for s := range seeds {
		states := rapid.IntRange(1, 6).Draw(t, label+"states")
		for i := range states {
			g := rapid.SliceOfN(rapid.Float64Range(-10, 10), 1, 4).Draw(t, label+"gains")
			cells = append(cells, Cell{Seed: uint64(s + 1), State: string(rune('a' + i)),
				Stratum: string(rune('a' + i%2)), Gains: g})
		}
	}
	return cells
}

func TestPropertyIntervals(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cells := genCells(t, "")
		cfg := Config{Resamples: 400, Level: 0.95, Threshold: 2}
		s, err := Summarize(cfg, "m", cells, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1)))
		if err != nil {
			t.Fatal(err)
		}
		for name, iv := range map[string]Interval{"AvgK": s.AvgK, "BestK": s.BestK, "neg": s.NegativeRate, "above": s.Above} {
			if !(iv.Low <= iv.High) || !iv.Contains(iv.Point) {
				t.Fatalf("%s: %v does not contain its point estimate", name, iv)
			}
		}
		if s.BestK.Point < s.AvgK.Point || s.NegativeRate.Low < 0 || s.Above.High > 1 {
			t.Fatalf("impossible summary %+v", s)
		}
		if s.IQM.Low > s.IQM.High {
			t.Fatalf("IQM interval %v reversed", s.IQM)
		}
	})
}

func TestPropertyCompareAntisymmetric(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genCells(t, "a"), genCells(t, "b")
		cfg := Config{Resamples: 50, Level: 0.9, Threshold: 2}
		ab, errA := Compare(cfg, "a", a, "b", b, rng())
		ba, errB := Compare(cfg, "b", b, "a", a, rng())
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if ab.Pairs != ba.Pairs || math.Abs(ab.Diff.Point+ba.Diff.Point) > 1e-9 ||
			math.Abs(ab.PImprove.Point+ba.PImprove.Point-1) > 1e-12 {
			t.Fatalf("a vs b %+v and b vs a %+v disagree", ab, ba)
		}
	})
}

func TestBestOfAndTable(t *testing.T) {
	sums := []Summary{
		{Method: "Base", Seeds: 5, States: 40, AvgK: Interval{-1, -2, 0}, Threshold: 2},
		{Method: "SFT", Seeds: 5, States: 40, AvgK: Interval{0.5, -1, 2}, Threshold: 2},
		{Method: "RFT", Seeds: 5, States: 40, AvgK: Interval{0.25, -1, 2}, Threshold: 2},
		{Method: "LM2LM", Seeds: 5, States: 40, AvgK: Interval{3, 1, 5}, Threshold: 2},
	}
	b, ok := BestOf(sums, "SFT", "RFT", "missing")
	require.True(t, ok)
	require.Equal(t, "SFT", b.Method)
	_, ok = BestOf(sums, "missing")
	require.False(t, ok)
	pairs := []Paired{{Method: "LM2LM", Against: "Base", Diff: Interval{4, 2, 6}, PImprove: Interval{0.8, 0.7, 0.9}}}
	tab := Table(sums, pairs)
	lines := strings.Split(strings.TrimSpace(tab), "\n")
	require.Len(t, lines, 6)
	require.Equal(t, "| method | seeds | states | Avg@K | Best@K | neg. rate | > 2σ_e | IQM | Δ vs Base | P(better than Base) |", lines[0])
	require.Equal(t, strings.Count(lines[0], "|"), strings.Count(lines[1], "|"))
	require.Contains(t, lines[5], "| LM2LM | 5 | 40 | +3.00 [+1.00, +5.00] |")
	require.True(t, strings.HasSuffix(lines[5], "| +4.00 [+2.00, +6.00] | 0.80 [0.70, 0.90] |"), lines[5])
	require.True(t, strings.HasSuffix(lines[2], "| – | – |"), lines[2])
}
