package rwmtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func TestFixedConformance(t *testing.T) {
	// A fixed model ignores its context by design, so the context check is
	// skipped; everything else must hold.
	rwmtest.Run(t, func(*testing.T) rwm.WorldModel {
		return &rwmtest.Fixed{Default: rwm.Prediction{Gain: 0.01, Low: 0, High: 0.02, HasInterval: true, Valid: true}}
	}, rwmtest.Options{Deterministic: true, SkipContext: true})
}

func TestFixed(t *testing.T) {
	boom := errors.New("boom")
	f := &rwmtest.Fixed{
		Default: rwm.Prediction{Gain: 1, Valid: true},
		ByKey:   map[string]rwm.Prediction{"lr-scale{factor=2}": {Gain: 2, Valid: true}},
	}
	q := rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0]}
	p, err := f.Predict(context.Background(), q)
	require.NoError(t, err)
	require.Equal(t, 2.0, p.Gain)
	q.Proposal = rwmtest.Proposals()[1]
	p, err = f.Predict(context.Background(), q)
	require.NoError(t, err)
	require.Equal(t, 1.0, p.Gain)
	f.Err = boom
	_, err = f.Predict(context.Background(), q)
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 3, f.Calls())
	q.Task.ID = ""
	_, err = f.Predict(context.Background(), q)
	require.ErrorIs(t, err, records.ErrInvalid)
}

func TestVocabulary(t *testing.T) {
	for i := range 6 {
		require.NoError(t, rwmtest.Task(i).Validate())
	}
	for _, p := range rwmtest.Proposals() {
		require.NoError(t, p.Validate())
		require.False(t, p.IsNoChange())
	}
	ev := rwmtest.Evidence(30)
	require.Equal(t, 30, ev.Len())
	require.Equal(t, ev.Fingerprint(), rwmtest.Evidence(30).Fingerprint())
	require.NotEqual(t, ev.Fingerprint(), rwmtest.Evidence(29).Fingerprint())
}

func ExampleFixed() {
	// A fixed world model for a test of code that consumes predictions.
	wm := &rwmtest.Fixed{
		Default: rwm.Prediction{Gain: -0.002, Valid: true, Reason: "most changes lose"},
		ByKey:   map[string]rwm.Prediction{"warmup{steps=50}": {Gain: 0.004, Valid: true}},
	}
	for _, p := range rwmtest.Proposals()[1:3] {
		pred, _ := wm.Predict(context.Background(), rwm.Query{Task: rwmtest.Task(0), Proposal: p})
		fmt.Printf("%s %+.3f\n", p.Key(), pred.Gain)
	}
	fmt.Println("calls:", wm.Calls())
	// Output:
	// lr-scale{factor=0.5} -0.002
	// warmup{steps=50} +0.004
	// calls: 2
}
