package rwm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// heldModel is a world model over heldCompute: it counts its calls, fails
// at once under an ended ctx, else signals its start on started and then
// answers with its call number when release sends nil, fails with what
// release sends, or ends with its ctx.
type heldModel struct{ *heldCompute }

func newHeldModel(n int) *heldModel { return &heldModel{newHeldCompute(n)} }

func (h *heldModel) Predict(ctx context.Context, q Query) (Prediction, error) {
	n, err := h.compute(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return Prediction{}, fmt.Errorf("held: %w", err)
		}
		return Prediction{}, err
	}
	return Prediction{Gain: float64(n), Valid: true, Usage: Usage{PromptTokens: 1}}, nil
}

// unseenEnd is a ctx that is live until end is called, after which Err
// reports context.Canceled while Done never fires: a waiter holding it sees
// its computation's end before its own, as a select does at random when
// both end together.
type unseenEnd struct {
	context.Context
	ended atomic.Bool
}

func (c *unseenEnd) end() { c.ended.Store(true) }

func (c *unseenEnd) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return nil
}

// cachePair is an owner predicting q through a Cache under octx, held in
// the inner model, and a waiter joined to it under wctx.
func cachePair(t *testing.T, octx, wctx context.Context) (c *Cache, h *heldModel, owner, waiter <-chan cacheResult) {
	t.Helper()
	h = newHeldModel(2)
	c = testCache(t, h, DefaultCacheConfig())
	owner = goCachePredict(c, octx)
	<-h.started
	waiter = goCachePredict(c, wctx)
	waitWaiting(t, c.memo, 1)
	return c, h, owner, waiter
}

// cacheResult is what one Predict returned.
type cacheResult struct {
	p   Prediction
	err error
}

// goCachePredict predicts tunedQuery() through c under ctx in a goroutine
// and sends the result on the returned channel, which the caller must
// receive from.
func goCachePredict(c *Cache, ctx context.Context) <-chan cacheResult {
	out := make(chan cacheResult, 1)
	go func() {
		p, err := c.Predict(ctx, tunedQuery())
		out <- cacheResult{p, err}
	}()
	return out
}

func TestCacheWaiterEndedWithOwner(t *testing.T) {
	// The owner of a prediction in flight is cancelled and the waiter's own
	// ctx has ended too: the waiter returns its own ctx's error and the
	// inner model is not asked again.
	octx, cancel := context.WithCancel(context.Background())
	wctx := &unseenEnd{Context: context.Background()}
	c, h, owner, waiter := cachePair(t, octx, wctx)
	wctx.end()
	cancel()
	require.ErrorIs(t, (<-owner).err, context.Canceled)
	r := <-waiter
	require.ErrorIs(t, r.err, context.Canceled)
	require.EqualError(t, r.err, "rwm: cache: context canceled")
	require.Zero(t, r.p)
	require.EqualValues(t, 1, h.calls.Load())
	require.Equal(t, CacheStats{Misses: 1}, c.Stats())
}

func TestCacheWaiterLiveRetriesAfterOwner(t *testing.T) {
	// The owner of a prediction in flight is cancelled while the waiter's
	// ctx is live: the waiter asks the inner model itself and gets its
	// answer, uncached; the owner's cancellation is not held.
	octx, cancel := context.WithCancel(context.Background())
	c, h, owner, waiter := cachePair(t, octx, context.Background())
	cancel()
	require.ErrorIs(t, (<-owner).err, context.Canceled)
	select {
	case <-h.started: // the waiter's own call
	case r := <-waiter:
		t.Fatalf("the waiter returned %+v without predicting", r)
	}
	h.release <- nil
	r := <-waiter
	require.NoError(t, r.err)
	require.Equal(t, Prediction{Gain: 2, Valid: true, Usage: Usage{PromptTokens: 1}}, r.p)
	require.EqualValues(t, 2, h.calls.Load())
	require.Equal(t, CacheStats{Misses: 2, Len: 1}, c.Stats())
}
