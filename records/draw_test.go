package records_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

func TestDrawChangesDistinct(t *testing.T) {
	// M_0 holds distinct (task, change) pairs: a repeated draw would add the
	// same record twice. Two tasks × one card of two choices give 4 pairs;
	// asking for 4 returns all of them, for 9 at most 4, and skipping one
	// leaves 3.
	tasks := []records.Task{{ID: "a"}, {ID: "b"}}
	cat := []records.Card{{Mechanism: "m", Params: []records.ParamSpec{{Name: "x", Choices: []string{"1", "2"}}}}}
	for _, n := range []int{4, 9} {
		got := records.DrawChanges(rand.New(rand.NewPCG(1, 2)), tasks, cat, n, nil)
		require.Len(t, got, 4)
		seen := map[string]bool{}
		for _, c := range got {
			require.False(t, seen[c.Key()], "repeated %q", c.Key())
			seen[c.Key()] = true
		}
	}
	skip := map[string]bool{records.TaskChange{Task: tasks[0], Proposal: records.Proposal{Mechanism: "m", Params: map[string]string{"x": "2"}}}.Key(): true}
	got := records.DrawChanges(rand.New(rand.NewPCG(1, 2)), tasks, cat, 4, skip)
	require.Len(t, got, 3)
	for _, c := range got {
		require.False(t, skip[c.Key()])
	}
	require.Empty(t, records.DrawChanges(rand.New(rand.NewPCG(1, 2)), tasks, cat, 0, nil))
}
