package rwm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// counting is a world model that answers with the number of its call and
// reports token usage; block, when set, holds calls until closed.
type counting struct {
	calls atomic.Int64
	block chan struct{}
	err   func(n int64) error
}

func (c *counting) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	n := c.calls.Add(1)
	if c.block != nil {
		select {
		case <-c.block:
		case <-ctx.Done():
			return rwm.Prediction{}, fmt.Errorf("counting: %w", ctx.Err())
		}
	}
	if c.err != nil {
		if err := c.err(n); err != nil {
			return rwm.Prediction{}, err
		}
	}
	return rwm.Prediction{Gain: float64(n), Valid: true, Usage: rwm.Usage{PromptTokens: 100, CompletionTokens: 10}}, nil
}

func query(i int) rwm.Query {
	return rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[i%5], Evidence: rwmtest.Evidence(i / 5)}
}

func TestCacheHitsAndKeys(t *testing.T) {
	inner := &counting{}
	c := newCache(t, inner, rwm.CacheConfig{Size: 100})
	ctx := context.Background()
	base := query(0)
	first := predict(t, c, base)
	require.Equal(t, rwm.Usage{PromptTokens: 100, CompletionTokens: 10}, first.Usage)
	again := predict(t, c, base)
	require.Equal(t, first.Gain, again.Gain)
	require.Equal(t, rwm.Usage{Cached: true}, again.Usage)

	// The same change written differently, with other text, is a hit.
	same := base
	same.Proposal = records.Proposal{Mechanism: " LR-Scale", Params: map[string]string{"FACTOR": "2.0"}, Text: "other words"}
	require.Equal(t, first.Gain, predict(t, c, same).Gain)
	// Reordered evidence has the same fingerprint: a hit.
	rs := base.Evidence.Records()
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	reord := base
	reord.Evidence = evidence(t, rs...)
	require.Equal(t, first.Gain, predict(t, c, reord).Gain)
	require.EqualValues(t, 1, inner.calls.Load())

	// Every part of the key matters.
	variants := map[string]func(q *rwm.Query){
		"task ID":       func(q *rwm.Query) { q.Task.ID = "other" },
		"family":        func(q *rwm.Query) { q.Task.Family = "other" },
		"seed noise":    func(q *rwm.Query) { q.Task.SeedNoise = 0.005 },
		"ref loss":      func(q *rwm.Query) { q.Task.RefLoss = 2 },
		"description":   func(q *rwm.Query) { q.Task.Description = "x" },
		"budget":        func(q *rwm.Query) { q.Task.Budget = 7 },
		"split":         func(q *rwm.Query) { q.Task.Split = records.HeldOut },
		"metric":        func(q *rwm.Query) { q.Task.Metric = records.NatsPerToken },
		"proposal":      func(q *rwm.Query) { q.Proposal.Params = map[string]string{"factor": "3"} },
		"evidence":      func(q *rwm.Query) { q.Evidence = rwmtest.Evidence(1) },
		"evidence gain": func(q *rwm.Query) { q.Evidence = evidence(t, real(q.Task, q.Proposal, 1, 1)) },
	}
	n := int64(1)
	for name, mut := range variants {
		q := base
		mut(&q)
		p, err := c.Predict(ctx, q)
		require.NoError(t, err, name)
		n++
		require.Equal(t, float64(n), p.Gain, name)
		require.EqualValues(t, n, inner.calls.Load(), name)
	}
	// Another model identity over the same inner model keys apart.
	c2 := newCache(t, inner, rwm.CacheConfig{Size: 100, Name: "other"})
	require.NotEqual(t, rwm.Key(c.ID(), base), rwm.Key(c2.ID(), base))
	st := c.Stats()
	require.Equal(t, rwm.CacheStats{Hits: 3, Misses: 1 + int64(len(variants)), Len: 1 + len(variants)}, st)
}

func TestCacheIdentity(t *testing.T) {
	emb := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	require.Equal(t, emb.ID(), newCache(t, emb, rwm.DefaultCacheConfig()).ID())
	require.Equal(t, emb.ID(), rwm.NewLedger(newLimit(t, newRetry(t, emb, rwm.DefaultRetryConfig()), 1)).ID())
	require.Equal(t, "*rwm_test.counting", newCache(t, &counting{}, rwm.DefaultCacheConfig()).ID())
	require.Equal(t, "mine", newCache(t, emb, rwm.CacheConfig{Size: 1, Name: "mine"}).ID())
	// Different embedded configs are different models.
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.NoiseSigmas = 2
	require.NotEqual(t, emb.ID(), newEmbedded(t, cfg).ID())
}

