package evalstat

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// powerCells: two seeds, two tasks of one region, two states each; cell
// means [[2, 5], [2, 8]].
func powerCells() []Cell {
	v := map[uint64]map[string][]float64{
		1: {"A": {1, 3}, "B": {4, 6}},
		2: {"A": {2, 2}, "B": {9, 7}},
	}
	var cells []Cell
	for _, s := range []uint64{1, 2} {
		for _, t := range []string{"A", "B"} {
			for i, x := range v[s][t] {
				cells = append(cells, Cell{Seed: s, State: fmt.Sprintf("%s#%d", t, i), Task: t, Gains: []float64{x}})
			}
		}
	}
	return cells
}

// Derived by hand: within SS 6 on 4 df (State 1.5, n̄ 2); grand mean
// 4.25, seed means 3.5 and 5 (MS_seed 2·1.125 = 2.25), task means 2 and
// 6.5 (MS_task 2·10.125 = 20.25), interaction residuals ±0.75 (MS_inter
// 2.25 on 1 df): SeedTask 2.25 − 0.75 = 1.5, Seed (2.25 − 2.25)/2 = 0,
// Task (20.25 − 2.25)/2 = 9. For 2 seeds × 2 states the variance of the
// mean is 0 + 9/2 + 1.5/4 + 1.5/8 = 5.0625, so the 95% half-width is
// 1.959964 × 2.25.
func TestVarianceComponentsByHand(t *testing.T) {
	c, err := VarianceComponents(powerCells())
	require.NoError(t, err)
	require.Equal(t, 2, c.Seeds)
	require.Equal(t, 2, c.Tasks)
	require.Equal(t, 1, c.Regions)
	require.InDelta(t, 2, c.States, 1e-12)
	require.InDelta(t, 1.5, c.State, 1e-12)
	require.InDelta(t, 1.5, c.SeedTask, 1e-12)
	require.InDelta(t, 0, c.Seed, 1e-12)
	require.InDelta(t, 9, c.Task, 1e-12)
	require.InDelta(t, 1.959963984540054*2.25, c.HalfWidth(0.95, 2, 2), 1e-9)
	// Four times the seeds and states: 9/2 + 1.5/(8·2) + 1.5/(8·2·8).
	require.InDelta(t, 1.959963984540054*math.Sqrt(4.5+1.5/16+1.5/128), c.HalfWidth(0.95, 8, 8), 1e-9)
	require.True(t, math.IsNaN(c.HalfWidth(0.95, 0, 2)))
	require.True(t, math.IsNaN(c.HalfWidth(1, 2, 2)))
}

// Regions take the between-region spread out of the task term: two
// regions of two tasks each, where tasks differ only by region, have no
// task variance.
func TestVarianceComponentsWithinRegions(t *testing.T) {
	var cells []Cell
	for s := uint64(1); s <= 3; s++ {
		for j, task := range []string{"a1", "a2", "b1", "b2"} {
			region, level := "a", 0.0
			if j >= 2 {
				region, level = "b", 10.0
			}
			for i := range 2 {
				x := level + float64(i) // states 0 and 1 in every cell
				cells = append(cells, Cell{Seed: s, State: fmt.Sprintf("%s#%d", task, i), Stratum: region, Task: task, Gains: []float64{x}})
			}
		}
	}
	c, err := VarianceComponents(cells)
	require.NoError(t, err)
	require.Equal(t, 2, c.Regions)
	require.InDelta(t, 0.5, c.State, 1e-12) // (0.25 + 0.25)/1 per cell
	require.InDelta(t, 0, c.Task, 1e-12)
	require.InDelta(t, 0, c.Seed, 1e-12)
	require.InDelta(t, 0, c.SeedTask, 1e-12)
}

func TestVarianceComponentsErrors(t *testing.T) {
	one := []Cell{{Seed: 1, State: "a#0", Task: "a", Gains: []float64{1}}, {Seed: 1, State: "b#0", Task: "b", Gains: []float64{2}}}
	_, err := VarianceComponents(one)
	require.ErrorIs(t, err, ErrData) // one seed
	_, err = VarianceComponents([]Cell{{Seed: 1, State: "x", Gains: []float64{1}}})
	require.ErrorIs(t, err, ErrData) // no task
	_, err = VarianceComponents([]Cell{{Seed: 1, State: "x", Task: "a"}})
	require.ErrorIs(t, err, ErrData) // no gains
	single := []Cell{
		{Seed: 1, State: "a#0", Task: "a", Gains: []float64{1}}, {Seed: 1, State: "b#0", Task: "b", Gains: []float64{2}},
		{Seed: 2, State: "a#0", Task: "a", Gains: []float64{1}}, {Seed: 2, State: "b#0", Task: "b", Gains: []float64{3}},
	}
	_, err = VarianceComponents(single)
	require.ErrorIs(t, err, ErrData) // one state per (seed, task)
	split := append(powerCells(), Cell{Seed: 1, State: "A#9", Stratum: "other", Task: "A", Gains: []float64{0}})
	_, err = VarianceComponents(split)
	require.ErrorIs(t, err, ErrData) // task in two regions
}

// A task some seed lacks is left out of the estimate.
func TestVarianceComponentsDropsIncompleteTasks(t *testing.T) {
	cells := append(powerCells(), Cell{Seed: 1, State: "C#0", Task: "C", Gains: []float64{100}}, Cell{Seed: 1, State: "C#1", Task: "C", Gains: []float64{-100}})
	c, err := VarianceComponents(cells)
	require.NoError(t, err)
	want, _ := VarianceComponents(powerCells())
	require.Equal(t, want, c)
}

