package builder_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

func noSleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

func newPool(t *testing.T, x builder.Executor, mod func(*builder.PoolConfig)) *builder.Pool {
	t.Helper()
	cfg := builder.DefaultPoolConfig()
	cfg.Slots = 4
	cfg.Sleep = noSleep
	if mod != nil {
		mod(&cfg)
	}
	p, err := builder.NewPool(x, cfg)
	require.NoError(t, err)
	return p
}

func TestPoolConformanceScripted(t *testing.T) {
	buildertest.Run(t, func(t *testing.T) builder.Executor {
		return newPool(t, new(buildertest.Scripted), func(c *builder.PoolConfig) { c.Store = records.NewMemStore() })
	}, buildertest.Options{Timeout: 200 * time.Millisecond, CancelAfter: 100 * time.Millisecond, SleepMS: 5})
}

func TestScriptedConformance(t *testing.T) {
	buildertest.Run(t, func(t *testing.T) builder.Executor { return new(buildertest.Scripted) },
		buildertest.Options{Timeout: 100 * time.Millisecond, CancelAfter: 50 * time.Millisecond, SleepMS: 1})
}

func TestPoolConfigValidate(t *testing.T) {
	ok := builder.DefaultPoolConfig()
	require.NoError(t, ok.Validate())
	for name, mod := range map[string]func(*builder.PoolConfig){
		"slots":    func(c *builder.PoolConfig) { c.Slots = 0 },
		"timeout":  func(c *builder.PoolConfig) { c.Timeout = -1 },
		"attempts": func(c *builder.PoolConfig) { c.MaxAttempts = 0 },
		"backoff":  func(c *builder.PoolConfig) { c.Backoff, c.MaxBackoff = 2, 1 },
		"price":    func(c *builder.PoolConfig) { c.PricePerDeviceHour = -1 },
	} {
		c := ok
		mod(&c)
		require.Error(t, c.Validate(), name)
		_, err := builder.NewPool(new(buildertest.Scripted), c)
		require.Error(t, err, name)
	}
}

func TestPoolIdempotentThroughStore(t *testing.T) {
	store := records.NewMemStore()
	x := new(buildertest.Scripted)
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store = store })
	ctx := context.Background()

	j := buildertest.Job(buildertest.Spec{})
	first, err := p.Execute(ctx, j)
	require.NoError(t, err)
	// The finished run is in the store when Execute returns.
	rs, err := store.Scan(ctx, records.Filter{TaskID: j.Task.ID, Key: j.Proposal.Key()})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, records.Real, rs[0].Source)
	require.Equal(t, first.Loss, rs[0].Loss)

	second, err := p.Execute(ctx, j)
	require.NoError(t, err)
	require.Equal(t, 1, x.Calls(), "a recorded (task, key, seed) must not run again")
	require.Equal(t, first.Loss, second.Loss)
	require.Equal(t, first.Gain, second.Gain)

	// Another seed is another run.
	j2 := j
	j2.Seed++
	_, err = p.Execute(ctx, j2)
	require.NoError(t, err)
	require.Equal(t, 2, x.Calls())

	// Infeasible runs are recorded too and come back infeasible.
	inf := buildertest.Job(buildertest.Spec{Behaviour: buildertest.Infeasible, Reason: "nope"})
	_, err = p.Execute(ctx, inf)
	require.ErrorIs(t, err, builder.ErrInfeasible)
	out, err := p.Execute(ctx, inf)
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.Equal(t, "nope", out.Infeasible)
	require.Equal(t, 3, x.Calls())

	// Failures are not recorded: a crash runs again.
	crash := buildertest.Job(buildertest.Spec{Behaviour: buildertest.Crash})
	for range 2 {
		_, err = p.Execute(ctx, crash)
		require.ErrorIs(t, err, builder.ErrFailed)
	}
	require.Equal(t, 2, x.CallsFor(crash))
	tot := p.Ledger().Totals()
	require.Equal(t, 3, tot.Runs)
	require.Equal(t, 1, tot.Infeasible)
	require.Equal(t, 2, tot.Reused)
	require.Equal(t, 2, tot.Failed)
}

