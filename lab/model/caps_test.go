package model

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A configuration at every field's upper limit is refused before any
// allocation, as too large (a hand-made Spec at Validate's limits once ran
// one step for over 300 s).
func TestValidateRefusesHugeConfigs(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	huge := c
	huge.Context, huge.Embed, huge.Hidden, huge.Layers, huge.Batch = maxContext, maxWidth, maxWidth, maxLayers, maxBatch
	err := huge.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), "MaxStepFLOPs")
	require.Contains(t, err.Error(), "MaxParams")

	long := c
	long.Steps = maxSteps
	require.Greater(t, TrainFLOPs(long), MaxRunFLOPs, "the default step × a million steps is over the run cap")
	require.ErrorIs(t, long.Validate(), ErrTooLarge)

	start := time.Now()
	_, err = Train(context.Background(), huge, Data{}, 1)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Less(t, time.Since(start), time.Minute, "refused before training")
}

// Train checks its context every step: a run whose context is cancelled
// after its first step stops at step 1, not at step 16.
func TestTrainChecksContextEveryStep(t *testing.T) {
	require.Equal(t, 1, ctxEvery)
	c := quickConfig(Autoregressive)
	c.Steps = 64
	ctx, cancel := context.WithCancel(context.Background())
	d := randomData(c.Vocab, 4096, 1)
	n := 0
	ctx = &countingCtx{Context: ctx, after: 2, cancel: cancel, n: &n}
	res, err := Train(ctx, c, d, 1)
	require.True(t, errors.Is(err, context.Canceled), err)
	require.Equal(t, 2, res.StepsRun)
}

// countingCtx cancels itself on its after-th Err call.
type countingCtx struct {
	context.Context
	after  int
	cancel context.CancelFunc
	n      *int
}

func (c *countingCtx) Err() error {
	*c.n++
	if *c.n > c.after {
		c.cancel()
	}
	return c.Context.Err()
}
