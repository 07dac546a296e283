package rwm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memoPolicies are the policies of the memo's two users, at size.
func memoPolicies(size int) map[string]memoPolicy {
	return map[string]memoPolicy{"cache": cachePolicy(size), "tuned": tunedPolicy(size)}
}

// heldCompute counts its computations; each signals started and then ends
// with what release sends (nil: its call number) or with its ctx.
type heldCompute struct {
	calls   atomic.Int64
	started chan struct{}
	release chan error
}

func newHeldCompute(n int) *heldCompute {
	return &heldCompute{started: make(chan struct{}, n), release: make(chan error, n)}
}

func (h *heldCompute) compute(ctx context.Context) (int, error) {
	n := h.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	h.started <- struct{}{}
	select {
	case err := <-h.release:
		if err != nil {
			return 0, err
		}
		return int(n), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// waitWaiting waits until n callers wait for a computation in flight.
func waitWaiting[K comparable, V any](t *testing.T, m *memo[K, V], n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.waiting == n
	}, 10*time.Second, time.Millisecond)
}

// memoResult is what one do call returned.
type memoResult struct {
	v      int
	shared bool
	err    error
}

// goDo runs m.do in a goroutine owned by wg and sends its result on the
// returned channel.
func goDo(wg *sync.WaitGroup, m *memo[string, int], ctx context.Context, key string, f func(context.Context) (int, error)) <-chan memoResult {
	out := make(chan memoResult, 1)
	wg.Go(func() {
		v, shared, err := m.do(ctx, key, f)
		out <- memoResult{v, shared, err}
	})
	return out
}

// crowd starts n callers of "k" on a new memo, waits until one computes
// and the rest wait for it, then releases that computation with err (nil:
// its value, 1) and returns what each caller got.
func crowd(t *testing.T, p memoPolicy, n int, err error) (*memo[string, int], *heldCompute, []memoResult) {
	t.Helper()
	m, h := newMemo[string, int](p), newHeldCompute(n)
	var wg sync.WaitGroup
	outs := make([]<-chan memoResult, n)
	for i := range outs {
		outs[i] = goDo(&wg, m, context.Background(), "k", h.compute)
	}
	<-h.started
	waitWaiting(t, m, n-1)
	h.release <- err
	wg.Wait()
	got := make([]memoResult, n)
	for i, out := range outs {
		got[i] = <-out
	}
	return m, h, got
}

// pair is an owner computing "k" under one ctx, held, and a waiter joined
// to it under another.
type pair struct {
	m             *memo[string, int]
	h             *heldCompute
	wg            sync.WaitGroup
	owner, waiter <-chan memoResult
}

func newPair(t *testing.T, p memoPolicy, octx, wctx context.Context) *pair {
	t.Helper()
	f := &pair{m: newMemo[string, int](p), h: newHeldCompute(2)}
	f.owner = goDo(&f.wg, f.m, octx, "k", f.h.compute)
	<-f.h.started
	f.waiter = goDo(&f.wg, f.m, wctx, "k", f.h.compute)
	waitWaiting(t, f.m, 1)
	return f
}

func TestMemoCoalesces(t *testing.T) {
	// N concurrent callers of one key wait for one computation; exactly one
	// of them ran it. Both policies count every joiner as Coalesced here,
	// since every joined computation serves a value.
	const n = 16
	for name, p := range memoPolicies(4) {
		t.Run(name, func(t *testing.T) {
			m, h, got := crowd(t, p, n, nil)
			owners := 0
			for _, r := range got {
				require.NoError(t, r.err)
				require.Equal(t, 1, r.v)
				if !r.shared {
					owners++
				}
			}
			require.Equal(t, 1, owners)
			require.EqualValues(t, 1, h.calls.Load())
			require.Equal(t, memoStats{Misses: 1, Coalesced: n - 1, Len: 1}, m.snapshot())
			v, shared, err := m.do(context.Background(), "k", h.compute)
			require.NoError(t, err)
			require.Equal(t, 1, v)
			require.True(t, shared)
			require.Equal(t, memoStats{Hits: 1, Misses: 1, Coalesced: n - 1, Len: 1}, m.snapshot())
		})
	}
}

