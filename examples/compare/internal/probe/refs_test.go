package probe

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/records"
)

// stratum is a task's part of lab v2's validation split ("" for none),
// and order puts "all" first, then in before out of distribution.
func stratum(task string) string {
	for _, part := range []string{"/val/", "/val-out/"} {
		if strings.Contains(task, part) {
			return part
		}
	}
	return ""
}

func order(part string) int {
	return map[string]int{"all": -1, "/val/": 0, "/val-out/": 1}[part]
}

// The references by hand on three tasks of mechanisms a, b, c: t1 and t2
// in v2-val's in-distribution part, t3 out of it; one descriptor x = 0, 1,
// 3 (t1's nearest task is t2, t2's t1, t3's t2); t1 alone has two seeds.
//
//	t1: a 3, b 1, c 0 (best a); seeds: {a 3, b 1, c 0} and {a 1, b 2, c 0}
//	t2: a 0, b 2, c 1 (best b)
//	t3: a 1, b 0, c 5 (best c)
//
// Other seed (t1): seed 1's scores put seed 2's best b second, and seed
// 2's scores put seed 1's best a second: 2. Nearest task: t1 by t2's
// landscape ranks a third, t2 by t1's ranks b second, t3 by t2's ranks c
// second (b above): all 7/3, in 5/2, out 2. Region mean: t1 by t2 (3), t2
// by t1 (2); t3 has no other task in its part and is left out. Split mean:
// t1 by (t2+t3)/2 = {a ½, b 1, c 3}: 3; t2 by {a 2, b ½, c 2½}: 3; t3 by
// {a 1½, b 1½, c ½}: 3. Chance is 2 throughout.
func TestLandscapeRefs(t *testing.T) {
	task := func(id string, x float64) records.Task {
		return records.Task{ID: id, Family: "f", Split: records.HeldOut, Descriptors: map[string]float64{"x": x, "same": 7}}
	}
	land := &landscape.Landscape{
		Gains: landscape.Gains{
			"s/val/t1":     {"a": 3, "b": 1, "c": 0},
			"s/val/t2":     {"a": 0, "b": 2, "c": 1},
			"s/val-out/t3": {"a": 1, "b": 0, "c": 5},
			"s/train/t4":   {"a": 9, "b": 0, "c": 0}, // not evaluated
		},
		BySeed: [2]landscape.Gains{
			{"s/val/t1": {"a": 3, "b": 1, "c": 0}},
			{"s/val/t1": {"a": 1, "b": 2, "c": 0}},
		},
		Tasks: map[string]records.Task{
			"s/val/t1": task("s/val/t1", 0), "s/val/t2": task("s/val/t2", 1), "s/val-out/t3": task("s/val-out/t3", 3),
			"s/train/t4": task("s/train/t4", 1),
		},
	}
	eval := func(t records.Task) bool { return !strings.Contains(t.ID, "/train/") }
	refs := References(land, eval, stratum, order)
	type row struct {
		ref, part string
		tasks     int
		rank      float64
	}
	want := []row{
		{RefOtherSeed, "all", 1, 2}, {RefOtherSeed, "/val/", 1, 2},
		{RefNearest, "all", 3, 7.0 / 3}, {RefNearest, "/val/", 2, 2.5}, {RefNearest, "/val-out/", 1, 2},
		{RefRegionMean, "all", 2, 2.5}, {RefRegionMean, "/val/", 2, 2.5},
		{RefSplitMean, "all", 3, 3}, {RefSplitMean, "/val/", 2, 3}, {RefSplitMean, "/val-out/", 1, 3},
	}
	require.Len(t, refs, len(want))
	for i, w := range want {
		r := refs[i]
		require.Equal(t, w.ref, r.Reference, "row %d", i)
		require.Equal(t, w.part, r.Part, "row %d", i)
		require.Equal(t, w.tasks, r.Tasks, "row %d", i)
		require.InDelta(t, w.rank, r.BestRank, 1e-12, "row %d %s %s", i, w.ref, w.part)
		require.InDelta(t, 2.0, r.ChanceRank, 1e-12, "row %d", i)
	}

	require.Nil(t, References(nil, eval, stratum, order), "no store, no references")
	require.Nil(t, References(land, func(records.Task) bool { return false }, stratum, order), "no evaluated task")
}

// A ranking that never saw a mechanism puts it last; the best among
// unseen ones ties with them.
func TestLandscapeRefsUnseenMechanism(t *testing.T) {
	land := &landscape.Landscape{
		Gains: landscape.Gains{"s/val/t1": {"a": 1, "b": 5}, "s/val/t2": {"a": 2}},
		Tasks: map[string]records.Task{"s/val/t1": {ID: "s/val/t1"}, "s/val/t2": {ID: "s/val/t2"}},
	}
	refs := References(land, func(records.Task) bool { return true }, stratum, order)
	found := false
	for _, r := range refs {
		if r.Reference == RefSplitMean && r.Part == "all" {
			// t1 by t2's {a 2}: b unseen, ranked 2 of 2; t2 by t1's {a 1, b 5}: a's rank 1 of 1.
			require.Equal(t, 2, r.Tasks)
			require.InDelta(t, 1.5, r.BestRank, 1e-12)
			require.InDelta(t, 1.25, r.ChanceRank, 1e-12)
			require.False(t, math.IsNaN(r.BestRank))
			found = true
		}
	}
	require.True(t, found, "the split mean over all tasks is reported")
}
