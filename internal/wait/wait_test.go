package wait_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/wait"
)

func TestSleep(t *testing.T) {
	require.NoError(t, wait.Sleep(context.Background(), time.Millisecond))
	require.NoError(t, wait.Sleep(context.Background(), 0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, wait.Sleep(ctx, time.Hour), context.Canceled)
	require.ErrorIs(t, wait.Sleep(ctx, 0), context.Canceled)
}