func TestCacheLRU(t *testing.T) {
	inner := &counting{}
	c := newCache(t, inner, rwm.CacheConfig{Size: 2})
	a, b, d := query(0), query(1), query(2)
	predict(t, c, a) // miss: [a]
	predict(t, c, b) // miss: [b a]
	predict(t, c, a) // hit: [a b]
	predict(t, c, d) // miss, evicts b: [d a]
	predict(t, c, a) // hit
	require.EqualValues(t, 3, inner.calls.Load())
	predict(t, c, b) // miss again, evicts d
	require.EqualValues(t, 4, inner.calls.Load())
	require.Equal(t, rwm.CacheStats{Hits: 2, Misses: 4, Evictions: 2, Len: 2}, c.Stats())
}

func TestCacheErrorsNotCached(t *testing.T) {
	inner := &counting{err: func(n int64) error {
		if n == 1 {
			return rwm.ErrTransient
		}
		return nil
	}}
	c := newCache(t, inner, rwm.DefaultCacheConfig())
	_, err := c.Predict(context.Background(), query(0))
	require.ErrorIs(t, err, rwm.ErrTransient)
	require.Equal(t, 2.0, predict(t, c, query(0)).Gain)
}

func TestCacheCoalesces(t *testing.T) {
	inner := &counting{block: make(chan struct{})}
	c := newCache(t, inner, rwm.DefaultCacheConfig())
	const n = 10
	var wg sync.WaitGroup
	got := make([]rwm.Prediction, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = c.Predict(context.Background(), query(0)) })
	}
	// Wait until one call reached the backend and the rest queued behind it.
	require.Eventually(t, func() bool {
		s := c.Stats()
		return inner.calls.Load() == 1 && s.Misses == 1
	}, 10*time.Second, time.Millisecond)
	close(inner.block)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.EqualValues(t, 1, inner.calls.Load())
	cached := 0
	for _, p := range got {
		require.Equal(t, 1.0, p.Gain)
		if p.Usage.Cached {
			cached++
		}
	}
	require.Equal(t, n-1, cached)
	s := c.Stats()
	require.Equal(t, int64(n-1), s.Hits+s.Coalesced)
}

