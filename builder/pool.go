package builder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/lm2lm/lm2lm/internal/wait"
	"github.com/lm2lm/lm2lm/records"
)

// PoolConfig parameterises NewPool.
type PoolConfig struct {
	// Slots is the device-slot budget shared by concurrent jobs; a job
	// holds Job.Slots of it (0 counts as 1) while it runs. Default 1.
	Slots int64
	// Timeout limits each attempt; a run past it is infeasible and timed
	// out (ErrInfeasible, ErrTimedOut). 0 = no limit. Default 0.
	Timeout time.Duration
	// MaxAttempts bounds the attempts of one run; only ErrTransient
	// failures are retried. Default 3 (library choice: a node failure
	// rarely strikes three times; more would hide a broken cluster).
	MaxAttempts int
	// Backoff is the wait before the first retry; it doubles up to
	// MaxBackoff. Defaults 1 s and 1 min. Slots are released while waiting.
	Backoff, MaxBackoff time.Duration
	// PricePerDeviceHour prices a run: Money = device seconds / 3600 ×
	// price, filled into outcomes that report no money. Default 0 (unpriced).
	PricePerDeviceHour float64
	// Store, when set, makes runs idempotent: a (task, proposal key, seed)
	// that already has a real record there is not run again, and every
	// finished run (feasible or infeasible) is appended before Execute
	// returns it, its seeds always including the job's seed. A job whose
	// record the store would reject (records.Storable) is refused with
	// ErrFailed before it runs. Default nil.
	Store records.Store
	// Ledger receives the pool's totals; nil = a new ledger (see
	// Pool.Ledger).
	Ledger *Ledger
	// Sleep waits d or until ctx is done (returning ctx.Err()); nil = a
	// timer. Tests inject it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for record times and measured wall time; nil =
	// time.Now.
	Now func() time.Time
}

// DefaultPoolConfig returns the defaults.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{Slots: 1, MaxAttempts: 3, Backoff: time.Second, MaxBackoff: time.Minute}
}

// Validate reports the first problem with c.
func (c PoolConfig) Validate() error {
	switch {
	case c.Slots < 1:
		return fmt.Errorf("builder: PoolConfig.Slots = %d, want ≥ 1", c.Slots)
	case c.Timeout < 0:
		return fmt.Errorf("builder: PoolConfig.Timeout = %v, want ≥ 0", c.Timeout)
	case c.MaxAttempts < 1:
		return fmt.Errorf("builder: PoolConfig.MaxAttempts = %d, want ≥ 1", c.MaxAttempts)
	case c.Backoff < 0 || c.MaxBackoff < c.Backoff:
		return fmt.Errorf("builder: PoolConfig backoff %v..%v, want 0 ≤ Backoff ≤ MaxBackoff", c.Backoff, c.MaxBackoff)
	case c.PricePerDeviceHour < 0 || c.PricePerDeviceHour != c.PricePerDeviceHour:
		return fmt.Errorf("builder: PoolConfig.PricePerDeviceHour = %g, want ≥ 0", c.PricePerDeviceHour)
	}
	return nil
}

// Pool runs jobs on an inner Executor under a slot budget, with per-attempt
// timeouts, bounded retries of transient failures, coalescing of identical
// concurrent requests and idempotency through a records store. It is an
// Executor and safe for concurrent use. Every goroutine it starts has
// finished by the time the Execute that needed it returns, except a run
// whose every requester left: that one is cancelled and awaited by the last
// requester to leave.
type Pool struct {
	exec   Executor
	cfg    PoolConfig
	sem    *semaphore.Weighted
	ledger *Ledger

	mu       sync.Mutex
	inflight map[callKey]*call
}

var _ Executor = (*Pool)(nil)

type callKey struct {
	task, key string
	seed      uint64
}

type call struct {
	refs    int
	claimed bool // a requester has collected the outcome as its own run
	cancel  context.CancelFunc
	done    chan struct{}
	out     Outcome
	err     error
}