func TestMemoErrorsNotHeld(t *testing.T) {
	// A failed computation's error reaches its owner and every waiter, is
	// not held, and the next caller computes again.
	const n = 8
	boom := errors.New("boom")
	coalesced := map[string]int64{"cache": 0, "tuned": n - 1} // tuned counts at join
	for name, p := range memoPolicies(4) {
		t.Run(name, func(t *testing.T) {
			m, h, got := crowd(t, p, n, boom)
			for _, r := range got {
				require.Same(t, boom, r.err)
				require.Zero(t, r.v)
			}
			require.Equal(t, memoStats{Misses: 1, Coalesced: coalesced[name]}, m.snapshot())
			h.release <- nil
			v, shared, err := m.do(context.Background(), "k", h.compute)
			require.NoError(t, err)
			require.Equal(t, 2, v)
			require.False(t, shared)
			require.Equal(t, memoStats{Misses: 2, Coalesced: coalesced[name], Len: 1}, m.snapshot())
		})
	}
}

func TestMemoWaiterCancelled(t *testing.T) {
	// A waiter whose ctx ends stops waiting with its own error, named by
	// the policy; the owner's computation goes on and is held.
	coalesced := map[string]int64{"cache": 0, "tuned": 1}
	for name, p := range memoPolicies(4) {
		t.Run(name, func(t *testing.T) {
			wctx, cancel := context.WithCancel(context.Background())
			f := newPair(t, p, context.Background(), wctx)
			cancel()
			r := <-f.waiter
			require.ErrorIs(t, r.err, context.Canceled)
			require.EqualError(t, r.err, p.name+": context canceled")
			waitWaiting(t, f.m, 0)
			f.h.release <- nil
			require.Equal(t, memoResult{v: 1}, <-f.owner)
			f.wg.Wait()
			require.EqualValues(t, 1, f.h.calls.Load())
			require.Equal(t, memoStats{Misses: 1, Coalesced: coalesced[name], Len: 1}, f.m.snapshot())
		})
	}
}

func TestMemoOwnerCancelled(t *testing.T) {
	// The owner's cancellation is not held: a live waiter computes itself.
	coalesced := map[string]int64{"cache": 0, "tuned": 1}
	for name, p := range memoPolicies(4) {
		t.Run(name, func(t *testing.T) {
			octx, cancel := context.WithCancel(context.Background())
			f := newPair(t, p, octx, context.Background())
			cancel()
			require.ErrorIs(t, (<-f.owner).err, context.Canceled)
			select {
			case <-f.h.started: // the waiter's own computation
			case r := <-f.waiter:
				t.Fatalf("the waiter returned %+v without computing", r)
			}
			f.h.release <- nil
			require.Equal(t, memoResult{v: 2}, <-f.waiter)
			f.wg.Wait()
			require.Equal(t, memoStats{Misses: 2, Coalesced: coalesced[name], Len: 1}, f.m.snapshot())
		})
	}
}

// endedCtx has ended (Err) but never signals Done, so a waiter holding it
// waits for the computation and then finds its own ctx ended.
type endedCtx struct{ context.Context }

func (endedCtx) Err() error { return context.Canceled }

func TestMemoOwnerCancelledWaiterEnded(t *testing.T) {
	// When both the owner's and the waiter's ctx have ended, the waiter
	// returns its own ctx's error, named by the policy, and computes
	// nothing (no retry, nothing held).
	stats := map[string]memoStats{"cache": {Misses: 1}, "tuned": {Misses: 1, Coalesced: 1}}
	for name, p := range memoPolicies(4) {
		t.Run(name, func(t *testing.T) {
			octx, cancel := context.WithCancel(context.Background())
			f := newPair(t, p, octx, endedCtx{context.Background()})
			cancel()
			require.ErrorIs(t, (<-f.owner).err, context.Canceled)
			r := <-f.waiter
			require.ErrorIs(t, r.err, context.Canceled)
			require.EqualError(t, r.err, p.name+": context canceled")
			f.wg.Wait()
			require.EqualValues(t, 1, f.h.calls.Load())
			require.Equal(t, stats[name], f.m.snapshot())
		})
	}
}

func TestMemoLRU(t *testing.T) {
	for name, p := range memoPolicies(2) {
		t.Run(name, func(t *testing.T) {
			m := newMemo[string, int](p)
			var calls int
			do := func(key string) (int, bool) {
				v, shared, err := m.do(context.Background(), key, func(context.Context) (int, error) {
					calls++
					return calls, nil
				})
				require.NoError(t, err)
				return v, shared
			}
			for i, step := range []struct {
				key    string
				v      int
				shared bool
			}{
				{"a", 1, false}, // [a]
				{"b", 2, false}, // [b a]
				{"a", 1, true},  // [a b]
				{"d", 3, false}, // [d a], b evicted
				{"a", 1, true},  // [a d]
				{"b", 4, false}, // [b a], d evicted
				{"a", 1, true},  // [a b]
			} {
				v, shared := do(step.key)
				require.Equal(t, step.v, v, "step %d", i)
				require.Equal(t, step.shared, shared, "step %d", i)
			}
			require.Equal(t, memoStats{Hits: 3, Misses: 4, Evictions: 2, Len: 2}, m.snapshot())
		})
	}
}

