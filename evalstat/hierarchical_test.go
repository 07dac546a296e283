package evalstat

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func hier(resamples int, level float64) Config {
	c := DefaultConfig()
	c.Resamples, c.Level, c.Scheme = resamples, level, Hierarchical
	return c
}

// One seed, one task, one state: every replicate is that state, so the
// interval has zero width.
func TestHierarchicalOneCellZeroWidth(t *testing.T) {
	cells := []Cell{{Seed: 7, State: "t#0", Task: "t", Gains: []float64{1.5, -0.5}}}
	s, err := Summarize(hier(500, 0.95), "m", cells, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{Point: 0.5, Low: 0.5, High: 0.5}, s.AvgK)
	require.Equal(t, Interval{Point: 1.5, Low: 1.5, High: 1.5}, s.BestK)
}

// All the variance is between tasks: four tasks of one region whose ten
// states each share the task's value (−3, −1, 1, 3). The state-level
// bootstrap resamples the 40 states (sd of the mean √(5/40) ≈ 0.35, an
// interval near ±0.7); the hierarchical one resamples the four tasks, so
// a replicate is the mean of four draws from {−3, −1, 1, 3}: of the 256
// equally likely draws, P(mean ≤ −2.5) = 5/256 ≈ 2.0% and P(mean ≤ −2) =
// 15/256 ≈ 5.9%, so the exact 2.5% percentile is −2 and, by symmetry, the
// 97.5% one is +2.
func TestHierarchicalCountsTasks(t *testing.T) {
	var cells []Cell
	for k, v := range []float64{-3, -1, 1, 3} {
		for i := range 10 {
			task := fmt.Sprintf("task%d", k)
			cells = append(cells, Cell{Seed: 1, State: fmt.Sprintf("%s#%d", task, i), Stratum: "in", Task: task, Gains: []float64{v}})
		}
	}
	h, err := Summarize(hier(20000, 0.95), "m", cells, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{Point: 0, Low: -2, High: 2}, h.AvgK)

	cfg := DefaultConfig()
	cfg.Resamples = 20000
	st, err := Summarize(cfg, "m", cells, rng())
	require.NoError(t, err)
	require.InDelta(t, 0, st.AvgK.Point, 1e-12)
	require.InDelta(t, 1.96*math.Sqrt(5.0/40), st.AvgK.High, 0.05, "state-level: states only")
	require.Less(t, st.AvgK.High-st.AvgK.Low, (h.AvgK.High-h.AvgK.Low)/2, "the state-level interval is too narrow")
}

// A tiny case by hand: one seed, task A with states {0, 2}, task B with
// the state {4}. A replicate draws two tasks, then each drawn task's
// states: AA (¼) gives the mean of four draws from {0, 2}: 0, ½, 1, 3/2,
// 2 with probabilities 1, 4, 6, 4, 1 sixteenths; AB or BA (½) gives
// (two draws from {0, 2} + 4)/3: 4/3, 2, 8/3 with ¼, ½, ¼; BB (¼) gives 4.
// The cumulative distribution: 0 → 1/64, ½ → 5/64, 1 → 11/64, 4/3 →
// 19/64, 3/2 → 23/64, 2 → 40/64, 8/3 → 48/64, 4 → 1. Percentiles (the
// inverse of the empirical distribution): 5% → ½, 95% → 4, 20% → 4/3,
// 80% → 4. The point is the mean over the three states, 2.
func TestHierarchicalExactPercentiles(t *testing.T) {
	cells := []Cell{
		{Seed: 1, State: "A#0", Task: "A", Gains: []float64{0}},
		{Seed: 1, State: "A#1", Task: "A", Gains: []float64{2}},
		{Seed: 1, State: "B#0", Task: "B", Gains: []float64{4}},
	}
	for _, tt := range []struct {
		level     float64
		low, high float64
	}{{0.9, 0.5, 4}, {0.6, 4.0 / 3, 4}} {
		s, err := Summarize(hier(40000, tt.level), "m", cells, rng())
		require.NoError(t, err)
		require.InDelta(t, 2, s.AvgK.Point, 1e-12)
		require.InDelta(t, tt.low, s.AvgK.Low, 1e-12, "level %g", tt.level)
		require.InDelta(t, tt.high, s.AvgK.High, 1e-12, "level %g", tt.level)
	}
	// Two seeds of one task and one state each, values 0 and 1: a
	// replicate is 0, ½ or 1 with ¼, ½, ¼, so the 90% interval is [0, 1].
	two := []Cell{{Seed: 1, State: "x", Task: "x", Gains: []float64{0}}, {Seed: 2, State: "x", Task: "x", Gains: []float64{1}}}
	s, err := Summarize(hier(4000, 0.9), "m", two, rng())
	require.NoError(t, err)
	require.Equal(t, Interval{Point: 0.5, Low: 0, High: 1}, s.AvgK)
}

