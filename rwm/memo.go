package rwm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
)

// memoPolicy is where Cache and Tuned differ in how they memoise.
type memoPolicy struct {
	// name prefixes the error of a waiter whose ctx ends ("rwm: cache").
	name string
	// size is the most values held (least recently used evicted first).
	size int
	// boundFlights holds a computation in the recency order from its start:
	// it counts against size and may be evicted while in flight (callers
	// already waiting still get its result; later ones start another).
	// Otherwise only finished values are held and bounded.
	boundFlights bool
	// coalesceOnJoin counts a caller in Coalesced when it joins a
	// computation in flight, whatever comes of it. Otherwise it is counted
	// only when the computation it joined serves it a value.
	coalesceOnJoin bool
}

// memoStats counts what a memo did.
type memoStats struct {
	Hits      int64 // served a finished value
	Coalesced int64 // joined a computation in flight (see coalesceOnJoin)
	Misses    int64 // computations started
	Evictions int64 // values dropped for size
	Len       int   // values held now (with boundFlights, in flight too)
}

// memo keeps computed values by key and makes concurrent callers of one key
// wait for a single computation. Errors are never held: the callers that
// waited for a failed computation get its error and the next caller
// computes again. A waiter whose ctx ends stops waiting; if the owner of a
// computation (the caller that runs it, with its own ctx) is cancelled, its
// waiters whose ctx is live retry, and a waiter whose ctx has ended too
// returns its own ctx's error without computing. A memo is safe for
// concurrent use and starts no goroutine.
type memo[K comparable, V any] struct {
	policy memoPolicy

	mu      sync.Mutex
	lru     *list.List // of *memoEntry[K, V], most recent first
	entries map[K]*memoEntry[K, V]
	stats   memoStats
	waiting int // callers now waiting for a computation in flight
}

// memoEntry is one key's value; done closes, under the memo's lock, when
// its computation ends, after which val and err do not change.
type memoEntry[K comparable, V any] struct {
	key  K
	el   *list.Element // place in the recency order; nil while not held there
	done chan struct{}
	val  V
	err  error
}

// newMemo returns an empty memo; p.size must be positive.
func newMemo[K comparable, V any](p memoPolicy) *memo[K, V] {
	if p.size <= 0 {
		panic(fmt.Sprintf("%s: memo size %d, want > 0", p.name, p.size))
	}
	return &memo[K, V]{policy: p, lru: list.New(), entries: map[K]*memoEntry[K, V]{}}
}

// snapshot returns the counters.
func (m *memo[K, V]) snapshot() memoStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Len = m.lru.Len()
	return s
}

// do returns key's value: held, from the identical computation in flight,
// or from compute(ctx) run here. shared reports that the value was not
// computed by this call.
func (m *memo[K, V]) do(ctx context.Context, key K, compute func(context.Context) (V, error)) (v V, shared bool, err error) {
	for {
		m.mu.Lock()
		e, ok := m.entries[key]
		if !ok {
			break // m.mu stays held for the start below
		}
		if m.finished(e) {
			m.lru.MoveToFront(e.el)
			m.stats.Hits++
			m.mu.Unlock()
			return e.val, true, nil
		}
		v, retry, err := m.wait(ctx, e)
		if !retry {
			return v, err == nil, err
		}
	}
	e := &memoEntry[K, V]{key: key, done: make(chan struct{})}
	m.entries[key] = e
	m.stats.Misses++
	if m.policy.boundFlights {
		e.el = m.lru.PushFront(e)
		m.evict()
	}
	m.mu.Unlock()
	v, err = compute(ctx)
	m.finish(e, v, err)
	return v, false, err
}

// finished reports whether e's computation has ended; m.mu is held.
func (m *memo[K, V]) finished(e *memoEntry[K, V]) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// wait joins e's computation in flight, which m.mu (held on entry, released
// here) found. retry says the owner was cancelled while the caller's ctx is
// live, so the caller should look again; a caller whose ctx has ended gets
// its ctx's error, whichever of the two ends it saw first.
func (m *memo[K, V]) wait(ctx context.Context, e *memoEntry[K, V]) (v V, retry bool, err error) {
	if e.el != nil {
		m.lru.MoveToFront(e.el)
	}
	if m.policy.coalesceOnJoin {
		m.stats.Coalesced++
	}
	m.waiting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.waiting--
		if err == nil && !retry && !m.policy.coalesceOnJoin {
			m.stats.Coalesced++
		}
		m.mu.Unlock()
	}()
	select {
	case <-e.done:
	case <-ctx.Done():
		return v, false, fmt.Errorf("%s: %w", m.policy.name, ctx.Err())
	}
	if e.err == nil {
		return e.val, false, nil
	}
	if !isCtxErr(e.err) {
		return v, false, e.err
	}
	if cerr := ctx.Err(); cerr != nil {
		return v, false, fmt.Errorf("%s: %w", m.policy.name, cerr)
	}
	return v, true, nil // the owner was cancelled, not this caller
}

// finish publishes e's outcome: a value is held (and, without boundFlights,
// enters the recency order now); an error is forgotten.
func (m *memo[K, V]) finish(e *memoEntry[K, V], v V, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.val, e.err = v, err
	held := m.entries[e.key] == e // false once evicted in flight
	switch {
	case err != nil && held:
		delete(m.entries, e.key)
		if e.el != nil {
			m.lru.Remove(e.el)
			e.el = nil
		}
	case err == nil && held && e.el == nil:
		e.el = m.lru.PushFront(e)
		m.evict()
	}
	close(e.done)
}

// evict drops the least recently used entries beyond the size; m.mu is
// held. A dropped entry in flight still serves the callers already waiting
// on it.
func (m *memo[K, V]) evict() {
	for m.lru.Len() > m.policy.size {
		e := m.lru.Remove(m.lru.Back()).(*memoEntry[K, V])
		e.el = nil
		delete(m.entries, e.key)
		m.stats.Evictions++
	}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