func TestMemoEvictionInFlight(t *testing.T) {
	// Size 1: while "a" is computed (one waiter joined), "b" is computed.
	// The tuned policy holds "a" from its start, so "b" evicts it and a
	// later caller of "a" computes it again; the waiter still gets the
	// first result. The cache policy holds only finished values, so the
	// later caller joins the first computation, whose end evicts "b".
	tests := map[string]struct {
		later memoResult // what the later caller of "a" gets
		held  int        // the value of "a" held at the end
		stats memoStats
	}{
		"cache": {later: memoResult{v: 1, shared: true}, held: 1, stats: memoStats{Hits: 1, Misses: 2, Coalesced: 2, Evictions: 1, Len: 1}},
		"tuned": {later: memoResult{v: 20}, held: 20, stats: memoStats{Hits: 1, Misses: 3, Coalesced: 1, Evictions: 2, Len: 1}},
	}
	for name, p := range memoPolicies(1) {
		t.Run(name, func(t *testing.T) {
			tt := tests[name]
			m, h := newMemo[string, int](p), newHeldCompute(1)
			value := func(v int) func(context.Context) (int, error) {
				return func(context.Context) (int, error) { return v, nil }
			}
			var wg sync.WaitGroup
			owner := goDo(&wg, m, context.Background(), "a", h.compute)
			<-h.started
			waiter := goDo(&wg, m, context.Background(), "a", h.compute)
			waitWaiting(t, m, 1)
			v, shared, err := m.do(context.Background(), "b", value(10))
			require.NoError(t, err)
			require.Equal(t, 10, v)
			require.False(t, shared)
			later := goDo(&wg, m, context.Background(), "a", value(20))
			var got memoResult
			if p.boundFlights {
				select {
				case got = <-later:
				case <-time.After(10 * time.Second):
					t.Fatal("the later caller of an evicted key joined its computation")
				}
			} else {
				waitWaiting(t, m, 2)
			}
			h.release <- nil
			require.Equal(t, memoResult{v: 1}, <-owner)
			require.Equal(t, memoResult{v: 1, shared: true}, <-waiter)
			if !p.boundFlights {
				got = <-later
			}
			wg.Wait()
			require.Equal(t, tt.later, got)
			v, shared, err = m.do(context.Background(), "a", func(context.Context) (int, error) {
				return 0, fmt.Errorf("a is held, want no computation")
			})
			require.NoError(t, err)
			require.Equal(t, tt.held, v)
			require.True(t, shared)
			require.EqualValues(t, 1, h.calls.Load())
			require.Equal(t, tt.stats, m.snapshot())
		})
	}
}

func TestMemoConcurrentKeys(t *testing.T) {
	// Run with -race: 8 callers on each of 4 keys; with room for all, each
	// key is computed once and every caller gets its key's value.
	const keys, callers = 4, 8
	for name, p := range memoPolicies(keys) {
		t.Run(name, func(t *testing.T) {
			m := newMemo[string, int](p)
			var calls [keys]atomic.Int64
			var wg sync.WaitGroup
			got := make([]memoResult, keys*callers)
			for i := range got {
				k := i % keys
				wg.Go(func() {
					v, shared, err := m.do(context.Background(), fmt.Sprint(k), func(context.Context) (int, error) {
						calls[k].Add(1)
						return 100 + k, nil
					})
					got[i] = memoResult{v, shared, err}
				})
			}
			wg.Wait()
			for i, r := range got {
				require.NoError(t, r.err)
				require.Equal(t, 100+i%keys, r.v)
			}
			for k := range calls {
				require.EqualValues(t, 1, calls[k].Load(), "key %d", k)
			}
			s := m.snapshot()
			require.Equal(t, int64(keys), s.Misses)
			require.Equal(t, int64(keys*(callers-1)), s.Hits+s.Coalesced)
			require.Equal(t, keys, s.Len)
		})
	}
}

func TestNewMemoPanicsOnSize(t *testing.T) {
	require.PanicsWithValue(t, "rwm: cache: memo size 0, want > 0", func() { newMemo[string, int](cachePolicy(0)) })
}