// Tasks are crossed with seeds: one task draw is shared by all drawn
// seeds. Two seeds, two tasks with values −1 and +1 on both seeds: if
// every seed drew its own tasks a replicate of two seeds could mix and
// fall at 0 half the time; shared, it is −1, 0 or +1 with ¼, ½, ¼.
func TestHierarchicalTasksSharedAcrossSeeds(t *testing.T) {
	var cells []Cell
	for _, seed := range []uint64{1, 2} {
		for _, task := range []string{"lo", "hi"} {
			v := map[string]float64{"lo": -1, "hi": 1}[task]
			cells = append(cells, Cell{Seed: seed, State: task + "#0", Task: task, Gains: []float64{v}})
		}
	}
	d, err := newTaskDesign("m", cells)
	require.NoError(t, err)
	r := rng()
	counts := map[float64]int{}
	var buf []int
	for range 8000 {
		buf = d.draw(r, buf)
		sum := 0.0
		for _, i := range buf {
			sum += cells[i].Gains[0]
		}
		counts[sum/float64(len(buf))]++
	}
	require.Len(t, counts, 3)
	require.InDelta(t, 0.25, float64(counts[-1])/8000, 0.02)
	require.InDelta(t, 0.5, float64(counts[0])/8000, 0.02)
	require.InDelta(t, 0.25, float64(counts[1])/8000, 0.02)
}

// Regions are strata of tasks: a replicate keeps each region's number of
// tasks. Region a's tasks are all 0, region b's single task is 10 (one
// state each, two tasks in a): every replicate is 10/3.
func TestHierarchicalRegionsKeepTheirShare(t *testing.T) {
	cells := []Cell{
		{Seed: 1, State: "a1", Stratum: "a", Task: "a1", Gains: []float64{0}},
		{Seed: 1, State: "a2", Stratum: "a", Task: "a2", Gains: []float64{0}},
		{Seed: 1, State: "b1", Stratum: "b", Task: "b1", Gains: []float64{10}},
	}
	s, err := Summarize(hier(300, 0.95), "m", cells, rng())
	require.NoError(t, err)
	require.InDelta(t, 10.0/3, s.AvgK.Low, 1e-12)
	require.InDelta(t, 10.0/3, s.AvgK.High, 1e-12)
}