// A store that fails appends loses nothing silently: the outcome comes back
// with the store's error.
type failingStore struct{ records.Store }

var errDisk = errors.New("disk full")

func (failingStore) Append(context.Context, ...records.Record) error { return errDisk }

func TestPoolReportsUnrecordedRun(t *testing.T) {
	p := newPool(t, new(buildertest.Scripted), func(c *builder.PoolConfig) { c.Store = failingStore{records.NewMemStore()} })
	j := buildertest.Job(buildertest.Spec{})
	out, err := p.Execute(context.Background(), j)
	require.ErrorIs(t, err, errDisk)
	require.InDelta(t, buildertest.Quadratic(j.Task, j.Proposal, j.Seed), out.Loss, 1e-12)
}

func TestPoolCoalescesIdenticalRequests(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		calls.Add(1)
		<-release
		return builder.Outcome{Loss: 1, Gain: 0.5, Seeds: []uint64{j.Seed}}, nil
	})
	p := newPool(t, x, nil)
	j := buildertest.Job(buildertest.Spec{})
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]builder.Outcome, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jj := j
			// Same change written differently: the same proposal key.
			jj.Proposal.Params = map[string]string{"factor": "1.50", "run": j.Proposal.Params["run"]}
			outs[i], errs[i] = p.Execute(context.Background(), jj)
		}()
	}
	require.Eventually(t, func() bool { return p.Ledger().Totals().Coalesced == n-1 }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.EqualValues(t, 1, calls.Load())
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, 1.0, outs[i].Loss)
	}
}

func TestPoolCoalescedRunSurvivesOneRequesterLeaving(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 1)
	var cancelled atomic.Bool
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		started <- struct{}{}
		select {
		case <-release:
			return builder.Outcome{Loss: 2, Gain: -0.5, Seeds: []uint64{j.Seed}}, nil
		case <-ctx.Done():
			cancelled.Store(true)
			return builder.DoneOutcome(ctx, j, records.Cost{}, "")
		}
	})
	p := newPool(t, x, nil)
	j := buildertest.Job(buildertest.Spec{})
	ctx1, cancel1 := context.WithCancel(context.Background())
	res1 := make(chan error, 1)
	go func() { _, err := p.Execute(ctx1, j); res1 <- err }()
	<-started
	res2 := make(chan builder.Outcome, 1)
	go func() { o, _ := p.Execute(context.Background(), j); res2 <- o }()
	require.Eventually(t, func() bool { return p.Ledger().Totals().Coalesced == 1 }, 10*time.Second, time.Millisecond)
	cancel1()
	require.ErrorIs(t, <-res1, builder.ErrCancelled)
	close(release)
	require.Equal(t, 2.0, (<-res2).Loss)
	require.False(t, cancelled.Load(), "the run was cancelled while a requester still waited")
}

func TestPoolRetriesTransientOnlyWithBackoff(t *testing.T) {
	var sleeps []time.Duration
	var mu sync.Mutex
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		sleeps = append(sleeps, d)
		mu.Unlock()
		return nil
	}
	x := new(buildertest.Scripted)
	p := newPool(t, x, func(c *builder.PoolConfig) {
		c.Sleep, c.MaxAttempts, c.Backoff, c.MaxBackoff = sleep, 4, time.Second, 3*time.Second
	})
	ctx := context.Background()

	// Fails twice, then succeeds on the third attempt.
	j := buildertest.Job(buildertest.Spec{Behaviour: buildertest.Transient, Times: 2})
	_, err := p.Execute(ctx, j)
	require.NoError(t, err)
	require.Equal(t, 3, x.CallsFor(j))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second}, sleeps)

	// Always transient: MaxAttempts attempts, backoff capped at MaxBackoff.
	sleeps = nil
	j = buildertest.Job(buildertest.Spec{Behaviour: buildertest.Transient})
	_, err = p.Execute(ctx, j)
	require.ErrorIs(t, err, builder.ErrTransient)
	require.Equal(t, 4, x.CallsFor(j))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, sleeps)

	// Crash and infeasible are never retried.
	for _, b := range []string{buildertest.Crash, buildertest.Infeasible, buildertest.Garbage} {
		j = buildertest.Job(buildertest.Spec{Behaviour: b})
		_, err = p.Execute(ctx, j)
		require.Error(t, err)
		require.Equal(t, 1, x.CallsFor(j), b)
	}
	tot := p.Ledger().Totals()
	require.Equal(t, 2+3, tot.Retries)
}

