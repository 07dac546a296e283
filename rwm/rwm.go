package rwm

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/records"
)

// Query is one prediction request: what W reads.
type Query struct {
	Task     records.Task
	Proposal records.Proposal
	// Evidence is M, the real records in context. Its type admits only real
	// records, so predicted or synthetic ones cannot reach a world model.
	Evidence records.Evidence
}

// Validate reports the first problem with q, wrapping records.ErrInvalid.
func (q Query) Validate() error {
	if err := q.Task.Validate(); err != nil {
		return fmt.Errorf("rwm: query: %w", err)
	}
	if err := q.Proposal.Validate(); err != nil {
		return fmt.Errorf("rwm: query: %w", err)
	}
	return nil
}

// Prediction is W's answer for one query.
type Prediction struct {
	// Gain is ĝ in the task's metric units (b_e − predicted loss; positive =
	// better than the reference). Meaningful only when Valid.
	Gain float64
	// Low and High are the predicted q10 and q90 of the gain when
	// HasInterval is set (Low ≤ Gain ≤ High).
	Low, High   float64
	HasInterval bool
	// Valid is false when W judges the proposal infeasible or invalid; the
	// reward is then −c (METHOD.md §1 Reward 2).
	Valid bool
	// Reason is a short human-readable justification.
	Reason string
	// Usage is what producing this prediction cost a metered backend
	// (tokens), or marks it as served from a cache. Backends that do not
	// meter leave it zero. Ledger sums it; equality of predictions should
	// ignore it.
	Usage Usage
}

// Validate reports whether p is internally consistent: finite numbers and,
// when HasInterval, Low ≤ Gain ≤ High.
func (p Prediction) Validate() error {
	if !p.Valid {
		return nil
	}
	for _, v := range []float64{p.Gain, p.Low, p.High} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: prediction has a non-finite number (gain %g, q10 %g, q90 %g)", ErrBadPrediction, p.Gain, p.Low, p.High)
		}
	}
	if p.HasInterval && !(p.Low <= p.Gain && p.Gain <= p.High) {
		return fmt.Errorf("%w: interval [%g, %g] does not hold gain %g", ErrBadPrediction, p.Low, p.High, p.Gain)
	}
	return nil
}

// Errors of the package.
var (
	// ErrBadPrediction marks a prediction that cannot be used (non-finite,
	// inconsistent, absurd or unparseable).
	ErrBadPrediction = errors.New("rwm: bad prediction")
	// ErrTransient marks a failure worth retrying (rate limits, 5xx,
	// timeouts of a single call).
	ErrTransient = errors.New("rwm: transient failure")
	// ErrConfig marks an invalid configuration: every error of the
	// constructors (NewEmbedded, NewTuned, NewCache, NewRetry, NewLimit)
	// and of RetryConfig.Validate and CacheConfig.Validate wraps it.
	ErrConfig = errors.New("rwm: invalid config")
	// ErrCannotFeaturise: a world model cannot represent the proposal
	// (the embedded model and a free-form proposal, records.FreeForm, which
	// has no card or parameters to compare). Not transient: asking again
	// gives the same answer.
	ErrCannotFeaturise = errors.New("rwm: proposal cannot be featurised")
)

// configError returns err, a configuration's validation failure, wrapping
// ErrConfig; err's text is kept as it is.
func configError(err error) error {
	if err == nil || errors.Is(err, ErrConfig) {
		return err
	}
	return &wrappedConfigError{err: err}
}

// wrappedConfigError is a validation failure that does not itself wrap
// ErrConfig, made to.
type wrappedConfigError struct{ err error }

func (e *wrappedConfigError) Error() string   { return e.err.Error() }
func (e *wrappedConfigError) Unwrap() []error { return []error{ErrConfig, e.err} }

// WorldModel predicts the gain of a proposal.
//
// Predict must depend only on q (and the model's fixed configuration): the
// same query gives the same prediction for deterministic models. It returns
// a wrapped ctx.Err() when ctx is done, an error wrapping ErrTransient for
// failures worth retrying, and an error wrapping ErrBadPrediction when the
// backend answered with something unusable; it never returns a silent zero.
// Implementations are safe for concurrent use.
type WorldModel interface {
	Predict(ctx context.Context, q Query) (Prediction, error)
}

// Identifier is an optional interface: a world model that names itself
// (backend, model, version) so that caches keyed by model identity can tell
// models apart.
type Identifier interface {
	ID() string
}

// Pinner is an optional interface: a world model whose configuration
// follows its evidence (Tuned re-tunes its hyperparameters on each
// evidence) and can fix the configuration it picks on one evidence. Pin
// returns the model with ev's configuration, fixed: it predicts queries
// whose evidence is ev extended by a few records (a state's history on
// top of M without its task) without choosing again on each. It may be
// called concurrently; the result is safe for concurrent use.
type Pinner interface {
	Pin(ctx context.Context, ev records.Evidence) (WorldModel, error)
}
