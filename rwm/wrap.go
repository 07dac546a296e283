package rwm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/lm2lm/lm2lm/internal/wait"
	"github.com/lm2lm/lm2lm/records"
)

// Limit bounds the number of concurrent calls to a world model (an LLM
// server's parallel slots, a rate-limited API). Callers beyond the limit
// wait; a waiter whose ctx ends gives up with the wrapped ctx error. A Limit
// is safe for concurrent use.
type Limit struct {
	inner WorldModel
	sem   *semaphore.Weighted
	n     int
}

var (
	_ WorldModel = (*Limit)(nil)
	_ Identifier = (*Limit)(nil)
)

// NewLimit returns inner limited to n concurrent calls, or an error wrapping
// ErrConfig if inner is nil or n < 1.
func NewLimit(inner WorldModel, n int) (*Limit, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: limit: nil inner model", ErrConfig)
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: concurrency limit n = %d, want ≥ 1", ErrConfig, n)
	}
	return &Limit{inner: inner, sem: semaphore.NewWeighted(int64(n)), n: n}, nil
}

// ID returns the inner model's identity.
func (l *Limit) ID() string { return identity(l.inner) }

// Predict waits for a slot and calls the inner model.
func (l *Limit) Predict(ctx context.Context, q Query) (Prediction, error) {
	if err := ctx.Err(); err != nil {
		return Prediction{}, fmt.Errorf("rwm: limit: %w", err)
	}
	if err := l.sem.Acquire(ctx, 1); err != nil {
		return Prediction{}, fmt.Errorf("rwm: limit: %w", err)
	}
	defer l.sem.Release(1)
	return l.inner.Predict(ctx, q)
}

// RetryConfig parameterises Retry.
type RetryConfig struct {
	// Attempts is the most calls per prediction, the first included;
	// default 4. Library choice: three retries ride out a short outage of
	// an LLM server without hiding a dead one.
	Attempts int
	// Base is the wait before the first retry; each further retry waits
	// Multiplier times longer, capped at Max. Defaults 500ms, 2, 30s
	// (library choice: the usual exponential backoff of HTTP clients).
	// There is no jitter: waits are deterministic, and a Limit in front
	// keeps the herd small.
	Base       time.Duration
	Multiplier float64
	Max        time.Duration
	// MaxAfter caps the wait a failure may ask for (TransientError.After,
	// an HTTP Retry-After): a failure asking for longer is returned at
	// once, still transient, without waiting. Default 5 min (library
	// choice: a rate limit of a few minutes is ridden out; a server asking
	// for an hour is down for this run, and the caller should know now).
	MaxAfter time.Duration
	// Sleep waits d or until ctx is done, returning ctx's error then. Nil
	// means a real timer; tests inject an instant one.
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultRetryConfig returns the default retry policy.
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{Attempts: 4, Base: 500 * time.Millisecond, Multiplier: 2, Max: 30 * time.Second, MaxAfter: 5 * time.Minute}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c RetryConfig) Validate() error {
	switch {
	case c.Attempts < 1:
		return fmt.Errorf("%w: retry Attempts = %d, want ≥ 1", ErrConfig, c.Attempts)
	case c.Base < 0:
		return fmt.Errorf("%w: retry Base = %s, want ≥ 0", ErrConfig, c.Base)
	case c.Max < 0:
		return fmt.Errorf("%w: retry Max = %s, want ≥ 0", ErrConfig, c.Max)
	case c.MaxAfter < 0:
		return fmt.Errorf("%w: retry MaxAfter = %s, want ≥ 0", ErrConfig, c.MaxAfter)
	case !(c.Multiplier >= 1):
		return fmt.Errorf("%w: retry Multiplier = %g, want ≥ 1", ErrConfig, c.Multiplier)
	}
	return nil
}

// Backoff returns the wait after failed attempt n (n = 1 for the first
// failure) when the failure did not ask for a wait: Base·Multiplierⁿ⁻¹
// capped at Max.
func (c RetryConfig) Backoff(n int) time.Duration {
	d := float64(c.Base)
	for i := 1; i < n && d < float64(c.Max); i++ {
		d *= c.Multiplier
	}
	if d > float64(c.Max) {
		d = float64(c.Max)
	}
	return time.Duration(d)
}

// RetryError is returned when every attempt failed transiently. It wraps
// the last failure, so errors.Is(err, ErrTransient) still holds.
type RetryError struct {
	Attempts int   // calls made, all failed transiently
	Err      error // the last failure
}