func TestPoolTimeoutIsInfeasibleAndRecorded(t *testing.T) {
	store := records.NewMemStore()
	// An inner executor that ignores the WithTimeout convention and
	// reports every done context as a cancellation.
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		<-ctx.Done()
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrCancelled, Err: ctx.Err()}
	})
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store, c.Timeout = store, 20*time.Millisecond })
	j := buildertest.Job(buildertest.Spec{})
	out, err := p.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, builder.ErrTimedOut)
	require.Equal(t, "timed out", out.Infeasible)
	rs, err := store.Scan(context.Background(), records.Filter{Key: j.Proposal.Key()})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "timed out", rs[0].Infeasible)
}

func TestPoolSlotBudget(t *testing.T) {
	var running, peak atomic.Int64
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		n := running.Add(j.Slots)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		running.Add(-j.Slots)
		return builder.Outcome{Loss: 1, Gain: 0.5}, nil
	})
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Slots = 3 })
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := buildertest.Job(buildertest.Spec{})
			j.Slots = int64(1 + i%3)
			_, err := p.Execute(context.Background(), j)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(3))
	j := buildertest.Job(buildertest.Spec{})
	j.Slots = 4
	_, err := p.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed, "a job larger than the pool can never run")
}

func TestPoolLedgerPricesDeviceHours(t *testing.T) {
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		return builder.Outcome{Loss: 1, Gain: 0.5, Cost: records.Cost{DeviceSeconds: 1800, WallSeconds: 900}}, nil
	})
	p := newPool(t, x, func(c *builder.PoolConfig) { c.PricePerDeviceHour = 2.5 })
	out, err := p.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.NoError(t, err)
	// 1800 device-seconds = 0.5 device-hours at 2.5 per hour.
	require.InDelta(t, 1.25, out.Cost.Money, 1e-12)
	_, err = p.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
	require.NoError(t, err)
	tot := p.Ledger().Totals()
	require.Equal(t, 2, tot.Runs)
	require.InDelta(t, 3600, tot.Cost.DeviceSeconds, 1e-9)
	require.InDelta(t, 1800, tot.Cost.WallSeconds, 1e-9)
	require.InDelta(t, 2.5, tot.Cost.Money, 1e-12)
}

// hookStore calls hook (once) after a Scan has read the store and before it
// returns, to widen a race window deterministically.
type hookStore struct {
	records.Store
	mu   sync.Mutex
	hook func()
}

func (s *hookStore) Scan(ctx context.Context, f records.Filter) ([]records.Record, error) {
	rs, err := s.Store.Scan(ctx, f)
	s.mu.Lock()
	h := s.hook
	s.hook = nil
	s.mu.Unlock()
	if h != nil {
		h()
	}
	return rs, err
}

// A run that finishes between a request's store lookup and its joining the
// in-flight map is recorded by then: the request must reuse its record, not
// pay for the run again.
func TestPoolDoesNotRunTwiceAfterStaleLookup(t *testing.T) {
	var calls atomic.Int64
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		calls.Add(1)
		return builder.Outcome{Loss: 1, Gain: 0.5, Seeds: []uint64{j.Seed}}, nil
	})
	store := &hookStore{Store: records.NewMemStore()}
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store = store })
	j := buildertest.Job(buildertest.Spec{})
	ctx := context.Background()
	var otherErr error
	// The first request's lookup finds nothing; before it goes on, an
	// identical request runs to completion and records its run.
	store.hook = func() { _, otherErr = p.Execute(ctx, j) }
	out, err := p.Execute(ctx, j)
	require.NoError(t, otherErr)
	require.NoError(t, err)
	require.Equal(t, 1.0, out.Loss)
	require.EqualValues(t, 1, calls.Load(), "a recorded (task, key, seed) ran twice")
	rs, err := store.Store.Scan(ctx, records.Filter{TaskID: j.Task.ID})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	tot := p.Ledger().Totals()
	require.Equal(t, 1, tot.Runs)
	require.Equal(t, 1, tot.Reused)
}

