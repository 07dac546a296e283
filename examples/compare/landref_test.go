package main

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

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
	st := &landStore{
		gains: landscape{
			"s/val/t1":     {"a": 3, "b": 1, "c": 0},
			"s/val/t2":     {"a": 0, "b": 2, "c": 1},
			"s/val-out/t3": {"a": 1, "b": 0, "c": 5},
			"s/train/t4":   {"a": 9, "b": 0, "c": 0}, // not evaluated
		},
		bySeed: [2]landscape{
			{"s/val/t1": {"a": 3, "b": 1, "c": 0}},
			{"s/val/t1": {"a": 1, "b": 2, "c": 0}},
		},
		tasks: map[string]records.Task{
			"s/val/t1": task("s/val/t1", 0), "s/val/t2": task("s/val/t2", 1), "s/val-out/t3": task("s/val-out/t3", 3),
			"s/train/t4": task("s/train/t4", 1),
		},
	}
	eval := func(t records.Task) bool { return !strings.Contains(t.ID, "/train/") }
	refs := landscapeRefs("v2-val", st, eval)
	type row struct {
		ref, part string
		tasks     int
		rank      float64
	}
	want := []row{
		{refOtherSeed, "all", 1, 2}, {refOtherSeed, "/val/", 1, 2},
		{refNearest, "all", 3, 7.0 / 3}, {refNearest, "/val/", 2, 2.5}, {refNearest, "/val-out/", 1, 2},
		{refRegionMean, "all", 2, 2.5}, {refRegionMean, "/val/", 2, 2.5},
		{refSplitMean, "all", 3, 3}, {refSplitMean, "/val/", 2, 3}, {refSplitMean, "/val-out/", 1, 3},
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

	var b strings.Builder
	judgementRefTable(&b, refs)
	require.Contains(t, b.String(), "| nearest task | all | 3 | 2.3 (2.0) |")

	require.Nil(t, landscapeRefs("v2-val", nil, eval), "no store, no references")
	require.Nil(t, landscapeRefs("v2-val", st, func(records.Task) bool { return false }), "no evaluated task")
	b.Reset()
	judgementRefTable(&b, nil)
	require.Empty(t, b.String())
}

// A ranking that never saw a mechanism puts it last; the best among
// unseen ones ties with them.
func TestLandscapeRefsUnseenMechanism(t *testing.T) {
	st := &landStore{
		gains: landscape{"s/val/t1": {"a": 1, "b": 5}, "s/val/t2": {"a": 2}},
		tasks: map[string]records.Task{"s/val/t1": {ID: "s/val/t1"}, "s/val/t2": {ID: "s/val/t2"}},
	}
	refs := landscapeRefs("v2-val", st, func(records.Task) bool { return true })
	found := false
	for _, r := range refs {
		if r.Reference == refSplitMean && r.Part == "all" {
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
