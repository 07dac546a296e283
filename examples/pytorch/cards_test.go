package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

func prop(mech string, kv ...string) records.Proposal {
	p := records.Proposal{Mechanism: mech, Params: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Params[kv[i]] = kv[i+1]
	}
	return p
}

func TestApplyEdits(t *testing.T) {
	base := BaseRecipe() // lr 0.01, width 32, heads 2, batch 16, steps 160, warm-up 10, context 32
	for _, c := range []struct {
		name string
		p    records.Proposal
		want func(r *Recipe)
	}{
		{"lr-scale", prop("lr-scale", "factor", "2"), func(r *Recipe) { r.LR = 0.02 }},
		{"warmup", prop("warmup", "frac", "0.2"), func(r *Recipe) { r.Warmup = 32 }},
		{"schedule", prop("schedule", "name", "Linear"), func(r *Recipe) { r.Schedule = "linear" }},
		{"width", prop("width", "factor", "1.5"), func(r *Recipe) { r.Width = 48 }},
		{"depth", prop("depth", "delta", "-1"), func(r *Recipe) { r.Depth = 1 }},
		// Fixed tokens: 16×160 windows either way; the warm-up keeps its 1/16 share.
		{"batch-size", prop("batch-size", "factor", "2"), func(r *Recipe) { r.Batch, r.Steps, r.Warmup = 32, 80, 5 }},
		{"context", prop("context", "factor", "2"), func(r *Recipe) { r.Context, r.Batch = 64, 8 }},
		{"sgd", prop("sgd", "lr_factor", "30", "momentum", "0.9"), func(r *Recipe) { r.Optimizer, r.Beta1, r.LR = "sgd", 0.9, 0.3 }},
		{"tie", prop("tie-embeddings", "tied", "false"), func(r *Recipe) { r.TieEmbeddings = false }},
		{"longer", prop("longer-training", "factor", "1.5"), func(r *Recipe) { r.Steps, r.Warmup = 240, 15 }},
		{"no change", records.Proposal{Mechanism: records.NoChange}, func(*Recipe) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Apply(base, c.p)
			require.NoError(t, err)
			want := base
			c.want(&want)
			require.InDelta(t, want.LR, got.LR, 1e-15)
			got.LR = want.LR
			require.Equal(t, want, got)
		})
	}
}

func TestApplyInfeasible(t *testing.T) {
	for name, p := range map[string]records.Proposal{
		"unknown card":       prop("quantum-annealing", "x", "1"),
		"missing parameter":  prop("lr-scale"),
		"unknown parameter":  prop("lr-scale", "factor", "2", "extra", "1"),
		"out of range":       prop("lr-scale", "factor", "1000"),
		"not a number":       prop("lr-scale", "factor", "fast"),
		"not finite":         prop("lr-scale", "factor", "NaN"),
		"not an integer":     prop("depth", "delta", "1.5"),
		"enum choice":        prop("activation", "name", "tanh"),
		"heads do not split": prop("heads", "n", "3"),
		"depth below one":    prop("depth", "delta", "-2"),
		"no-change params":   prop(records.NoChange, "x", "1"),
		"recipe bound":       prop("init-std", "factor", "50"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Apply(BaseRecipe(), p)
			require.ErrorIs(t, err, builder.ErrInfeasible)
		})
	}
}

// Every card's every choice applies to every task's reference or is
// reported infeasible, and the policy's catalogue is well formed.
func TestCatalogueChoices(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Catalogue() {
		require.False(t, seen[c.Mechanism], "card %s listed twice", c.Mechanism)
		seen[c.Mechanism] = true
		require.NotNil(t, c.Prior)
		require.NotEmpty(t, c.Description)
		for _, ps := range c.Params {
			require.NotEmpty(t, ps.Choices, "%s.%s", c.Mechanism, ps.Name)
		}
		for _, ts := range Tasks("/p", "/c", 4) {
			for _, p := range proposals(c) {
				r, err := Apply(ts.Reference, p)
				if err != nil {
					require.ErrorIs(t, err, builder.ErrInfeasible, "%s on %s", p.Key(), ts.Task.ID)
					continue
				}
				require.NoError(t, r.Validate(), "%s on %s", p.Key(), ts.Task.ID)
			}
		}
	}
	require.Len(t, seen, len(catalogue))
}

// proposals lists every combination of c's choices.
func proposals(c records.Card) []records.Proposal {
	out := []records.Proposal{{Mechanism: c.Mechanism, Params: map[string]string{}}}
	for _, ps := range c.Params {
		var next []records.Proposal
		for _, p := range out {
			for _, ch := range ps.Choices {
				q := records.Proposal{Mechanism: c.Mechanism, Params: map[string]string{ps.Name: ch}}
				for k, v := range p.Params {
					q.Params[k] = v
				}
				next = append(next, q)
			}
		}
		out = next
	}
	return out
}

func TestBuild(t *testing.T) {
	b := newTestBuilder(t, nil)
	ctx := context.Background()
	j, err := b.Build(ctx, testTask, prop("lr-scale", "factor", "0.5"))
	require.NoError(t, err)
	require.Equal(t, uint64(1), j.Seed, "the first reference seed: gains share it")
	var s Spec
	require.NoError(t, json.Unmarshal(j.Spec, &s))
	require.InDelta(t, 0.005, s.Recipe.LR, 1e-15)
	require.Equal(t, testRecipe(), *s.Reference)
	require.Nil(t, s.ReferenceLosses)
	require.Equal(t, "auto", s.Device)
	require.Equal(t, 2048, s.EvalBytes)

	b.SetReference(testTask.ID, 1, 3.25)
	b.SetReference(testTask.ID, 2, 3.5)
	j, err = b.Build(ctx, testTask, records.Proposal{Mechanism: records.NoChange})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(j.Spec, &s))
	require.Equal(t, map[string]float64{"1": 3.25, "2": 3.5}, s.ReferenceLosses)
	require.Equal(t, testRecipe(), s.Recipe)

	_, err = b.Build(ctx, records.Task{ID: "nope"}, records.Proposal{Mechanism: records.NoChange})
	require.ErrorIs(t, err, ErrUnknownTask)
	_, err = b.Build(ctx, testTask, prop("heads", "n", "5"))
	require.ErrorIs(t, err, builder.ErrInfeasible)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Build(cctx, testTask, records.Proposal{Mechanism: records.NoChange})
	require.True(t, errors.Is(err, builder.ErrCancelled) && errors.Is(err, context.Canceled))
}

// Proposals come from LLMs as outside text: Apply never panics, and it
// returns a recipe train.py accepts or an infeasible error.
func FuzzApply(f *testing.F) {
	f.Add("lr-scale", "factor", "2", "", "")
	f.Add("width", "factor", "0.3", "", "")
	f.Add("sgd", "lr_factor", "1e3", "momentum", "-0")
	f.Add("heads", "n", "7", "x", "1")
	f.Add("batch-size", "factor", "0.0625", "", "")
	f.Add("context", "factor", "1e-300", "", "")
	f.Fuzz(func(t *testing.T, mech, k1, v1, k2, v2 string) {
		p := records.Proposal{Mechanism: mech, Params: map[string]string{k1: v1}}
		if k2 != "" {
			p.Params[k2] = v2
		}
		for _, ts := range Tasks("/p", "/c", 4) {
			r, err := Apply(ts.Reference, p)
			if err != nil {
				if !errors.Is(err, builder.ErrInfeasible) {
					t.Fatalf("Apply(%v) = %v, want an infeasible error", p, err)
				}
				continue
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("Apply(%v) returned a recipe train.py rejects: %v", p, err)
			}
		}
	})
}