// A paired difference on the same states: method a is b plus 0.5 on every
// state, so however the tasks differ the difference is 0.5 in every
// replicate; a difference that varies by task gets the task spread.
func TestHierarchicalPaired(t *testing.T) {
	var a, b, c []Cell
	for k := range 5 {
		for i := range 3 {
			task := fmt.Sprintf("t%d", k)
			base := float64(10*k - i)
			cell := Cell{Seed: uint64(1 + i%2), State: fmt.Sprintf("%s#%d", task, i), Stratum: "r", Task: task}
			x, y, z := cell, cell, cell
			x.Gains, y.Gains = []float64{base + 0.5}, []float64{base}
			z.Gains = []float64{base + float64(k)} // difference k: between tasks only
			a, b, c = append(a, x), append(b, y), append(c, z)
		}
	}
	p, err := Compare(hier(2000, 0.95), "a", a, "b", b, rng())
	require.NoError(t, err)
	require.Equal(t, 15, p.Pairs)
	require.InDelta(t, 0.5, p.Diff.Point, 1e-12)
	require.InDelta(t, 0.5, p.Diff.Low, 1e-12)
	require.InDelta(t, 0.5, p.Diff.High, 1e-12)
	require.Equal(t, Interval{Point: 1, Low: 1, High: 1}, p.PImprove)

	pc, err := Compare(hier(2000, 0.95), "c", c, "b", b, rng())
	require.NoError(t, err)
	require.InDelta(t, 2, pc.Diff.Point, 1e-12)
	require.Less(t, pc.Diff.Low, 1.0)
	require.Greater(t, pc.Diff.High, 3.0)
	st := DefaultConfig()
	st.Resamples = 2000
	ps, err := Compare(st, "c", c, "b", b, rng())
	require.NoError(t, err)
	require.Less(t, ps.Diff.High-ps.Diff.Low, pc.Diff.High-pc.Diff.Low)

	// The pairs must agree on the task.
	bad := append([]Cell(nil), b...)
	bad[0].Task = "elsewhere"
	_, err = Compare(hier(10, 0.95), "a", a, "b", bad, rng())
	require.ErrorIs(t, err, ErrData)
}

func TestHierarchicalErrors(t *testing.T) {
	_, err := Summarize(hier(10, 0.95), "m", []Cell{{Seed: 1, State: "s", Gains: []float64{1}}}, rng())
	require.ErrorIs(t, err, ErrData)
	require.ErrorContains(t, err, "no Task")
	_, err = Summarize(hier(10, 0.95), "m", []Cell{
		{Seed: 1, State: "s", Task: "t", Stratum: "a", Gains: []float64{1}},
		{Seed: 1, State: "u", Task: "t", Stratum: "b", Gains: []float64{1}},
	}, rng())
	require.ErrorIs(t, err, ErrData)
	cfg := hier(10, 0.95)
	cfg.Scheme = 7
	require.ErrorIs(t, cfg.Validate(), ErrConfig)
	require.Equal(t, "hierarchical", Hierarchical.String())
	require.Equal(t, "state-level", StateLevel.String())
}

