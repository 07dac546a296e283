package oaichat

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/rwm"
)

func TestWorldModelError(t *testing.T) {
	ctx := context.Background()
	// A transient attempt becomes an *rwm.TransientError with the server's
	// Retry-After.
	ae := &AttemptError{Status: 429, RetryAfter: 7 * time.Second, Transient: true, Err: errors.New("slow down")}
	err := WorldModelError(ctx, "rwm/x", "m", fmt.Errorf("%w: %w", ErrTransient, ae))
	var te *rwm.TransientError
	require.ErrorAs(t, err, &te)
	require.Equal(t, 7*time.Second, te.After)
	require.ErrorIs(t, err, rwm.ErrTransient)
	require.True(t, IsStatus(err, 429))
	require.False(t, IsStatus(err, 400))
	require.Contains(t, err.Error(), "rwm/x: m: ")

	// Anything else is wrapped with the model's name, not transient.
	err = WorldModelError(ctx, "rwm/x", "m", ErrBodyTooLarge)
	require.ErrorIs(t, err, ErrBodyTooLarge)
	require.NotErrorIs(t, err, rwm.ErrTransient)
	require.EqualError(t, err, "rwm/x: m: response body too large")

	// After ctx's end the error is ctx's, whatever the attempt said.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = WorldModelError(cctx, "rwm/x", "m", fmt.Errorf("%w: %w", ErrTransient, context.Canceled))
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.As(err, &te))
}
