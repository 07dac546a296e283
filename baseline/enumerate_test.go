package baseline_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

// Enumerate returns its list in order, again from the start after the
// last, whatever the state and the rng.
func TestEnumerateCycles(t *testing.T) {
	e, err := baseline.NewEnumerate(all)
	require.NoError(t, err)
	require.Equal(t, 5, e.Len())
	got, err := e.Propose(context.Background(), records.State{Task: a3}, 7, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, keysOf(lr2, lrHalf, warm100, warm50, qk, lr2, lrHalf), keys(got))
	again, err := e.Propose(context.Background(), records.State{Task: b2}, 7, nil)
	require.NoError(t, err)
	require.Equal(t, keys(got), keys(again))
	got[0].Proposal.Params["factor"] = "9" // the samples are copies
	again, err = e.Propose(context.Background(), records.State{Task: a3}, 1, nil)
	require.NoError(t, err)
	require.Equal(t, keysOf(lr2), keys(again))
	none, err := e.Propose(context.Background(), records.State{Task: a3}, 0, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestEnumerateErrors(t *testing.T) {
	_, err := baseline.NewEnumerate(nil)
	require.ErrorIs(t, err, baseline.ErrConfig)
	_, err = baseline.NewEnumerate([]records.Proposal{lr2, {}})
	require.ErrorIs(t, err, baseline.ErrConfig)
	e, err := baseline.NewEnumerate(all)
	require.NoError(t, err)
	_, err = e.Propose(context.Background(), records.State{Task: a3}, -1, nil)
	require.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = e.Propose(ctx, records.State{Task: a3}, 1, nil)
	require.ErrorIs(t, err, context.Canceled)
}

// A Rerank of an Enumerate with N its length predicts every proposal once
// and returns the world model's best: on fa, lr2 (+3), warm100 (+1), qk
// (−1); on fb, qk (+4) first.
func TestRerankOfEnumerateIsTheWorldModelsChoice(t *testing.T) {
	e, err := baseline.NewEnumerate(all)
	require.NoError(t, err)
	w := &oracle{}
	ev := evidence()
	w.evidence = ev.Len()
	r, err := baseline.NewRerank(baseline.RerankConfig{N: e.Len(), Parallel: 2}, e, w, ev)
	require.NoError(t, err)
	got, err := r.Propose(context.Background(), records.State{Task: a3}, 3, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, keysOf(lr2, warm100, qk), keys(got))
	require.EqualValues(t, 5, w.calls.Load(), "one prediction per listed proposal")
	got, err = r.Propose(context.Background(), records.State{Task: b2}, 1, nil)
	require.NoError(t, err)
	require.Equal(t, keysOf(qk), keys(got))
}

func TestEnumerateConformance(t *testing.T) {
	proposertest.Run(t, func(t *testing.T) proposer.Proposer {
		e, err := baseline.NewEnumerate(all)
		require.NoError(t, err)
		return e
	}, proposertest.Options{Deterministic: true, Catalogue: cat})
}
