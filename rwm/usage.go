package rwm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Usage is the metered cost of one prediction. A backend that bills by
// tokens (an LLM) fills the token counts of each prediction it returns; a
// cache marks the predictions it serves without calling its backend with
// Cached and zero tokens, so that a Ledger placed outside the cache counts
// hits and spends exactly once.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	// Cached is set when the prediction was served from a cache (or by
	// joining an identical call already in flight) without a backend call.
	Cached bool `json:"cached,omitempty"`
}

// TransientError is a transient failure that says how long to wait before
// retrying (for example an HTTP 429 with Retry-After). It wraps
// ErrTransient: errors.Is(err, ErrTransient) holds for it, and Retry waits
// at least After before the next attempt.
type TransientError struct {
	// After is the wait the backend asked for; 0 = no preference.
	After time.Duration
	// Err is the underlying failure; may be nil.
	Err error
}

// Error implements error.
func (e *TransientError) Error() string {
	msg := "rwm: transient failure"
	if e.After > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.After)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying failure.
func (e *TransientError) Unwrap() error { return e.Err }

// Is reports target == ErrTransient, so that every TransientError counts as
// transient whatever it wraps.
func (e *TransientError) Is(target error) bool { return target == ErrTransient }

// retryAfter returns the wait a TransientError in err's chain asks for.
func retryAfter(err error) time.Duration {
	var te *TransientError
	if errors.As(err, &te) {
		return te.After
	}
	return 0
}

// Func adapts an ordinary function to WorldModel. The function must itself
// be safe for concurrent use.
type Func func(ctx context.Context, q Query) (Prediction, error)

// Predict calls f(ctx, q).
func (f Func) Predict(ctx context.Context, q Query) (Prediction, error) { return f(ctx, q) }

var _ WorldModel = Func(nil)
