package progress

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
)

// clock is a manual clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func noTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func linesReporter(t *testing.T, total int, c *clock) (*Reporter, *bytes.Buffer) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
	r, err := New(&buf, Config{Title: "evaluation", Total: total, Mode: Lines, Every: 10 * time.Second, Logger: log, Now: c.now})
	require.NoError(t, err)
	return r, &buf
}

func TestLines(t *testing.T) {
	c := newClock()
	r, buf := linesReporter(t, 10, c)
	c.advance(4 * time.Second)
	r.Done(1) // first unit: a line; ETA 4 s × 9
	c.advance(4 * time.Second)
	r.Done(1) // 4 s after the last line: quiet
	c.advance(7 * time.Second)
	r.Done(1) // 11 s after the last line: a line; 15 s / 3 × 7 = 35 s
	r.Reused(2)
	c.advance(5 * time.Second)
	r.Finish()
	r.Finish() // once only
	want := []string{
		`level=INFO msg=progress work=evaluation done=1 total=10 reused=0 elapsed=4s eta=36s`,
		`level=INFO msg=progress work=evaluation done=3 total=10 reused=0 elapsed=15s eta=35s`,
		`level=INFO msg=finished work=evaluation done=3 total=8 reused=2 elapsed=20s eta=33s`,
	}
	require.Equal(t, want, strings.Split(strings.TrimSpace(buf.String()), "\n"))
}

func TestState(t *testing.T) {
	c := newClock()
	r, _ := linesReporter(t, 4, c)
	require.Equal(t, State{Total: 4}, r.State())
	c.advance(3 * time.Second)
	r.Done(2)
	r.Reused(1)
	// 3 s for 2 runs, 1 left to pay for: 1.5 s.
	require.Equal(t, State{Done: 2, Reused: 1, Total: 3, Elapsed: 3 * time.Second, ETA: 1500 * time.Millisecond}, r.State())
	r.Reused(5) // never below what is done
	r.Done(1)   // more done than expected: the total follows
	require.Equal(t, 3, r.State().Total)
	r.Done(1)
	require.Equal(t, 4, r.State().Total)
	r.Grow(6)
	require.Equal(t, State{Done: 4, Reused: 6, Total: 10, Elapsed: 3 * time.Second, ETA: 4500 * time.Millisecond}, r.State())
}

func TestBar(t *testing.T) {
	var buf bytes.Buffer
	r, err := New(&buf, Config{Title: "comparison", Total: 10, Mode: Bar})
	require.NoError(t, err)
	r.Done(3)
	r.Reused(2)
	r.Finish()
	out := buf.String()
	require.Contains(t, out, "comparison (2 reused)")
	require.Contains(t, out, "3/3")
	require.True(t, strings.HasSuffix(out, "\n"), "the finished bar ends its line")
	require.False(t, IsTerminal(&buf))
}

func TestAutoOnAFileLogs(t *testing.T) {
	var buf bytes.Buffer
	r, err := New(&buf, Config{Title: "x", Total: 1})
	require.NoError(t, err)
	r.Done(1)
	require.Contains(t, buf.String(), "msg=progress work=x done=1 total=1")
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Total: -1}, {Mode: 7}, {Every: -time.Second}} {
		_, err := New(&bytes.Buffer{}, c)
		require.ErrorIs(t, err, ErrConfig)
	}
}

func TestExecutor(t *testing.T) {
	c := newClock()
	r, _ := linesReporter(t, 5, c)
	fail := errors.New("crashed")
	var calls int
	inner := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		calls++
		switch calls {
		case 1:
			return builder.Outcome{Loss: 1}, nil
		case 2:
			return builder.Outcome{Loss: 1, Reused: true}, nil
		}
		return builder.Outcome{}, fail
	})
	e := Executor(inner, r)
	for range 3 {
		_, _ = e.Execute(context.Background(), builder.Job{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Execute(ctx, builder.Job{})
	require.ErrorIs(t, err, fail)
	// fresh and failed runs are done, the reused one leaves the total, the
	// cancelled one is not counted.
	require.Equal(t, State{Done: 2, Reused: 1, Total: 4}, r.State())
}