func TestHierarchicalDeterministic(t *testing.T) {
	cells := taskCells(rand.New(rand.NewPCG(9, 9)))
	a, err := Summarize(hier(300, 0.95), "m", cells, rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	b, err := Summarize(hier(300, 0.95), "m", cells, rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Less(t, a.AvgK.Low, a.AvgK.High)
}

// taskCells draws 3 seeds × 2 regions × 3 tasks × 2 states.
func taskCells(r *rand.Rand) []Cell {
	var cells []Cell
	for s := range 3 {
		for _, reg := range []string{"in", "out"} {
			for k := range 3 {
				task := fmt.Sprintf("%s/%d", reg, k)
				for i := range 2 {
					cells = append(cells, Cell{Seed: uint64(s + 1), State: fmt.Sprintf("%s#%d", task, i), Stratum: reg, Task: task,
						Gains: []float64{r.NormFloat64() + float64(k), r.NormFloat64()}})
				}
			}
		}
	}
	return cells
}

// genTaskCells draws 1–3 seeds × 1–2 regions × 1–4 tasks × 1–3 states,
// 1–4 gains each; a seed may lack a task.
func genTaskCells(t *rapid.T) []Cell {
	var cells []Cell
	seeds := rapid.IntRange(1, 3).Draw(t, "seeds")
	regions := rapid.IntRange(1, 2).Draw(t, "regions")
	tasks := rapid.IntRange(1, 4).Draw(t, "tasks")
	for s := range seeds {
		for r := range regions {
			for k := range tasks {
				if s > 0 && rapid.IntRange(0, 4).Draw(t, "skip") == 0 {
					continue
				}
				task := fmt.Sprintf("r%d/t%d", r, k)
				for i := range rapid.IntRange(1, 3).Draw(t, "states") {
					g := rapid.SliceOfN(rapid.Float64Range(-10, 10), 1, 4).Draw(t, "gains")
					cells = append(cells, Cell{Seed: uint64(s + 1), State: fmt.Sprintf("%s#%d", task, i),
						Stratum: fmt.Sprintf("r%d", r), Task: task, Gains: g})
				}
			}
		}
	}
	return cells
}

// Every interval contains its point estimate; shrinking every gain
// towards the mean by λ ∈ [0, 1] (values more equal) scales the Avg@K
// interval's width by λ, never widening it, and λ = 0 (all values equal)
// leaves zero width; relabelling tasks and seeds changes nothing.
func TestPropertyHierarchical(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cells := genTaskCells(t)
		cfg := hier(300, 0.95)
		seed := rapid.Uint64().Draw(t, "seed")
		s, err := Summarize(cfg, "m", cells, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		for name, iv := range map[string]Interval{"AvgK": s.AvgK, "BestK": s.BestK, "neg": s.NegativeRate, "above": s.Above} {
			if !(iv.Low <= iv.High) || !iv.Contains(iv.Point) {
				t.Fatalf("%s: %v does not contain its point estimate", name, iv)
			}
		}

		mean := 0.0
		n := 0
		for _, c := range cells {
			for _, g := range c.Gains {
				mean += g
				n++
			}
		}
		mean /= float64(n)
		lambda := rapid.Float64Range(0, 1).Draw(t, "lambda")
		shrunk := make([]Cell, len(cells))
		for i, c := range cells {
			shrunk[i] = c
			shrunk[i].Gains = make([]float64, len(c.Gains))
			for j, g := range c.Gains {
				shrunk[i].Gains[j] = mean + lambda*(g-mean)
			}
		}
		s2, err := Summarize(cfg, "m", shrunk, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		w, w2 := s.AvgK.High-s.AvgK.Low, s2.AvgK.High-s2.AvgK.Low
		if w2 > w+1e-9 || math.Abs(w2-lambda*w) > 1e-9*(1+w) {
			t.Fatalf("width %g at λ = %g, want %g (λ × %g)", w2, lambda, lambda*w, w)
		}

		// Relabel tasks (and states, seeds) by a bijection.
		rel := make([]Cell, len(cells))
		for i, c := range cells {
			rel[i] = c
			rel[i].Task = "renamed:" + fmt.Sprint(len(c.Task)) + c.Task
			rel[i].State = "x" + c.State
			rel[i].Seed = c.Seed*1000 + 17
		}
		s3, err := Summarize(cfg, "m", rel, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if s3.AvgK != s.AvgK || s3.BestK != s.BestK || s3.IQM != s.IQM {
			t.Fatalf("relabelled %v, was %v", s3.AvgK, s.AvgK)
		}
	})
}

// SummarizeRegions and CompareRegions: one summary per region in order of
// first appearance, each equal to summarising that region's cells alone.
func TestRegions(t *testing.T) {
	cells := taskCells(rand.New(rand.NewPCG(5, 5)))
	require.Equal(t, []string{"in", "out"}, Regions(cells))
	sums, err := SummarizeRegions(hier(200, 0.95), "m", cells, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	require.Len(t, sums, 2)
	r := rand.New(rand.NewPCG(1, 1))
	for i, reg := range []string{"in", "out"} {
		want, err := Summarize(hier(200, 0.95), "m", InRegion(cells, reg), r)
		require.NoError(t, err)
		want.Region = reg
		require.Equal(t, want, sums[i])
		require.Equal(t, 18, sums[i].States)
	}
	other := taskCells(rand.New(rand.NewPCG(6, 6)))
	pairs, err := CompareRegions(hier(200, 0.95), "m", cells, "o", other, rand.New(rand.NewPCG(2, 2)))
	require.NoError(t, err)
	require.Len(t, pairs, 2)
	r = rand.New(rand.NewPCG(2, 2))
	for i, reg := range []string{"in", "out"} {
		want, err := Compare(hier(200, 0.95), "m", InRegion(cells, reg), "o", InRegion(other, reg), r)
		require.NoError(t, err)
		want.Region = reg
		require.Equal(t, want, pairs[i])
	}
	_, err = SummarizeRegions(hier(200, 0.95), "m", nil, r)
	require.ErrorIs(t, err, ErrEmpty)
	_, err = CompareRegions(hier(200, 0.95), "m", cells, "o", InRegion(other, "in"), r)
	require.ErrorIs(t, err, ErrEmpty)
	require.ErrorContains(t, err, `region "out"`)
}

// benchCells: 10 seeds × 48 tasks (4 regions) × 4 states, 4 gains each:
// a V3 split's comparison of one method.
func benchCells() []Cell {
	r := rand.New(rand.NewPCG(1, 1))
	var cells []Cell
	for s := range 10 {
		for k := range 48 {
			task := fmt.Sprintf("r%d/t%d", k%4, k)
			for i := range 4 {
				cells = append(cells, Cell{Seed: uint64(s + 1), State: fmt.Sprintf("%s#%d", task, i), Stratum: fmt.Sprintf("r%d", k%4),
					Task: task, Gains: []float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}})
			}
		}
	}
	return cells
}

func BenchmarkSummarize(b *testing.B) {
	cells := benchCells()
	for _, scheme := range []Scheme{StateLevel, Hierarchical} {
		b.Run(scheme.String(), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Scheme = scheme
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Summarize(cfg, "m", cells, rand.New(rand.NewPCG(1, 2))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A table of per-region summaries has a region column, and pairs are
// matched by method and region.
func TestTableRegions(t *testing.T) {
	sums := []Summary{
		{Method: "Base", Region: "in-distribution", Seeds: 2, States: 8, AvgK: Interval{-1, -2, 0}, Threshold: 2},
		{Method: "LM2LM", Region: "in-distribution", Seeds: 2, States: 8, AvgK: Interval{1, 0, 2}, Threshold: 2},
		{Method: "LM2LM", Region: "compute-rich", Seeds: 2, States: 4, AvgK: Interval{2, 1, 3}, Threshold: 2},
	}
	pairs := []Paired{
		{Method: "LM2LM", Against: "Base", Region: "compute-rich", Diff: Interval{3, 2, 4}, PImprove: Interval{1, 1, 1}},
		{Method: "LM2LM", Against: "Base", Region: "in-distribution", Diff: Interval{2, 1, 3}, PImprove: Interval{0.75, 0.5, 1}},
	}
	lines := strings.Split(strings.TrimSpace(Table(sums, pairs)), "\n")
	require.Len(t, lines, 5)
	require.Equal(t, "| method | region | seeds | states | Avg@K | Best@K | neg. rate | > 2σ_e | IQM | Δ vs Base | P(better than Base) |", lines[0])
	require.Equal(t, strings.Count(lines[0], "|"), strings.Count(lines[1], "|"))
	require.True(t, strings.HasPrefix(lines[3], "| LM2LM | in-distribution | 2 | 8 | +1.00 [+0.00, +2.00] |"), lines[3])
	require.True(t, strings.HasSuffix(lines[3], "| +2.00 [+1.00, +3.00] | 0.75 [0.50, 1.00] |"), lines[3])
	require.True(t, strings.HasSuffix(lines[4], "| +3.00 [+2.00, +4.00] | 1.00 [1.00, 1.00] |"), lines[4])
	require.True(t, strings.HasSuffix(lines[2], "| – | – |"), lines[2])
}
