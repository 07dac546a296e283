package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/labtest"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// The default V2 suite: ≥ 64 training, ≥ 16 validation and
// ≥ 16 test tasks over ≥ 4 families, every family in every part, an
// out-of-distribution test part whose budgets no other part reaches, and
// valid tasks.
func TestSuiteV2Shape(t *testing.T) {
	s := lab.SuiteV2(lab.DefaultSuiteSeed)
	require.Len(t, s.Train, 64)
	require.Len(t, s.Validation, 16)
	require.Len(t, s.ValidationOut, 4)
	require.Len(t, s.Val(), 20)
	require.Len(t, s.TestIn, 8)
	require.Len(t, s.TestOut, 8)
	require.Len(t, s.Test(), 16)
	require.Equal(t, 100, len(s.All()))
	require.Equal(t, lab.V2Families, lab.Families(s.All()))
	for _, part := range [][]lab.TaskSpec{s.Train, s.Validation, s.ValidationOut, s.TestIn, s.TestOut} {
		require.ElementsMatch(t, lab.V2Families, lab.Families(part))
	}
	cfg := lab.DefaultConfig()
	cfg.Tasks = s.All()
	require.NoError(t, cfg.Validate())

	sp := lab.DefaultSpace()
	ood := sp.OutOfDistribution()
	require.Less(t, ood.Budget[1], sp.Budget[0]+1)
	in := append(append(append([]lab.TaskSpec(nil), s.Train...), s.Validation...), s.TestIn...)
	for _, x := range in {
		require.GreaterOrEqual(t, x.Budget, sp.Budget[0], x.ID)
		require.Less(t, x.Budget, sp.Budget[1], x.ID)
	}
	for _, x := range append(append([]lab.TaskSpec(nil), s.ValidationOut...), s.TestOut...) {
		require.GreaterOrEqual(t, x.Budget, ood.Budget[0], x.ID)
		require.Less(t, x.Budget, ood.Budget[1], x.ID)
	}
	var objectives, corpora, optimisers = map[model.Objective]int{}, map[string]int{}, map[string]int{}
	var sliced, full int
	for _, x := range s.All() {
		require.Equal(t, x.Split == records.Train, strings.Contains(x.ID, "/train/"), x.ID)
		require.Equal(t, x.Config.Steps, model.BudgetSteps(x.Config, x.Budget), x.ID)
		require.GreaterOrEqual(t, x.Config.Steps, sp.MinSteps, x.ID)
		require.LessOrEqual(t, x.Config.Steps, sp.MaxSteps, x.ID)
		objectives[x.Config.Objective]++
		corpora[x.Corpus]++
		optimisers[x.Config.Optimizer]++
		if x.DataBytes > 0 {
			sliced++
			require.GreaterOrEqual(t, x.DataBytes, sp.DataBytes[0])
			require.LessOrEqual(t, x.DataBytes, sp.DataBytes[1])
		} else {
			full++
		}
		lr := math.Log10(x.Config.LR)
		require.True(t, lr > -5 && lr < 0.3, "%s lr %g", x.ID, x.Config.LR)
		if x.Config.Optimizer == "momentum" {
			require.Equal(t, 1.0, x.Config.ClipNorm)
		}
	}
	require.Len(t, objectives, 2)
	require.Len(t, corpora, 3)
	require.Len(t, optimisers, 4)
	require.Greater(t, sliced, 40)
	require.Greater(t, full, 15)
}

// Generation is deterministic for a seed, differs across seeds, and a task
// does not change when the suite's other parts grow (stable IDs).
func TestSuiteV2Deterministic(t *testing.T) {
	a, b := lab.SuiteV2(1), lab.SuiteV2(1)
	require.Equal(t, a, b)
	c := lab.SuiteV2(2)
	require.NotEqual(t, a.Train[0].Config, c.Train[0].Config)
	require.Equal(t, "v2s1/train/ar-prose/00", a.Train[0].ID)
	require.Equal(t, "v2s2/val/mdm/03", c.Validation[15].ID)
	sizes := lab.DefaultSuiteSizes()
	sizes.Train = 20
	big := lab.GenerateSuite(lab.DefaultSpace(), sizes, 1)
	byID := map[string]lab.TaskSpec{}
	for _, x := range big.All() {
		byID[x.ID] = x
	}
	for _, x := range a.All() {
		require.Equal(t, x, byID[x.ID], x.ID)
	}
}