func TestCacheWaiterDeadline(t *testing.T) {
	// A waiter whose own ctx ends stops waiting. (The owner's cancellation
	// is in cache_internal_test.go.)
	inner := &counting{block: make(chan struct{})}
	c := newCache(t, inner, rwm.DefaultCacheConfig())
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Predict(context.Background(), query(0)) })
	require.Eventually(t, func() bool { return inner.calls.Load() == 1 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	_, err := c.Predict(ctx, query(0))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(inner.block)
	wg.Wait()
	require.EqualValues(t, 1, inner.calls.Load())
}

func TestLimitBoundsConcurrency(t *testing.T) {
	var cur, peak atomic.Int64
	inner := rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		cur.Add(-1)
		return rwm.Prediction{Valid: true}, nil
	})
	l := newLimit(t, inner, 3)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { _, _ = l.Predict(context.Background(), query(i)) })
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(3))
	require.GreaterOrEqual(t, peak.Load(), int64(1))

	// A caller waiting for a slot gives up when its ctx ends.
	blocked := &counting{block: make(chan struct{})}
	l1 := newLimit(t, blocked, 1)
	wg.Go(func() { _, _ = l1.Predict(context.Background(), query(0)) })
	require.Eventually(t, func() bool { return blocked.calls.Load() == 1 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	_, err := l1.Predict(ctx, query(1))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(blocked.block)
	wg.Wait()
}

// sleeps records the waits of a Retry without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func TestRetry(t *testing.T) {
	cfg := rwm.DefaultRetryConfig() // 4 attempts, 500ms·2ⁿ, max 30s
	require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second},
		[]time.Duration{cfg.Backoff(1), cfg.Backoff(2), cfg.Backoff(3), cfg.Backoff(4)})
	require.Equal(t, 30*time.Second, cfg.Backoff(20))

	tests := []struct {
		name      string
		errs      []error // per call; nil = success
		wantCalls int
		wantWaits []time.Duration
		wantErr   error
	}{
		{"success", []error{nil}, 1, nil, nil},
		{"two transient", []error{rwm.ErrTransient, fmt.Errorf("5xx: %w", rwm.ErrTransient), nil}, 3,
			[]time.Duration{500 * time.Millisecond, time.Second}, nil},
		{"retry-after longer than backoff", []error{&rwm.TransientError{After: 5 * time.Second}, nil}, 2,
			[]time.Duration{5 * time.Second}, nil},
		{"retry-after shorter than backoff", []error{&rwm.TransientError{After: time.Millisecond}, nil}, 2,
			[]time.Duration{500 * time.Millisecond}, nil},
		{"retry-after at the cap (DefaultRetryConfig's MaxAfter, 5 min)", []error{&rwm.TransientError{After: 5 * time.Minute}, nil}, 2,
			[]time.Duration{5 * time.Minute}, nil},
		{"retry-after beyond the cap fails at once", []error{&rwm.TransientError{After: time.Hour}, nil}, 1,
			nil, rwm.ErrTransient},
		{"permanent", []error{rwm.ErrBadPrediction}, 1, nil, rwm.ErrBadPrediction},
		{"gives up", []error{rwm.ErrTransient, rwm.ErrTransient, rwm.ErrTransient, rwm.ErrTransient, nil}, 4,
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, rwm.ErrTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls int
			inner := rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
				err := tt.errs[calls]
				calls++
				return rwm.Prediction{Gain: 1, Valid: true}, err
			})
			s := &sleeps{}
			c := cfg
			c.Sleep = s.sleep
			p, err := newRetry(t, inner, c).Predict(context.Background(), query(0))
			require.Equal(t, tt.wantCalls, calls)
			require.Equal(t, tt.wantWaits, s.d)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, 1.0, p.Gain)
		})
	}
	t.Run("gives up with RetryError", func(t *testing.T) {
		c := cfg
		c.Attempts = 2
		c.Sleep = (&sleeps{}).sleep
		_, err := newRetry(t, rwm.Func(func(context.Context, rwm.Query) (rwm.Prediction, error) {
			return rwm.Prediction{}, &rwm.TransientError{Err: errors.New("429")}
		}), c).Predict(context.Background(), query(0))
		var re *rwm.RetryError
		require.ErrorAs(t, err, &re)
		require.Equal(t, 2, re.Attempts)
		require.ErrorIs(t, err, rwm.ErrTransient)
		require.Contains(t, err.Error(), "429")
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c := cfg
		c.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
		_, err := newRetry(t, rwm.Func(func(context.Context, rwm.Query) (rwm.Prediction, error) {
			return rwm.Prediction{}, rwm.ErrTransient
		}), c).Predict(ctx, query(0))
		require.ErrorIs(t, err, context.Canceled)
	})
	t.Run("real sleep honours ctx", func(t *testing.T) {
		c := cfg
		c.Base = time.Hour
		c.Max = time.Hour
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		_, err := newRetry(t, rwm.Func(func(context.Context, rwm.Query) (rwm.Prediction, error) {
			return rwm.Prediction{}, rwm.ErrTransient
		}), c).Predict(ctx, query(0))
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestTransientError(t *testing.T) {
	err := fmt.Errorf("call: %w", &rwm.TransientError{After: 2 * time.Second, Err: errors.New("HTTP 429")})
	require.ErrorIs(t, err, rwm.ErrTransient)
	require.Equal(t, "call: rwm: transient failure (retry after 2s): HTTP 429", err.Error())
	require.Equal(t, "rwm: transient failure", (&rwm.TransientError{}).Error())
}

func TestLedger(t *testing.T) {
	inner := &counting{err: func(n int64) error {
		if n == 2 {
			return rwm.ErrBadPrediction
		}
		return nil
	}}
	l := rwm.NewLedger(newCache(t, inner, rwm.DefaultCacheConfig()))
	ctx := context.Background()
	_, err := l.Predict(ctx, query(0)) // backend: 100+10 tokens
	require.NoError(t, err)
	_, err = l.Predict(ctx, query(0)) // cache hit
	require.NoError(t, err)
	_, err = l.Predict(ctx, query(1)) // backend error
	require.Error(t, err)
	_, err = l.Predict(ctx, query(1)) // backend: 100+10
	require.NoError(t, err)
	require.Equal(t, rwm.LedgerStats{Calls: 4, Errors: 1, CacheHits: 1, BackendCalls: 2, PromptTokens: 200, CompletionTokens: 20}, l.Stats())
}
