package rwm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
)

// CacheConfig parameterises Cache.
type CacheConfig struct {
	// Size is the most predictions kept (least recently used are evicted
	// first); default 4096. Library choice: a rollout scores a few thousand
	// proposals against one context, so one rollout fits.
	Size int
	// Name is the model identity used in cache keys. Empty means the inner
	// model's ID() when it implements Identifier, else its Go type. Give
	// distinct names to distinct configurations of one backend type when
	// they share a cache key space (e.g. two Caches over one store).
	Name string
}

// DefaultCacheConfig returns the default cache configuration.
func DefaultCacheConfig() CacheConfig { return CacheConfig{Size: 4096} }

// Validate reports the first problem with c, wrapping ErrConfig.
func (c CacheConfig) Validate() error {
	if c.Size <= 0 {
		return fmt.Errorf("%w: cache Size = %d, want > 0", ErrConfig, c.Size)
	}
	return nil
}

// CacheStats counts what a Cache did.
type CacheStats struct {
	Hits      int64 // served from the cache
	Coalesced int64 // served by joining an identical call in flight
	Misses    int64 // passed to the inner model
	Evictions int64 // entries dropped for size
	Len       int   // entries held now
}

// Cache memoises a world model's predictions. A prediction is keyed by the
// model identity, every field of the task (a prompt may show any of them),
// the proposal's canonical key (Proposal.Key: the same change however
// written; Proposal.Text is deliberately not part of the key, so a
// rephrased duplicate gets the same prediction) and the Fingerprint of the
// evidence in context. Since a world model changes only when its records
// change (METHOD.md §1 Research World Model), a hit is exactly what the
// model would answer again, for deterministic models.
//
// Identical queries in flight at the same time are coalesced into one inner
// call; a waiter whose ctx ends stops waiting with its ctx's error, and if
// the call's owner is cancelled the waiters whose ctx is live retry
// themselves (a waiter whose ctx has ended too returns its ctx's error and
// never calls the inner model). Errors are never cached. Served
// predictions carry Usage{Cached: true}. A Cache is safe for concurrent
// use.
type Cache struct {
	inner WorldModel
	name  string
	memo  *memo[string, Prediction]
}

var (
	_ WorldModel = (*Cache)(nil)
	_ Identifier = (*Cache)(nil)
)

// NewCache returns a cache over inner, or an error wrapping ErrConfig if
// inner is nil or cfg is invalid.
func NewCache(inner WorldModel, cfg CacheConfig) (*Cache, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: cache: nil inner model", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = identity(inner)
	}
	return &Cache{inner: inner, name: name, memo: newMemo[string, Prediction](cachePolicy(cfg.Size))}, nil
}

// cachePolicy is how a Cache of size predictions memoises: only finished
// predictions are held and bounded; a waiter counts as Coalesced when it is
// served.
func cachePolicy(size int) memoPolicy {
	return memoPolicy{name: "rwm: cache", size: size}
}

// identity names m for cache keys.
func identity(m WorldModel) string {
	if id, ok := m.(Identifier); ok {
		return id.ID()
	}
	return fmt.Sprintf("%T", m)
}

// ID returns the identity the cache keys by.
func (c *Cache) ID() string { return c.name }

// Stats returns a snapshot of the cache's counters.
func (c *Cache) Stats() CacheStats {
	s := c.memo.snapshot()
	return CacheStats{Hits: s.Hits, Coalesced: s.Coalesced, Misses: s.Misses, Evictions: s.Evictions, Len: s.Len}
}

// Key returns the cache key of q for a model named name: a hex digest that
// changes with the name, any task field, the proposal key or the evidence
// fingerprint.
func Key(name string, q Query) string {
	h := sha256.New()
	str := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	num := func(v float64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	t := q.Task
	str(name)
	str(t.ID)
	str(t.Family)
	str(string(t.Split))
	str(string(t.Metric))
	num(t.RefLoss)
	num(t.SeedNoise)
	num(float64(t.Budget))
	str(t.Description)
	str(q.Proposal.Key())
	str(q.Evidence.Fingerprint())
	return hex.EncodeToString(h.Sum(nil))
}

// Predict returns the cached prediction for q or asks the inner model.
func (c *Cache) Predict(ctx context.Context, q Query) (Prediction, error) {
	if err := ctx.Err(); err != nil {
		return Prediction{}, fmt.Errorf("rwm: cache: %w", err)
	}
	if err := q.Validate(); err != nil {
		return Prediction{}, err
	}
	p, shared, err := c.memo.do(ctx, Key(c.name, q), func(ctx context.Context) (Prediction, error) {
		return c.inner.Predict(ctx, q)
	})
	if shared {
		p.Usage = Usage{Cached: true}
	}
	return p, err
}