// A budgeted task trains every proposal for the steps its own
// configuration's FLOPs allow: doubling the width trains fewer steps, a
// smaller batch more, within one step of the budget.
func TestBudgetedBuild(t *testing.T) {
	s := lab.SuiteV2(1)
	spec := s.Validation[0]
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{spec}
	l, err := lab.New(cfg, records.NewMemStore())
	require.NoError(t, err)
	task := records.Task{ID: spec.ID}
	for _, text := range []string{"model-scale factor=2", "batch-size factor=0.25", "warmup frac=0.1", "depth add=2"} {
		p, err := lab.ParseProposal(text)
		require.NoError(t, err)
		j, err := l.Build(context.Background(), task, p)
		require.NoError(t, err)
		var c model.Config
		require.NoError(t, json.Unmarshal(j.Spec, &c))
		per := model.StepFLOPs(c)
		require.LessOrEqual(t, model.TrainFLOPs(c), spec.Budget*(1+1e-9), text)
		require.Greater(t, model.TrainFLOPs(c)+per, spec.Budget, text)
	}
	j, err := l.Build(context.Background(), task, records.Proposal{Mechanism: records.NoChange})
	require.NoError(t, err)
	var c model.Config
	require.NoError(t, json.Unmarshal(j.Spec, &c))
	require.Equal(t, spec.Config, c, "no change keeps the reference")
}

func TestDescriptors(t *testing.T) {
	for _, x := range lab.SuiteV2(1).All() {
		d := x.Descriptors(500_000)
		task := records.Task{ID: x.ID, Split: x.Split, Metric: x.Metric(), RefLoss: 1, SeedNoise: 1, Descriptors: d}
		require.NoError(t, task.Validate())
		require.Equal(t, math.Log10(x.Config.LR), d[lab.DescLog10LR])
		require.Equal(t, math.Log10(x.Budget), d[lab.DescLog10Budget])
		require.InDelta(t, 1, d["corpus_prose"]+d["corpus_code"]+d["corpus_markup"], 0)
		require.InDelta(t, 1, d["objective_ar"]+d["objective_mdm"]+d["objective_centre"], 0)
		data := 500_000.0
		if x.DataBytes > 0 {
			data = float64(x.DataBytes)
		}
		require.InDelta(t, float64(x.Config.Steps*x.Config.Batch)/data, d[lab.DescEpochs], 1e-12)
		require.NotContains(t, x.Description(), "/")
	}
	// Hand-checked values on the default configuration.
	spec := lab.TaskSpec{ID: "x", Corpus: corpus.Opticks, Config: model.DefaultConfig(), DataBytes: 64 << 10}
	d := spec.Descriptors(1 << 20)
	require.Equal(t, 1000.0*64/65536, d[lab.DescEpochs])
	require.Equal(t, 1000.0*64/30432, d[lab.DescTokensPerParam])
	require.Equal(t, 1.0, d["corpus_prose"])
	require.Equal(t, 1.0, d["opt_adam"])
	require.Equal(t, 128.0, d[lab.DescWidth])
	// A file corpus needs a kind and is described by it, not its path.
	file := lab.TaskSpec{ID: "f", Family: "ar-file", Corpus: "/data/notes.txt", Split: records.Train, Config: model.DefaultConfig()}
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{file}
	require.ErrorIs(t, cfg.Validate(), lab.ErrInvalidConfig)
	file.Kind = corpus.KindProse
	cfg.Tasks = []lab.TaskSpec{file}
	require.NoError(t, cfg.Validate())
	require.NotContains(t, file.Description(), "notes.txt")
	require.Contains(t, file.Description(), "a text file of prose")
}

func ExampleSuiteV2() {
	s := lab.SuiteV2(lab.DefaultSuiteSeed)
	fmt.Println(len(s.Train), len(s.Validation), len(s.ValidationOut), len(s.TestIn), len(s.TestOut))
	fmt.Println(lab.Families(s.All()))
	fmt.Println(s.Validation[0].ID, s.Validation[0].Split)
	// Output:
	// 64 16 4 8 8
	// [ar-prose ar-code ar-markup mdm]
	// v2s1/val/ar-prose/00 held-out
}

// Ready trains the references of the tasks in order, leaves out (and
// reports) a task whose reference diverges, and counts every task handled.
func TestReadyLeavesOutDivergedTasks(t *testing.T) {
	good := lab.SuiteV2(1).Train[1]
	hot := labtest.DivergingTwin(good)
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{hot, good}
	l, err := lab.New(cfg, records.NewMemStore())
	require.NoError(t, err)
	var done int
	tasks, out, err := l.Ready(context.Background(), []string{hot.ID, good.ID}, func() { done++ })
	require.NoError(t, err)
	require.Equal(t, 2, done)
	require.Len(t, tasks, 1)
	require.Equal(t, good.ID, tasks[0].ID)
	require.Positive(t, tasks[0].SeedNoise)
	require.Len(t, out, 1)
	require.Equal(t, hot.ID, out[0].ID)
	require.ErrorIs(t, out[0].Err, lab.ErrReference)

	_, _, err = l.Ready(context.Background(), []string{"no-such-task"}, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, lab.ErrReference)
}
