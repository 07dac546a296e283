package overlay

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// remember keeps at most limit entries, the newest, and its age list
// stays bounded however many keys pass through it.
func TestRememberBounds(t *testing.T) {
	m := map[string]int{}
	var age []string
	remember(m, &age, "a", 1, 2)
	remember(m, &age, "b", 2, 2)
	remember(m, &age, "b", 3, 2) // an update keeps its place
	require.Equal(t, map[string]int{"a": 1, "b": 3}, m)
	remember(m, &age, "c", 4, 2)
	require.Equal(t, map[string]int{"b": 3, "c": 4}, m, "the oldest goes")
	require.Equal(t, []string{"b", "c"}, age)
	for i := range 10_000 {
		remember(m, &age, fmt.Sprint(i), i, 2)
	}
	require.Len(t, m, 2)
	require.Equal(t, []string{"9998", "9999"}, age)
	require.LessOrEqual(t, cap(age), 4*2+1)
}

func TestMemoEntriesValidated(t *testing.T) {
	c := DefaultConfig()
	require.Equal(t, 1024, c.MemoEntries)
	c.Code, c.Allow, c.MemoEntries = "code", []string{"train.py"}, 0
	require.ErrorContains(t, c.Validate(), "MemoEntries")
}
