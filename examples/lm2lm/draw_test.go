package main

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

func TestDrawInitialDistinct(t *testing.T) {
	// M_0 holds distinct (task, change) pairs: the lab runs a change with a
	// fixed seed and the pool reuses stored runs, so a repeated draw would
	// add the same record twice. Two tasks × one card of two choices give 4
	// pairs; asking for 4 must return all of them, and for 9 at most 4.
	tasks := []records.Task{{ID: "a"}, {ID: "b"}}
	cat := []records.Card{{Mechanism: "m", Params: []records.ParamSpec{{Name: "x", Choices: []string{"1", "2"}}}}}
	for _, n := range []int{4, 9} {
		items := drawInitial(rand.New(rand.NewPCG(1, 2)), tasks, cat, n)
		require.Len(t, items, 4)
		seen := map[string]bool{}
		for _, it := range items {
			k := it.t.ID + " " + it.p.Key()
			require.False(t, seen[k], "repeated %s", k)
			seen[k] = true
		}
	}
}