// Error implements error.
func (e *RetryError) Error() string {
	return fmt.Sprintf("rwm: retry: gave up after %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns the last failure.
func (e *RetryError) Unwrap() error { return e.Err }

// Retry retries a world model's transient failures (errors wrapping
// ErrTransient) with exponential backoff, waiting at least the After of a
// TransientError (an HTTP Retry-After) up to RetryConfig.MaxAfter: a
// failure asking for a longer wait is returned at once. Other errors,
// including a done ctx, return at once. A Retry is safe for concurrent use.
type Retry struct {
	inner WorldModel
	cfg   RetryConfig
}

var (
	_ WorldModel = (*Retry)(nil)
	_ Identifier = (*Retry)(nil)
)

// NewRetry returns inner with retries, or an error wrapping ErrConfig if
// inner is nil or cfg is invalid.
func NewRetry(inner WorldModel, cfg RetryConfig) (*Retry, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: retry: nil inner model", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Sleep == nil {
		cfg.Sleep = wait.Sleep
	}
	return &Retry{inner: inner, cfg: cfg}, nil
}

// ID returns the inner model's identity.
func (r *Retry) ID() string { return identity(r.inner) }

// Predict calls the inner model until it succeeds, fails for good, runs out
// of attempts or ctx is done.
func (r *Retry) Predict(ctx context.Context, q Query) (Prediction, error) {
	var last error
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return Prediction{}, fmt.Errorf("rwm: retry: %w", err)
		}
		p, err := r.inner.Predict(ctx, q)
		if err == nil || !errors.Is(err, ErrTransient) {
			return p, err
		}
		last = err
		if n >= r.cfg.Attempts {
			return Prediction{}, &RetryError{Attempts: n, Err: last}
		}
		after := retryAfter(err)
		if after > r.cfg.MaxAfter {
			return Prediction{}, fmt.Errorf("rwm: retry: the model asks to wait %s, more than MaxAfter %s: %w", after, r.cfg.MaxAfter, err)
		}
		wait := max(r.cfg.Backoff(n), after)
		if err := r.cfg.Sleep(ctx, wait); err != nil {
			return Prediction{}, fmt.Errorf("rwm: retry: waiting after %v: %w", last, err)
		}
	}
}

// LedgerStats is what a Ledger counted.
type LedgerStats struct {
	Calls            int64 // Predict calls through the ledger
	Errors           int64 // calls that returned an error
	CacheHits        int64 // successful calls whose prediction was served by a cache
	BackendCalls     int64 // successful calls that reached the backend (Calls − Errors − CacheHits)
	PromptTokens     int64 // summed Usage.PromptTokens
	CompletionTokens int64 // summed Usage.CompletionTokens
}

// Ledger counts calls, cache hits and tokens for the cost ledger. Place it
// outermost (Ledger → Cache → Limit → Retry → backend) to count what the
// callers asked for and what the backend spent; tokens are read from each
// returned Prediction.Usage, so a backend reports them by filling it. A
// Ledger is safe for concurrent use.
type Ledger struct {
	inner WorldModel
	mu    sync.Mutex
	s     LedgerStats
}

var (
	_ WorldModel = (*Ledger)(nil)
	_ Identifier = (*Ledger)(nil)
	_ Pinner     = (*Ledger)(nil)
)

// NewLedger returns a ledger over inner.
func NewLedger(inner WorldModel) *Ledger { return &Ledger{inner: inner} }

// ID returns the inner model's identity.
func (l *Ledger) ID() string { return identity(l.inner) }

// Predict calls the inner model and counts the call.
func (l *Ledger) Predict(ctx context.Context, q Query) (Prediction, error) {
	p, err := l.inner.Predict(ctx, q)
	return l.count(p, err)
}

// Pin pins the inner model on ev when it is a Pinner (Tuned) and returns
// the pinned model, whose calls this ledger counts as its own; over any
// other model it returns the ledger itself (a model whose configuration
// does not follow its evidence is pinned already). So a Ledger placed
// outside a Tuned keeps lm2lm.Config.HeldOutTask's one tuning per task.
func (l *Ledger) Pin(ctx context.Context, ev records.Evidence) (WorldModel, error) {
	p, ok := l.inner.(Pinner)
	if !ok {
		return l, nil
	}
	w, err := p.Pin(ctx, ev)
	if err != nil {
		return nil, err
	}
	return &ledgerPinned{ledger: l, inner: w}, nil
}

// ledgerPinned is a Ledger's pinned inner model, counted by the ledger.
type ledgerPinned struct {
	ledger *Ledger
	inner  WorldModel
}

func (m *ledgerPinned) ID() string { return identity(m.inner) }

func (m *ledgerPinned) Predict(ctx context.Context, q Query) (Prediction, error) {
	p, err := m.inner.Predict(ctx, q)
	return m.ledger.count(p, err)
}

// count adds one call's outcome to the counters and returns it.
func (l *Ledger) count(p Prediction, err error) (Prediction, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.Calls++
	switch {
	case err != nil:
		l.s.Errors++
	case p.Usage.Cached:
		l.s.CacheHits++
	default:
		l.s.BackendCalls++
	}
	l.s.PromptTokens += p.Usage.PromptTokens
	l.s.CompletionTokens += p.Usage.CompletionTokens
	return p, err
}

// Stats returns a snapshot of the counters.
func (l *Ledger) Stats() LedgerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s
}