// Properties: a constant shift changes nothing; scaling by k scales every
// component by k²; a per-seed offset moves only the seed term.
func TestVarianceComponentsProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		S := rapid.IntRange(2, 4).Draw(rt, "seeds")
		T := rapid.IntRange(2, 5).Draw(rt, "tasks")
		n := rapid.IntRange(2, 3).Draw(rt, "states")
		shift := rapid.Float64Range(-5, 5).Draw(rt, "shift")
		k := rapid.Float64Range(0.1, 4).Draw(rt, "scale")
		var base, shifted, scaled, offset []Cell
		for s := range S {
			off := float64(s) * 3
			for j := range T {
				for i := range n {
					x := rapid.Float64Range(-6, 6).Draw(rt, "x")
					c := Cell{Seed: uint64(s + 1), State: fmt.Sprintf("t%d#%d", j, i), Task: fmt.Sprintf("t%d", j)}
					base = append(base, withGain(c, x))
					shifted = append(shifted, withGain(c, x+shift))
					scaled = append(scaled, withGain(c, k*x))
					offset = append(offset, withGain(c, x+off))
				}
			}
		}
		b, err := VarianceComponents(base)
		require.NoError(rt, err)
		sh, _ := VarianceComponents(shifted)
		sc, _ := VarianceComponents(scaled)
		of, _ := VarianceComponents(offset)
		tol := 1e-9 * (1 + b.State + b.Task + b.Seed + b.SeedTask)
		for _, p := range [][2]float64{{b.State, sh.State}, {b.Task, sh.Task}, {b.Seed, sh.Seed}, {b.SeedTask, sh.SeedTask}} {
			require.InDelta(rt, p[0], p[1], tol)
		}
		for _, p := range [][2]float64{{b.State, sc.State}, {b.Task, sc.Task}, {b.Seed, sc.Seed}, {b.SeedTask, sc.SeedTask}} {
			require.InDelta(rt, k*k*p[0], p[1], tol*k*k)
		}
		require.InDelta(rt, b.State, of.State, tol)
		require.InDelta(rt, b.Task, of.Task, tol)
		require.InDelta(rt, b.SeedTask, of.SeedTask, tol)
		// More seeds or states never widen the predicted interval.
		require.LessOrEqual(rt, b.HalfWidth(0.95, S+1, n), b.HalfWidth(0.95, S, n)+1e-12)
		require.LessOrEqual(rt, b.HalfWidth(0.95, S, n+1), b.HalfWidth(0.95, S, n)+1e-12)
	})
}

func withGain(c Cell, x float64) Cell { c.Gains = []float64{x}; return c }

// Data drawn from known components: the estimates recover them, and the
// predicted half-width matches the Hierarchical bootstrap's on the same
// design within a tenth.
func TestVarianceComponentsRecoversKnown(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const S, T, n = 12, 48, 4
	sd := struct{ seed, task, inter, state float64 }{0.4, 0.8, 0.3, 1.5}
	taskEff := make([]float64, T)
	for j := range taskEff {
		taskEff[j] = sd.task * r.NormFloat64()
	}
	var cells []Cell
	for s := range S {
		se := sd.seed * r.NormFloat64()
		for j := range T {
			ie := sd.inter * r.NormFloat64()
			for i := range n {
				x := se + taskEff[j] + ie + sd.state*r.NormFloat64()
				cells = append(cells, Cell{Seed: uint64(s), State: fmt.Sprintf("%d#%d", j, i), Task: fmt.Sprint(j), Gains: []float64{x}})
			}
		}
	}
	c, err := VarianceComponents(cells)
	require.NoError(t, err)
	require.InDelta(t, sd.state*sd.state, c.State, 0.15)
	require.InDelta(t, sd.task*sd.task, c.Task, 0.3)
	require.InDelta(t, sd.inter*sd.inter, c.SeedTask, 0.1)
	require.InDelta(t, sd.seed*sd.seed, c.Seed, 0.15)
	s, err := Summarize(hier(2000, 0.95), "m", cells, rand.New(rand.NewPCG(5, 6)))
	require.NoError(t, err)
	boot := (s.AvgK.High - s.AvgK.Low) / 2
	require.InDelta(t, boot, c.HalfWidth(0.95, S, n), 0.1*boot)
}

func TestDifferences(t *testing.T) {
	a := []Cell{
		{Seed: 1, State: "x#0", Stratum: "in", Task: "x", Gains: []float64{1, 3}},
		{Seed: 1, State: "x#1", Stratum: "in", Task: "x", Gains: []float64{0}},
		{Seed: 2, State: "x#0", Stratum: "in", Task: "x", Gains: []float64{4}},
	}
	b := []Cell{
		{Seed: 1, State: "x#0", Stratum: "in", Task: "x", Gains: []float64{-1}},
		{Seed: 2, State: "x#0", Stratum: "in", Task: "x", Gains: []float64{1, 2}},
	}
	d, err := Differences(a, b)
	require.NoError(t, err)
	require.Equal(t, []Cell{
		{Seed: 1, State: "x#0", Stratum: "in", Task: "x", Gains: []float64{3}},
		{Seed: 2, State: "x#0", Stratum: "in", Task: "x", Gains: []float64{2.5}},
	}, d)
	_, err = Differences(a[1:2], b)
	require.True(t, errors.Is(err, ErrEmpty))
	bad := []Cell{{Seed: 1, State: "x#0", Stratum: "out", Task: "x", Gains: []float64{0}}}
	_, err = Differences(a, bad)
	require.ErrorIs(t, err, ErrData)
}
