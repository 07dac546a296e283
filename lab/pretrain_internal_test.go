package lab

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// splitTasks returns every task of every split the lab evaluates on: the
// V2 suites under seeds 1 (training, v2-val, the V2 test split) and 2
// (v2-val2, and the rest of that suite), and the V3 splits.
func splitTasks() []TaskSpec {
	out := append(SuiteV2(DefaultSuiteSeed).All(), SuiteV2(2).All()...)
	return append(append(out, V3Val().Tasks...), V3Test().Tasks...)
}

// No pretraining task is a task of a split: not by ID, not by generator
// stream (so not by the draw either), not by its sampled recipe.
func TestPretrainTasksOutsideEverySplit(t *testing.T) {
	const perFamily = 64 // more than any corpus the lab builds
	tasks := PretrainTasks(perFamily)
	require.Len(t, tasks, perFamily*len(V2Families))
	ids := map[string]bool{}
	streams := map[[2]uint64]string{}
	recipes := map[string]string{}
	for _, x := range splitTasks() {
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
	require.Len(t, ids, 200+96)
	require.Len(t, streams, 200+96)
	v3a, _ := SplitStream(V3ValName + "/x")
	v3b, _ := SplitStream(V3TestName + "/x")
	for _, x := range tasks {
		require.True(t, strings.HasPrefix(x.ID, PretrainName+"/"+RegionIn+"/"), x.ID)
		require.False(t, ids[x.ID], "%s is a split's task", x.ID)
		a, b := SplitStream(x.ID)
		require.NotContains(t, []uint64{1, 2, v3a, v3b}, a, "%s: a split's first stream word", x.ID)
		require.NotContains(t, streams, [2]uint64{a, b}, "%s shares a split task's stream", x.ID)
		require.NotContains(t, recipes, recipe(x), "%s draws a split task's recipe", x.ID)
		require.Equal(t, RegionIn, RegionOf(x.ID))
		_, inV3 := SplitNamed(strings.SplitN(x.ID, "/", 2)[0])
		require.False(t, inV3)
	}
}

// recipe is a task's sampled spec without its ID and split.
func recipe(x TaskSpec) string {
	x.ID, x.Split = "", ""
	return fmt.Sprintf("%+v", x)
}

// Growing the corpus keeps its tasks: PretrainTasks(n) is a prefix of
// PretrainTasks(m) for n < m, and the draws are the in-distribution
// space's (budgets inside DefaultSpace's).
func TestPretrainTasksStable(t *testing.T) {
	small, big := PretrainTasks(2), PretrainTasks(5)
	require.Equal(t, small, big[:len(small)])
	require.Equal(t, "v2-pretrain/in-distribution/"+V2Families[0]+"/00", big[0].ID)
	sp := DefaultSpace()
	for _, x := range big {
		require.GreaterOrEqual(t, x.Budget, sp.Budget[0], x.ID)
		require.Less(t, x.Budget, sp.Budget[1], x.ID)
	}
}

// PretrainRuns keeps the corpus's real proposal runs in order, leaves its
// reference runs and other sources out, and refuses a run of any split
// task, naming it.
func TestPretrainRuns(t *testing.T) {
	corpus := records.Task{ID: PretrainName + "/in-distribution/ar-prose/00"}
	rec := func(task records.Task, mech string, src records.Source) records.Record {
		return records.Record{Task: task, Proposal: records.Proposal{Mechanism: mech}, Source: src}
	}
	rs := []records.Record{
		rec(corpus, records.NoChange, records.Reference),
		rec(corpus, "lr-scale", records.Real),
		rec(corpus, "warmup", records.Predicted),
		rec(corpus, "dropout", records.Real),
	}
	got, err := PretrainRuns(rs)
	require.NoError(t, err)
	require.Equal(t, []records.Record{rs[1], rs[3]}, got)
	empty, err := PretrainRuns(rs[:1])
	require.NoError(t, err)
	require.Empty(t, empty)
	for _, s := range splitTasks()[:3] {
		_, err := PretrainRuns(append(rs, rec(records.Task{ID: s.ID}, "lr-scale", records.Real)))
		require.ErrorIs(t, err, ErrNotPretrain)
		require.ErrorContains(t, err, fmt.Sprintf("%q", s.ID))
	}
}