// An executor that reports its own seeds, without the job's, still leaves a
// record that the job's seed finds: the run is paid for once.
func TestPoolRecordsJobSeed(t *testing.T) {
	var calls atomic.Int64
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		calls.Add(1)
		return builder.Outcome{Loss: 1, Gain: 0.5, Seeds: []uint64{j.Seed + 100, j.Seed + 101}}, nil
	})
	store := records.NewMemStore()
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store = store })
	j := buildertest.Job(buildertest.Spec{})
	ctx := context.Background()
	for range 2 {
		out, err := p.Execute(ctx, j)
		require.NoError(t, err)
		require.Contains(t, out.Seeds, j.Seed)
	}
	require.EqualValues(t, 1, calls.Load(), "a recorded run was paid for twice")
	_, seen, err := records.Seen(ctx, store, j.Task.ID, j.Proposal.Key(), j.Seed)
	require.NoError(t, err)
	require.True(t, seen)
}

// A job whose record the store would reject (here: proposal text that is
// not UTF-8) is refused before it runs, not run and then left unrecorded.
func TestPoolRefusesUnrecordableJobBeforeRunning(t *testing.T) {
	x := new(buildertest.Scripted)
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store = records.NewMemStore() })
	j := buildertest.Job(buildertest.Spec{})
	j.Proposal.Text = "bad \xff byte"
	_, err := p.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed)
	require.ErrorIs(t, err, records.ErrInvalid)
	require.Equal(t, 0, x.Calls(), "an unrecordable run was paid for")
}

// Outcome.Reused tells paid runs from served ones: a second pass over the
// same store reports every outcome reused, with the original cost, and the
// costs of the outcomes without Reused sum to what the executor spent.
func TestPoolReusedFromStore(t *testing.T) {
	store := records.NewMemStore()
	x := new(buildertest.Scripted)
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store = store })
	ctx := context.Background()
	jobs := []builder.Job{
		buildertest.Job(buildertest.Spec{}),
		buildertest.Job(buildertest.Spec{Behaviour: buildertest.Infeasible, Reason: "diverged"}),
	}
	jobs[1].Proposal.Params["run"] = "other"
	var paid, served int
	for pass := range 2 {
		for _, j := range jobs {
			out, err := p.Execute(ctx, j)
			if err != nil {
				require.ErrorIs(t, err, builder.ErrInfeasible)
			}
			require.Equal(t, pass == 1, out.Reused, "pass %d job %s", pass, j.Proposal.Key())
			if out.Reused {
				served++
			} else {
				paid++
			}
		}
	}
	require.Equal(t, 2, x.Calls())
	require.Equal(t, 2, paid)
	require.Equal(t, 2, served)
	require.Equal(t, 2, p.Ledger().Totals().Reused)
}

// Of n coalesced requests for one run, exactly one reports it fresh.
func TestPoolCoalescedTwinsAreReused(t *testing.T) {
	release := make(chan struct{})
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		<-release
		return builder.Outcome{Loss: 1, Gain: 0.5, Seeds: []uint64{j.Seed}, Cost: records.Cost{DeviceSeconds: 7}}, nil
	})
	p := newPool(t, x, nil)
	j := buildertest.Job(buildertest.Spec{})
	const n = 5
	var wg sync.WaitGroup
	outs := make([]builder.Outcome, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], _ = p.Execute(context.Background(), j)
		}()
	}
	require.Eventually(t, func() bool { return p.Ledger().Totals().Coalesced == n-1 }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	fresh := 0
	for _, o := range outs {
		require.Equal(t, 7.0, o.Cost.DeviceSeconds)
		if !o.Reused {
			fresh++
		}
	}
	require.Equal(t, 1, fresh)
}
