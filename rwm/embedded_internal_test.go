package rwm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// heldFactorise replaces e.factorise with one that counts its calls,
// signals its start on started and then waits for release: nil builds the
// factorisation, an error fails it.
func heldFactorise(e *Embedded, calls *atomic.Int64, started chan<- struct{}, release <-chan error) {
	e.factorise = func(ctx context.Context, f *factor, ev records.Evidence) error {
		calls.Add(1)
		started <- struct{}{}
		if err := <-release; err != nil {
			return err
		}
		return e.build(ctx, f, ev)
	}
}

// mustPrepare is prepare with a live ctx, which cannot fail.
func mustPrepare(t *testing.T, ev records.Evidence, eff Effector, desc bool) *prepared {
	t.Helper()
	p, err := prepare(context.Background(), ev, eff, desc)
	require.NoError(t, err)
	return p
}

// crowdPredict runs n concurrent Predicts of q on e, whose factorisation is
// held by heldFactorise, waits until one factorises and the rest wait for
// it, releases it with err and returns what each caller got.
func crowdPredict(t *testing.T, e *Embedded, q Query, n int, started <-chan struct{}, release chan<- error, err error) ([]Prediction, []error) {
	t.Helper()
	got, errs := make([]Prediction, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = e.Predict(context.Background(), q) })
	}
	<-started
	waitWaiting(t, e.factors, n-1)
	release <- err
	wg.Wait()
	return got, errs
}

// goPredict runs m.Predict(ctx, q) in a goroutine and sends its error on
// the returned channel, which the caller must receive from.
func goPredict(m WorldModel, ctx context.Context, q Query) <-chan error {
	out := make(chan error, 1)
	go func() { _, err := m.Predict(ctx, q); out <- err }()
	return out
}

func TestEmbeddedCoalescesFactorisations(t *testing.T) {
	// n concurrent first queries on one evidence wait for one
	// factorisation and get the prediction of an unshared model.
	const n = 8
	q := tunedQuery()
	want, err := testEmbedded(t, DefaultEmbeddedConfig()).Predict(context.Background(), q)
	require.NoError(t, err)
	e := testEmbedded(t, DefaultEmbeddedConfig())
	var calls atomic.Int64
	started, release := make(chan struct{}, 1), make(chan error, 1)
	heldFactorise(e, &calls, started, release)
	got, errs := crowdPredict(t, e, q, n, started, release, nil)
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, want, got[i])
	}
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, memoStats{Misses: 1, Coalesced: n - 1, Len: 1}, e.factors.snapshot())
	_, err = e.Predict(context.Background(), q)
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, memoStats{Hits: 1, Misses: 1, Coalesced: n - 1, Len: 1}, e.factors.snapshot())
}

func TestEmbeddedFactorisationErrorsNotCached(t *testing.T) {
	// A failed factorisation's error reaches its owner and its waiters
	// as is, and the next query factorises again.
	const n = 4
	q := tunedQuery()
	e := testEmbedded(t, DefaultEmbeddedConfig())
	var calls atomic.Int64
	started, release := make(chan struct{}, 1), make(chan error, 1)
	heldFactorise(e, &calls, started, release)
	boom := errors.New("boom")
	_, errs := crowdPredict(t, e, q, n, started, release, boom)
	for _, err := range errs {
		require.Same(t, boom, err)
	}
	require.Equal(t, memoStats{Misses: 1, Coalesced: n - 1}, e.factors.snapshot())
	release <- nil
	_, err := e.Predict(context.Background(), q)
	require.NoError(t, err)
	<-started
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, memoStats{Misses: 2, Coalesced: n - 1, Len: 1}, e.factors.snapshot())
}

func TestEmbeddedPolicyIsTuned(t *testing.T) {
	// Embedded memoises as Tuned does (the memo's tests cover that
	// policy), under its own name.
	p := embeddedPolicy(3)
	require.Equal(t, "rwm: embedded", p.name)
	p.name = tunedPolicy(3).name
	require.Equal(t, tunedPolicy(3), p)
}

func TestEmbeddedWaiterCancelled(t *testing.T) {
	// A query whose ctx ends while it waits for a factorisation stops
	// waiting; the factorisation goes on and is held.
	q := tunedQuery()
	e := testEmbedded(t, DefaultEmbeddedConfig())
	var calls atomic.Int64
	started, release := make(chan struct{}, 1), make(chan error, 1)
	heldFactorise(e, &calls, started, release)
	owner := goPredict(e, context.Background(), q)
	<-started
	wctx, cancel := context.WithCancel(context.Background())
	waiter := goPredict(e, wctx, q)
	waitWaiting(t, e.factors, 1)
	cancel()
	err := <-waiter
	require.ErrorIs(t, err, context.Canceled)
	require.EqualError(t, err, "rwm: embedded: context canceled")
	release <- nil
	require.NoError(t, <-owner)
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, memoStats{Misses: 1, Coalesced: 1, Len: 1}, e.factors.snapshot())
}