// NewPool returns a pool running jobs on exec.
func NewPool(exec Executor, cfg PoolConfig) (*Pool, error) {
	if exec == nil {
		return nil, errors.New("builder: NewPool: nil executor")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Sleep == nil {
		cfg.Sleep = wait.Sleep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := cfg.Ledger
	if l == nil {
		l = new(Ledger)
	}
	return &Pool{exec: exec, cfg: cfg, sem: semaphore.NewWeighted(cfg.Slots), ledger: l,
		inflight: make(map[callKey]*call)}, nil
}

// Ledger returns the pool's ledger.
func (p *Pool) Ledger() *Ledger { return p.ledger }

// Execute runs j, or returns the stored outcome of an identical earlier
// run, or joins an identical run in flight. Outcome.Reused is set on a
// stored outcome and on every copy of a coalesced run but one (the first
// requester to collect it reports the run as its own), so summing the
// costs of outcomes without Reused counts every run once. Identity is (task ID, proposal
// key, seed). A requester whose ctx is done leaves with ErrCancelled (or a
// timeout, see DoneError); the run is cancelled only when its last
// requester leaves. A finished run is appended to the store before it is
// returned; when that append fails, Execute returns the outcome together
// with the store's error (the run happened, but is not recorded). An
// outcome that records.Plausible rejects is ErrFailed (wrapping
// ErrBadResult and records.ErrImplausible): it is neither returned as an
// outcome nor stored, nor is such a stored record reused.
func (p *Pool) Execute(ctx context.Context, j Job) (Outcome, error) {
	if n := j.slots(); n > p.cfg.Slots {
		return Outcome{}, &RunError{Class: ErrFailed, Reason: fmt.Sprintf("job needs %d slots, the pool has %d", n, p.cfg.Slots)}
	}
	if ctx.Err() != nil {
		return DoneOutcome(ctx, j, records.Cost{}, "")
	}
	if p.cfg.Store != nil {
		// Refuse, before paying for it, a run whose record the store
		// would reject.
		if err := records.Storable(Outcome{Seeds: []uint64{j.Seed}}.Record(j)); err != nil {
			return Outcome{}, &RunError{Class: ErrFailed, Reason: "job cannot be recorded", Err: err}
		}
		if o, err, ok := p.lookup(ctx, j); ok {
			return o, err
		}
	}
	k := callKey{j.Task.ID, j.Proposal.Key(), j.Seed}
	p.mu.Lock()
	c := p.inflight[k]
	if c == nil {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &call{cancel: cancel, done: make(chan struct{})}
		p.inflight[k] = c
		go p.run(runCtx, k, c, j)
	} else {
		p.ledger.Add(func(t *LedgerTotals) { t.Coalesced++ })
	}
	c.refs++
	p.mu.Unlock()

	select {
	case <-c.done:
		o := copyOutcome(c.out)
		p.mu.Lock()
		// Exactly one requester reports the run as fresh: the first to
		// collect it. The others were served by a coalesced twin.
		o.Reused = o.Reused || c.claimed
		c.claimed = true
		p.mu.Unlock()
		return o, c.err
	case <-ctx.Done():
		p.mu.Lock()
		c.refs--
		last := c.refs == 0
		if last && p.inflight[k] == c {
			delete(p.inflight, k)
		}
		p.mu.Unlock()
		if last {
			c.cancel()
			<-c.done
		}
		return DoneOutcome(ctx, j, records.Cost{}, "")
	}
}

func copyOutcome(o Outcome) Outcome {
	o.Seeds = append([]uint64(nil), o.Seeds...)
	return o
}

// lookup returns the stored outcome of j when the store has a real record
// of it.
func (p *Pool) lookup(ctx context.Context, j Job) (Outcome, error, bool) {
	rs, err := p.cfg.Store.Scan(ctx, records.Filter{TaskID: j.Task.ID, Key: j.Proposal.Key(), Source: records.Real})
	if err != nil {
		if ctx.Err() != nil {
			return Outcome{}, DoneError(ctx, ""), true
		}
		return Outcome{}, &RunError{Class: ErrTransient, Reason: "scan records store", Err: err}, true
	}
	for _, r := range rs {
		if !Reuses(r, j.Seed) {
			continue
		}
		p.ledger.Add(func(t *LedgerTotals) { t.Reused++ })
		o := Outcome{Loss: r.Loss, Gain: r.Gain, Seeds: append([]uint64(nil), r.Seeds...), Cost: r.Cost,
			Infeasible: r.Infeasible, Log: "builder: outcome reused from the records store", Reused: true, Code: r.Code,
			LogFile: r.LogFile}
		if r.Log != "" {
			o.Log = r.Log
		}
		if r.Infeasible != "" {
			return o, &RunError{Class: ErrInfeasible, Reason: r.Infeasible, Log: o.Log}, true
		}
		return o, nil, true
	}
	return Outcome{}, nil, false
}

// Reuses reports whether a pool with a store serves stored record r,
// found under a job's task and proposal, as the outcome of that job of
// seed instead of running it: r is a real record that carries the seed
// and is plausible (an implausible stored record is not reused).
func Reuses(r records.Record, seed uint64) bool {
	return r.Source == records.Real && r.HasSeed(seed) && records.Plausible(r) == nil
}

// run executes c's job and publishes the result. It appends a finished run
// to the store before removing the call from the in-flight map, so that a
// later identical request finds either the call or the record.
func (p *Pool) run(ctx context.Context, k callKey, c *call, j Job) {
	// Look again now that c is in flight: an identical run that finished
	// between the requester's lookup and c's registration had appended its
	// record before it left the in-flight map, so the record is visible
	// here, and running j again would pay for it twice.
	if p.cfg.Store != nil {
		if out, err, ok := p.lookup(ctx, j); ok {
			p.publish(k, c, out, err)
			return
		}
	}
	out, err := p.attempts(ctx, j)
	if err == nil {
		// Whatever the executor, an implausible outcome is never evidence.
		if perr := records.Plausible(out.Record(j)); perr != nil {
			out, err = Outcome{Cost: out.Cost, Log: out.Log, LogFile: out.LogFile}, implausible(perr, out.Log)
		}
	}
	if err == nil || (errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrCancelled)) {
		if !slices.Contains(out.Seeds, j.Seed) {
			// The record must carry the job's seed, or lookup would
			// never find it and every later request would pay again.
			out.Seeds = append([]uint64{j.Seed}, out.Seeds...)
		}
		if err != nil {
			out.Loss, out.Gain = 0, 0
			if out.Infeasible == "" {
				out.Infeasible = infeasibleReason(err)
			}
		}
		if p.cfg.Store != nil {
			rec := out.Record(j)
			rec.Time = p.cfg.Now()
			if aerr := p.cfg.Store.Append(context.WithoutCancel(ctx), rec); aerr != nil {
				err = fmt.Errorf("builder: pool: run %s/%s seed %d finished but was not recorded: %w",
					j.Task.ID, j.Proposal.Key(), j.Seed, errors.Join(aerr, err))
			}
		}
	}
	p.publish(k, c, out, err)
}

// publish hands c's result to its requesters and removes c from the
// in-flight map.
func (p *Pool) publish(k callKey, c *call, out Outcome, err error) {
	p.mu.Lock()
	if p.inflight[k] == c {
		delete(p.inflight, k)
	}
	c.out, c.err = out, err
	p.mu.Unlock()
	c.cancel()
	close(c.done)
}

func infeasibleReason(err error) string {
	var re *RunError
	if errors.As(err, &re) && re.Reason != "" {
		return re.Reason
	}
	return "infeasible"
}

// attempts runs j until it finishes, fails for good, or runs out of
// attempts; it accounts every attempt in the ledger.
func (p *Pool) attempts(ctx context.Context, j Job) (Outcome, error) {
	slots := j.slots()
	backoff := p.cfg.Backoff
	for attempt := 1; ; attempt++ {
		if err := p.sem.Acquire(ctx, slots); err != nil {
			return DoneOutcome(ctx, j, records.Cost{}, "")
		}
		jctx, cancel := ctx, context.CancelFunc(func() {})
		if p.cfg.Timeout > 0 {
			jctx, cancel = WithTimeout(ctx, p.cfg.Timeout)
		}
		start := p.cfg.Now()
		out, err := p.exec.Execute(jctx, j)
		wall := p.cfg.Now().Sub(start).Seconds()
		timedOut := ctx.Err() == nil && errors.Is(context.Cause(jctx), ErrTimedOut)
		cancel()
		p.sem.Release(slots)

		if err != nil && timedOut && errors.Is(err, ErrCancelled) {
			// The inner executor did not tell our timeout from a cancel.
			out = Outcome{Infeasible: "timed out", Cost: out.Cost, Log: out.Log, LogFile: out.LogFile, Seeds: []uint64{j.Seed}, Code: out.Code}
			err = &RunError{Class: ErrInfeasible, Reason: "timed out", Log: out.Log,
				Err: fmt.Errorf("%w: %w", ErrTimedOut, context.DeadlineExceeded)}
		}
		if out.Cost.WallSeconds == 0 {
			out.Cost.WallSeconds = wall
		}
		if out.Cost.DeviceSeconds == 0 {
			out.Cost.DeviceSeconds = wall * float64(slots)
		}
		if out.Cost.Money == 0 && p.cfg.PricePerDeviceHour > 0 {
			out.Cost.Money = out.Cost.DeviceSeconds / 3600 * p.cfg.PricePerDeviceHour
		}
		finished := err == nil || (errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrCancelled))
		retry := !finished && errors.Is(err, ErrTransient) && attempt < p.cfg.MaxAttempts && ctx.Err() == nil
		p.ledger.Add(func(t *LedgerTotals) {
			t.Cost = t.Cost.Add(out.Cost)
			t.SlotSeconds += wall * float64(slots)
			switch {
			case finished:
				t.Runs++
				if err != nil {
					t.Infeasible++
				}
			default:
				t.Failed++
				if retry {
					t.Retries++
				}
			}
		})
		if !retry {
			return out, err
		}
		if serr := p.cfg.Sleep(ctx, backoff); serr != nil {
			return DoneOutcome(ctx, j, records.Cost{}, "")
		}
		backoff = min(2*backoff, p.cfg.MaxBackoff)
	}
}
