package rwm

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// heldTune replaces t.tune with one that signals its start on started and
// then waits for release (or its ctx) before running Tune.
func heldTune(t *Tuned, started chan<- struct{}, release <-chan error) {
	t.tune = func(ctx context.Context, base EmbeddedConfig, ev records.Evidence, grid []EmbeddedConfig) (EmbeddedConfig, float64, *factor, error) {
		started <- struct{}{}
		select {
		case err := <-release:
			if err != nil {
				return base, 0, nil, err
			}
		case <-ctx.Done():
			return base, 0, nil, ctx.Err()
		}
		return tune(ctx, base, ev, grid)
	}
}

func tunedQuery() Query {
	tk := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1.2, SeedNoise: 0.004, Budget: 100}
	var rs []records.Record
	for i := range 12 {
		p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": []string{"2", "4", "0.5"}[i%3]}}
		g := math.Sin(float64(i)) * 0.008
		rs = append(rs, records.Record{Task: tk, Proposal: p, Gain: g, Loss: tk.RefLoss - g, Source: records.Real, Seeds: []uint64{uint64(i)}})
	}
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		panic(err)
	}
	return Query{Task: tk, Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "3"}}, Evidence: ev}
}

func TestTunedOwnerCancelledWaiterTunes(t *testing.T) {
	// A waiter whose ctx is live tunes itself when the tuning's owner is
	// cancelled; the owner's cancellation is not cached.
	m := testTuned(t, DefaultEmbeddedConfig(), nil)
	started, release := make(chan struct{}, 2), make(chan error, 2)
	heldTune(m, started, release)
	q := tunedQuery()
	octx, cancel := context.WithCancel(context.Background())
	owner := make(chan error, 1)
	go func() { _, err := m.Predict(octx, q); owner <- err }()
	<-started
	waiter := make(chan error, 1)
	var got Prediction
	go func() {
		var err error
		got, err = m.Predict(context.Background(), q)
		waiter <- err
	}()
	// The waiter joins the tuning in flight before the owner is cancelled.
	require.Eventually(t, func() bool { return m.Stats().Coalesced == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-owner, context.Canceled)
	select {
	case <-started: // the waiter's own tuning
	case err := <-waiter:
		t.Fatalf("the waiter returned %v without tuning", err)
	}
	release <- nil
	require.NoError(t, <-waiter)
	cfg, _, err := Tune(context.Background(), DefaultEmbeddedConfig(), q.Evidence, nil)
	require.NoError(t, err)
	want, err := testEmbedded(t, cfg).Predict(context.Background(), q)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, TunedStats{Tunings: 2, Coalesced: 1, Len: 1}, m.Stats())
}

func TestTunedWaiterCancelled(t *testing.T) {
	// A waiter whose ctx ends stops waiting; the owner's tuning goes on.
	m := testTuned(t, DefaultEmbeddedConfig(), nil)
	started, release := make(chan struct{}, 1), make(chan error, 1)
	heldTune(m, started, release)
	q := tunedQuery()
	owner := make(chan error, 1)
	go func() { _, err := m.Predict(context.Background(), q); owner <- err }()
	<-started
	wctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go func() { _, err := m.Predict(wctx, q); waiter <- err }()
	require.Eventually(t, func() bool { return m.Stats().Coalesced == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-waiter, context.Canceled)
	release <- nil
	require.NoError(t, <-owner)
	require.Equal(t, TunedStats{Tunings: 1, Coalesced: 1, Len: 1}, m.Stats())
}

func TestTunedErrorsAreNotCached(t *testing.T) {
	// A failed tuning reaches its waiters wrapped, and is tried again on
	// the next query.
	m := testTuned(t, DefaultEmbeddedConfig(), nil)
	started, release := make(chan struct{}, 2), make(chan error, 2)
	heldTune(m, started, release)
	q := tunedQuery()
	boom := errors.New("boom")
	owner := make(chan error, 1)
	go func() { _, err := m.Predict(context.Background(), q); owner <- err }()
	<-started
	waiter := make(chan error, 1)
	go func() { _, err := m.Predict(context.Background(), q); waiter <- err }()
	require.Eventually(t, func() bool { return m.Stats().Coalesced == 1 }, 10*time.Second, time.Millisecond)
	release <- boom
	for _, err := range []error{<-owner, <-waiter} {
		require.ErrorIs(t, err, boom)
		require.EqualError(t, err, "rwm: tuned: tuning on 12 records: boom")
	}
	require.Equal(t, TunedStats{Tunings: 1, Coalesced: 1}, m.Stats())
	release <- nil
	_, err := m.Predict(context.Background(), q)
	require.NoError(t, err)
	require.Equal(t, TunedStats{Tunings: 2, Coalesced: 1, Len: 1}, m.Stats())
}
