package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/records"
)

// A seed gives the same loss bit for bit on CPU, another seed another
// loss, and a known reference loss gives gain = reference − loss.
func TestTrainDeterministic(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	x := newSubprocess(t, t.TempDir(), 0)
	ctx := context.Background()
	j := jobWith(t, b, prop("lr-scale", "factor", "2"), func(s *Spec) { s.ReferenceLosses = map[string]float64{"1": 4.6, "9": 4.5} })
	a, err := x.Execute(ctx, j)
	require.NoError(t, err, "log:\n%s", a.Log)
	again, err := x.Execute(ctx, j)
	require.NoError(t, err)
	require.Equal(t, a.Loss, again.Loss, "same seed, same loss bit for bit")
	require.Equal(t, 4.6-a.Loss, a.Gain, "gain = reference loss of seed 1 − loss")
	require.Equal(t, []uint64{1}, a.Seeds)
	require.Greater(t, a.Cost.FLOPs, 0.0)
	require.Greater(t, a.Cost.DeviceSeconds, 0.0)
	require.Contains(t, a.Log, "on cpu")
	// A loss in bits per byte, below uniform (8) after 30 steps.
	require.Greater(t, a.Loss, 1.0)
	require.Less(t, a.Loss, 6.0)

	j.Seed = 9
	c, err := x.Execute(ctx, j)
	require.NoError(t, err)
	require.NotEqual(t, a.Loss, c.Loss)
	require.Equal(t, 4.5-c.Loss, c.Gain)
}

// Without a known reference loss the script trains the reference with the
// job's seed: the gain is exactly the no-change run's loss of that seed
// minus the proposal's (shared seeds), and the no-change run's gain is 0.
func TestTrainSharedSeedGain(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	x := newSubprocess(t, t.TempDir(), 0)
	ctx := context.Background()
	// The proposal's text is data: the script logs it as hex, byte for byte.
	text := "it's $(touch /tmp/pwned) `id` \"x\"\n\tüñí"
	none := jobWith(t, b, records.Proposal{Mechanism: records.NoChange, Text: text}, nil)
	none.Seed = 7
	ref, err := x.Execute(ctx, none)
	require.NoError(t, err, "log:\n%s", ref.Log)
	require.Equal(t, 0.0, ref.Gain)
	require.Contains(t, ref.Log, buildertest.TextLine(text))
	p := jobWith(t, b, prop("dropout", "p", "0.1"), nil)
	p.Seed = 7
	got, err := x.Execute(ctx, p)
	require.NoError(t, err, "log:\n%s", got.Log)
	require.Equal(t, ref.Loss-got.Loss, got.Gain)
	require.Contains(t, got.Log, "training the reference recipe with seed 7")
}

// A diverging recipe is infeasible (exit 3) with the script's reason.
func TestTrainDivergenceIsInfeasible(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	x := newSubprocess(t, t.TempDir(), 0)
	j := jobWith(t, b, records.Proposal{Mechanism: records.NoChange}, func(s *Spec) {
		s.Recipe.Optimizer, s.Recipe.LR, s.Recipe.GradClip, s.Recipe.Warmup = "sgd", 50, 0, 0
	})
	out, err := x.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrInfeasible, "log:\n%s", out.Log)
	require.Contains(t, out.Infeasible, "diverged")
}

func TestTrainProtocolClasses(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	x := newSubprocess(t, t.TempDir(), 0)
	for _, c := range []struct {
		name  string
		mod   func(*Spec)
		class error
	}{
		// The recipe is the proposal's: infeasible, checked before torch loads.
		{"invalid recipe", func(s *Spec) { s.Recipe.Heads = 5 }, builder.ErrInfeasible},
		// A spec the script cannot read is the caller's bug: failed (exit 2).
		{"bad spec", func(s *Spec) { s.Block = 0 }, builder.ErrFailed},
		// No such device here: transient (exit 75), another node may have it.
		{"no cuda", func(s *Spec) { s.Device = "cuda" }, builder.ErrTransient},
		// A lost corpus is infrastructure: transient.
		{"missing corpus", func(s *Spec) { s.Corpus = "/nonexistent/corpus.txt" }, builder.ErrTransient},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := x.Execute(context.Background(), jobWith(t, b, records.Proposal{Mechanism: records.NoChange}, c.mod))
			require.Error(t, err)
			require.Equal(t, c.class, builder.Class(err), "error: %v", err)
		})
	}
}

// A timeout and a cancellation stop the run and leave no process behind.
func TestTrainTimeoutAndCancel(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	long := func(s *Spec) { s.Recipe.Steps = 10_000_000 }
	t.Run("timeout", func(t *testing.T) {
		dir := t.TempDir()
		x := newSubprocess(t, dir, 3*time.Second)
		out, err := x.Execute(context.Background(), jobWith(t, b, records.Proposal{Mechanism: records.NoChange}, long))
		require.ErrorIs(t, err, builder.ErrTimedOut)
		require.ErrorIs(t, err, builder.ErrInfeasible)
		require.Equal(t, "timed out", out.Infeasible)
		requireNoProcesses(t, dir)
	})
	t.Run("cancel", func(t *testing.T) {
		dir := t.TempDir()
		x := newSubprocess(t, dir, 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go cancelWhenTraining(dir, cancel)
		_, err := x.Execute(ctx, jobWith(t, b, records.Proposal{Mechanism: records.NoChange}, long))
		require.ErrorIs(t, err, builder.ErrCancelled)
		require.ErrorIs(t, err, context.Canceled)
		requireNoProcesses(t, dir)
	})
}

// References measures b_e and σ_e with the reference seeds (METHOD.md §1
// Vocabulary), stores the runs as records.Reference, passes their losses
// to later jobs, and a second call reuses the stored runs.
func TestReferences(t *testing.T) {
	requireTorch(t)
	b := newTestBuilder(t, nil)
	x := newSubprocess(t, t.TempDir(), 0)
	store := records.NewMemStore()
	ctx := context.Background()
	tasks, err := References(ctx, b, x, store, 2)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	rs, err := store.Scan(ctx, records.Filter{TaskID: testTask.ID, Source: records.Reference})
	require.NoError(t, err)
	require.Len(t, rs, 3)
	losses := map[uint64]float64{}
	var ls []float64
	for _, r := range rs {
		losses[r.Seeds[0]] = r.Loss
		ls = append(ls, r.Loss)
		require.Equal(t, tasks[0].RefLoss-r.Loss, r.Gain)
	}
	mean, std := stat.MeanStd(ls)
	require.Equal(t, mean, tasks[0].RefLoss)
	require.Equal(t, std, tasks[0].SeedNoise)
	j, err := b.Build(ctx, tasks[0], prop("lr-scale", "factor", "2"))
	require.NoError(t, err)
	var s Spec
	require.NoError(t, json.Unmarshal(j.Spec, &s))
	require.Equal(t, map[string]float64{"1": losses[1], "2": losses[2], "3": losses[3]}, s.ReferenceLosses)

	again, err := References(ctx, b, x, store, 2)
	require.NoError(t, err)
	require.Equal(t, tasks, again)
	rs, err = store.Scan(ctx, records.Filter{TaskID: testTask.ID})
	require.NoError(t, err)
	require.Len(t, rs, 3, "the second call reuses the stored runs")
}
