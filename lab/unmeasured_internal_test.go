package lab

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// No unmeasured task is a task of a split or of the pretraining corpus:
// not by ID, not by generator stream, not by its sampled recipe; each is a
// training task of the training space.
func TestUnmeasuredTasksOutsideEverySplit(t *testing.T) {
	const perFamily = 64
	tasks := UnmeasuredTasks(perFamily)
	require.Len(t, tasks, perFamily*len(V2Families))
	ids := map[string]bool{}
	streams := map[[2]uint64]string{}
	recipes := map[string]string{}
	for _, x := range append(splitTasks(), PretrainTasks(perFamily)...) {
		ids[x.ID] = true
		if strings.HasPrefix(x.ID, "v2s") {
			name, rest, _ := strings.Cut(x.ID, "/")
			seed := uint64(DefaultSuiteSeed)
			if name == "v2s2" {
				seed = 2
			}
			a, b := suiteStream(seed, "/"+rest)
			streams[[2]uint64{a, b}] = x.ID
		} else {
			a, b := SplitStream(x.ID)
			streams[[2]uint64{a, b}] = x.ID
		}
		recipes[recipe(x)] = x.ID
	}
	require.Len(t, ids, 200+96+perFamily*len(V2Families))
	sp := DefaultSpace()
	for _, x := range tasks {
		require.True(t, strings.HasPrefix(x.ID, UnmeasuredName+"/"+RegionIn+"/"), x.ID)
		require.Equal(t, records.Train, x.Split, x.ID)
		require.False(t, ids[x.ID], "%s is a split's or the corpus's task", x.ID)
		a, b := SplitStream(x.ID)
		require.NotContains(t, streams, [2]uint64{a, b}, "%s shares a task's stream", x.ID)
		require.NotContains(t, recipes, recipe(x), "%s draws another task's recipe", x.ID)
		require.GreaterOrEqual(t, x.Budget, sp.Budget[0], x.ID)
		require.Less(t, x.Budget, sp.Budget[1], x.ID)
	}
	small := UnmeasuredTasks(2)
	require.Equal(t, small, UnmeasuredTasks(5)[:len(small)], "growing keeps the tasks")
}

// Unmeasured runs nothing: b_e and σ_e are the medians of the family's
// measured tasks (hand-made here), the rest is the spec's as Task gives it.
func TestUnmeasured(t *testing.T) {
	specs := UnmeasuredTasks(1)
	cfg := DefaultConfig()
	cfg.Tasks = specs
	store := records.NewMemStore()
	l, err := New(cfg, store)
	require.NoError(t, err)
	spec := specs[0]
	measured := []records.Task{
		{ID: "a", Family: spec.Family, RefLoss: 2.0, SeedNoise: 0.010},
		{ID: "b", Family: "other", RefLoss: 9.0, SeedNoise: 0.900},
		{ID: "c", Family: spec.Family, RefLoss: 1.0, SeedNoise: 0.030},
		{ID: "d", Family: spec.Family, RefLoss: 4.0, SeedNoise: 0.020},
		{ID: "e", Family: spec.Family, RefLoss: 3.0, SeedNoise: 0.050},
	}
	task, err := l.Unmeasured(spec.ID, measured)
	require.NoError(t, err)
	require.Equal(t, spec.ID, task.ID)
	require.Equal(t, records.Train, task.Split)
	require.InDelta(t, 2.5, task.RefLoss, 1e-12)     // median of 1, 2, 3, 4
	require.InDelta(t, 0.025, task.SeedNoise, 1e-12) // median of 0.01, 0.02, 0.03, 0.05
	require.Equal(t, spec.Config.Steps, task.Budget)
	require.Equal(t, spec.Description(), task.Description)
	require.Equal(t, l.descriptors(spec), task.Descriptors)
	require.NoError(t, task.Validate())
	require.Zero(t, store.Len(), "no reference run was trained or stored")

	_, err = l.Unmeasured(spec.ID, measured[1:2])
	require.ErrorIs(t, err, ErrNoFamily)
	require.ErrorContains(t, err, spec.Family)
	_, err = l.Unmeasured("v2-unmeasured/nowhere", measured)
	require.ErrorIs(t, err, ErrUnknownTask)
}
