package rwmtest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lm2lm/lm2lm/rwm"
)

// Fixed is a fixed world model for other packages' tests: it answers each
// query with ByKey[q.Proposal.Key()] when present and Default otherwise,
// whatever the records in context. The no-change proposal gets Default
// too unless ByKey names it. It validates queries and honours ctx like a
// real model, and counts its calls. Set the fields before first use; a
// *Fixed is then safe for concurrent use.
type Fixed struct {
	// Default answers every proposal that ByKey does not name.
	Default rwm.Prediction
	// ByKey maps a canonical proposal key (records.Proposal.Key) to its
	// prediction.
	ByKey map[string]rwm.Prediction
	// Err, when set, is returned by every call (after ctx and validation
	// checks), for testing callers' error paths.
	Err error

	calls atomic.Int64
}

var _ rwm.WorldModel = (*Fixed)(nil)
var _ rwm.Identifier = (*Fixed)(nil)

// Predict returns the fixed prediction for q.Proposal.
func (f *Fixed) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	f.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("rwmtest: fixed: %w", err)
	}
	if err := q.Validate(); err != nil {
		return rwm.Prediction{}, err
	}
	if f.Err != nil {
		return rwm.Prediction{}, f.Err
	}
	if p, ok := f.ByKey[q.Proposal.Key()]; ok {
		return p, nil
	}
	return f.Default, nil
}

// Calls returns how many times Predict was called.
func (f *Fixed) Calls() int64 { return f.calls.Load() }

// ID implements rwm.Identifier.
func (f *Fixed) ID() string { return "rwmtest.Fixed" }
