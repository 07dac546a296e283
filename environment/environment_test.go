package environment_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/records"
)

func tasks() []records.Task {
	return []records.Task{
		{ID: "a", Family: "f", Split: records.Train},
		{ID: "b", Family: "f", Split: records.HeldOut},
		{ID: "c", Family: "g", Split: records.Train},
		{ID: "d", Family: "g", Split: records.HeldOut},
	}
}

func cards() []records.Card {
	return []records.Card{
		{Mechanism: "lr", Params: []records.ParamSpec{{Name: "k", Kind: "float", Choices: []string{"2", "0.5"}}}},
		{Mechanism: "width", Params: []records.ParamSpec{{Name: "m", Kind: "float", Choices: []string{"2", "4", "8"}}}},
	}
}

func TestSplit(t *testing.T) {
	train, held := environment.Split(tasks())
	ids := func(ts []records.Task) (s []string) {
		for _, t := range ts {
			s = append(s, t.ID)
		}
		return s
	}
	require.Equal(t, []string{"a", "c"}, ids(train))
	require.Equal(t, []string{"b", "d"}, ids(held))
}

// DrawM0 depends on the seed: the same seed draws the same pairs, in
// order; each pair is distinct and on a training task; n beyond the pairs
// there are (2 tasks × (2 + 3) choices = 10) gives every pair once.
func TestDrawM0(t *testing.T) {
	train, _ := environment.Split(tasks())
	a := environment.DrawM0(7, train, cards(), 6)
	require.Equal(t, a, environment.DrawM0(7, train, cards(), 6))
	require.NotEqual(t, a, environment.DrawM0(8, train, cards(), 6))
	seen := map[string]bool{}
	for _, d := range a {
		k := d.Task.ID + "|" + d.Proposal.Key()
		require.False(t, seen[k], "duplicate %s", k)
		seen[k] = true
		require.Equal(t, records.Train, d.Task.Split)
	}
	require.Len(t, environment.DrawM0(7, train, cards(), 100), 10)
}

func TestReady(t *testing.T) {
	ts := tasks()
	refs := []environment.RefTask{{Task: ts[0]}, {Task: ts[1], LeftOut: "seed 1: diverged"}, {Task: ts[2]}}
	ready, left := environment.Ready(refs)
	require.Equal(t, []records.Task{ts[0], ts[2]}, ready)
	require.Len(t, left, 1)
	require.Equal(t, "b", left[0].ID)
	require.ErrorIs(t, left[0].Err, environment.ErrReference)
	require.ErrorContains(t, left[0].Err, "seed 1: diverged")
}

// M_0's draw is the same in every driver for the same seed, tasks and
// catalogue.
func ExampleDrawM0() {
	train, held := environment.Split(tasks())
	fmt.Println(len(train), "training tasks,", len(held), "held out")
	for _, d := range environment.DrawM0(1, train, cards(), 3) {
		fmt.Println(d.Task.ID, d.Proposal.Key())
	}
	// Output:
	// 2 training tasks, 2 held out
	// c lr{k=0.5}
	// c width{m=2}
	// c width{m=8}
}
