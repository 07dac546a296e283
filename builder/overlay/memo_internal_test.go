package overlay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
)

func always(error) bool    { return true }
func isNil(err error) bool { return err == nil }

// flights keeps at most limit results, the newest, and its age list stays
// bounded however many keys pass through it.
func TestFlightsBounds(t *testing.T) {
	fs := newFlights[int](2)
	get := func(key string, v int) (int, bool) {
		got, shared, err := fs.do(context.Background(), key, "test", func() (int, error) { return v, nil }, always, always)
		require.NoError(t, err)
		return got, shared
	}
	require.Equal(t, 1, must(get("a", 1)))
	require.Equal(t, 2, must(get("b", 2)))
	got, shared := get("b", 3)
	require.Equal(t, 2, got, "a kept result is served")
	require.True(t, shared)
	get("c", 4)
	_, shared = get("a", 5)
	require.False(t, shared, "the oldest went")
	for i := range 10_000 {
		get(fmt.Sprint(i), i)
	}
	require.Len(t, fs.m, 2)
	require.LessOrEqual(t, len(fs.age), 4*2+1)
}

func must(v int, _ bool) int { return v }

// Concurrent callers of one key share one run; a result not kept is run
// again by the next caller, and a waiter retries a failure that is not
// final; a cancelled waiter returns ErrCancelled.
func TestFlightsShareOneRun(t *testing.T) {
	fs := newFlights[int](8)
	var runs atomic.Int32
	release := make(chan struct{})
	fn := func() (int, error) { runs.Add(1); <-release; return 7, nil }
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, _, err := fs.do(context.Background(), "k", "test", fn, isNil, isNil)
			require.NoError(t, err)
			require.Equal(t, 7, v)
		})
	}
	for {
		fs.mu.Lock()
		_, started := fs.m["k"]
		fs.mu.Unlock()
		if started {
			break
		}
	}
	close(release)
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())

	boom := errors.New("transient")
	fail := func() (int, error) { runs.Add(1); return 0, boom }
	_, _, err := fs.do(context.Background(), "f", "test", fail, isNil, isNil)
	require.ErrorIs(t, err, boom)
	_, _, err = fs.do(context.Background(), "f", "test", fail, isNil, isNil)
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 3, runs.Load(), "a failure is not kept")

	block := make(chan struct{})
	go fs.do(context.Background(), "slow", "test", func() (int, error) { <-block; return 1, nil }, isNil, isNil)
	for {
		fs.mu.Lock()
		_, started := fs.m["slow"]
		fs.mu.Unlock()
		if started {
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = fs.do(ctx, "slow", "build", fn, isNil, isNil)
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.ErrorContains(t, err, "overlay: build:")
	close(block)
}

func TestMemoEntriesValidated(t *testing.T) {
	c := DefaultConfig()
	require.Equal(t, 1024, c.MemoEntries)
	c.Code, c.Allow, c.MemoEntries = "code", []string{"train.py"}, 0
	require.ErrorContains(t, c.Validate(), "MemoEntries")
}
