package buildertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// Options tune Run to an executor's speed and abilities.
type Options struct {
	// Timeout is the time limit (builder.WithTimeout) given to a hanging
	// run. Default 2 s.
	Timeout time.Duration
	// CancelAfter is when a hanging run's context is cancelled. Default
	// 500 ms.
	CancelAfter time.Duration
	// Concurrency is how many jobs run at once in the concurrency test.
	// Default 4.
	Concurrency int
	// SleepMS is the training time of OK runs. Default 20.
	SleepMS int
	// Parallel runs the subtests in parallel (for slow executors).
	Parallel bool
	// Seed seeds the suite's random choices (marker file names); default 1.
	Seed uint64

	// Builder, when set, makes the suite's jobs by building Proposals for
	// Task instead of Job(Spec): for an executor of real jobs (the lab's),
	// which cannot be told to crash, hang, write garbage or echo the
	// proposal text. The subtests that need such scripted behaviour
	// (Infeasible, Class/*, HangPastTimeout, Cancel while running, the
	// text echo) are then skipped, and a result is checked against the
	// record contract (a valid real record with the job's seed and a
	// non-negative cost) rather than Quadratic.
	Builder   builder.Builder
	Task      records.Task
	Proposals []records.Proposal // at least one feasible proposal when Builder is set
	// Deterministic makes Run also check that executing one job twice gives
	// the same loss and gain bit for bit.
	Deterministic bool
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.CancelAfter <= 0 {
		o.CancelAfter = 500 * time.Millisecond
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.SleepMS <= 0 {
		o.SleepMS = 20
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// Task returns a valid task for test jobs.
func Task(id string) records.Task {
	return records.Task{ID: id, Family: "test", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 1.5, SeedNoise: 0.01, Budget: 100, Description: "a conformance-suite task"}
}

var suiteSeq atomic.Uint64

// Job returns a test job with behaviour spec, a fresh seed and a proposal
// that is unique to this process, so that stores and coalescing in the
// executor under test never join it with another test's job. The seed is
// the splitmix64 hash of the job's sequence number, below 2⁵³ (exact in any
// JSON reader): deterministic for a given order of calls.
func Job(spec Spec) builder.Job {
	n := suiteSeq.Add(1)
	return builder.Job{
		Task: Task("conformance"),
		Proposal: records.Proposal{Mechanism: "lr-scale",
			Params: map[string]string{"factor": "1.5", "run": fmt.Sprintf("%d-%d", os.Getpid(), n)},
			Text:   "scale the learning rate by 1.5"},
		Seed: splitmix(n) >> 11,
		Spec: spec.JSON(),
	}
}

// Run is the conformance suite of builder.Executor (METHOD.md §1 Builder):
// results, every failure class (crash, hang past a timeout, garbage
// output, NaN, the infeasible and transient exit codes, cancellation),
// concurrency, and proposal text carrying shell metacharacters that must
// reach the run only as data. newExecutor is called once per subtest.
// Without opts.Builder the executor must run test jobs as Spec asks:
// Scripted does in process, examples/trainscript does behind the
// subprocess protocol. With opts.Builder any executor of that builder's
// jobs can run it (see Options.Builder for what is then skipped).
func Run(t *testing.T, newExecutor func(t *testing.T) builder.Executor, opts Options) {
	o := opts.withDefaults()
	if o.Builder != nil && len(o.Proposals) == 0 {
		t.Fatal("buildertest: Options.Builder needs at least one of Options.Proposals")
	}
	s := &suite{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x6275696c64))}
	sub := func(name string, scriptedOnly bool, f func(t *testing.T, x builder.Executor)) {
		t.Run(name, func(t *testing.T) {
			if scriptedOnly && o.Builder != nil {
				t.Skip("needs an executor that runs Spec's scripted behaviours")
			}
			if o.Parallel {
				t.Parallel()
			}
			f(t, newExecutor(t))
		})
	}
	sub("Result", false, s.result)
	sub("NoChange", false, s.noChange)
	sub("Deterministic", false, s.deterministic)
	sub("Infeasible", true, s.infeasible)
	for _, c := range failureClasses {
		sub("Class/"+c.behaviour, true, func(t *testing.T, x builder.Executor) { s.class(t, x, c) })
	}
	sub("HangPastTimeout", true, s.hangPastTimeout)
	sub("Cancel", true, s.cancel)
	sub("CancelledBefore", false, s.cancelledBefore)
	sub("Concurrent", false, s.concurrent)
	sub("ProposalTextIsData", false, s.textIsData)
}

// suite holds one Run's options and random source (used only before the
// subtests start, or under mu).
type suite struct {
	o   Options
	mu  sync.Mutex
	rng *rand.Rand
}

// job returns the i-th job of a subtest: Job(spec) for a scripted executor,
// else Options.Proposals[i mod n] built for Options.Task.
func (s *suite) job(t *testing.T, i int, spec Spec) builder.Job {
	t.Helper()
	if s.o.Builder == nil {
		return Job(spec)
	}
	j, err := s.o.Builder.Build(context.Background(), s.o.Task, s.o.Proposals[i%len(s.o.Proposals)])
	require.NoError(t, err, "building proposal %d", i%len(s.o.Proposals))
	return j
}

// check checks a successful outcome of j.
func (s *suite) check(t *testing.T, j builder.Job, out builder.Outcome) {
	t.Helper()
	if s.o.Builder == nil {
		checkOK(t, j, out)
		return
	}
	require.NoError(t, out.Record(j).Validate(), "the outcome is a valid real record")
	require.Contains(t, out.Seeds, j.Seed)
	require.Empty(t, out.Infeasible)
	require.GreaterOrEqual(t, out.Cost.WallSeconds, 0.0)
	require.GreaterOrEqual(t, out.Cost.DeviceSeconds, 0.0)
}

func (s *suite) result(t *testing.T, x builder.Executor) {
	j := s.job(t, 0, Spec{SleepMS: s.o.SleepMS})
	out, err := x.Execute(context.Background(), j)
	require.NoError(t, err)
	s.check(t, j, out)
}

func (s *suite) noChange(t *testing.T, x builder.Executor) {
	var j builder.Job
	if s.o.Builder == nil {
		j = Job(Spec{SleepMS: s.o.SleepMS})
		j.Proposal = records.Proposal{Mechanism: records.NoChange, Params: map[string]string{"run": j.Proposal.Params["run"]}}
	} else {
		var err error
		j, err = s.o.Builder.Build(context.Background(), s.o.Task, records.Proposal{Mechanism: records.NoChange})
		require.NoError(t, err, "building the no-change proposal")
	}
	out, err := x.Execute(context.Background(), j)
	require.NoError(t, err)
	s.check(t, j, out)
}

func (s *suite) deterministic(t *testing.T, x builder.Executor) {
	if !s.o.Deterministic {
		t.Skip("Options.Deterministic is not set")
	}
	j := s.job(t, 0, Spec{SleepMS: s.o.SleepMS})
	a, err := x.Execute(context.Background(), j)
	require.NoError(t, err)
	b, err := x.Execute(context.Background(), j)
	require.NoError(t, err)
	require.Equal(t, math.Float64bits(a.Loss), math.Float64bits(b.Loss), "loss of one job twice")
	require.Equal(t, math.Float64bits(a.Gain), math.Float64bits(b.Gain), "gain of one job twice")
}

func (s *suite) infeasible(t *testing.T, x builder.Executor) {
	reason := "diverged: loss is NaN at step 7"
	out, err := x.Execute(context.Background(), Job(Spec{Behaviour: Infeasible, Reason: reason}))
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.Equal(t, builder.ErrInfeasible, builder.Class(err))
	require.Equal(t, reason, out.Infeasible)
}

type failureClass struct {
	behaviour string
	class     error
	also      error
}

var failureClasses = []failureClass{
	{Crash, builder.ErrFailed, nil},
	{Garbage, builder.ErrFailed, builder.ErrBadResult},
	{NaN, builder.ErrFailed, builder.ErrBadResult},
	{Transient, builder.ErrTransient, nil},
}

func (s *suite) class(t *testing.T, x builder.Executor, c failureClass) {
	_, err := x.Execute(context.Background(), Job(Spec{Behaviour: c.behaviour}))
	require.Error(t, err)
	require.Equal(t, c.class, builder.Class(err), "error: %v", err)
	if c.also != nil {
		require.ErrorIs(t, err, c.also)
	}
	var re *builder.RunError
	require.ErrorAs(t, err, &re, "failures are *builder.RunError")
}

func (s *suite) hangPastTimeout(t *testing.T, x builder.Executor) {
	ctx, cancel := builder.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	out, err := x.Execute(ctx, Job(Spec{Behaviour: Hang}))
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, builder.ErrTimedOut)
	require.NotErrorIs(t, err, builder.ErrCancelled)
	require.NotEmpty(t, out.Infeasible)
}

func (s *suite) cancel(t *testing.T, x builder.Executor) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(s.o.CancelAfter, cancel)
	_, err := x.Execute(ctx, Job(Spec{Behaviour: Hang}))
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, builder.ErrInfeasible)
}

func (s *suite) cancelledBefore(t *testing.T, x builder.Executor) {
	j := s.job(t, 0, Spec{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := x.Execute(ctx, j)
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.ErrorIs(t, err, context.Canceled)
}

func (s *suite) concurrent(t *testing.T, x builder.Executor) {
	jobs := make([]builder.Job, 2*s.o.Concurrency)
	for i := range jobs {
		jobs[i] = s.job(t, i, Spec{SleepMS: s.o.SleepMS})
	}
	scripted := s.o.Builder == nil
	if scripted {
		// One infeasible job among them must not disturb the others.
		jobs[1] = Job(Spec{Behaviour: Infeasible, Reason: "too wide"})
	}
	outs := make([]builder.Outcome, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.o.Concurrency)
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			outs[i], errs[i] = x.Execute(context.Background(), jobs[i])
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		if scripted && i == 1 {
			require.ErrorIs(t, errs[i], builder.ErrInfeasible)
			require.Equal(t, "too wide", outs[i].Infeasible)
			continue
		}
		require.NoError(t, errs[i], "job %d", i)
		s.check(t, j, outs[i])
		if k := i - len(s.o.Proposals); s.o.Deterministic && !scripted && k >= 0 {
			require.Equal(t, math.Float64bits(outs[k].Loss), math.Float64bits(outs[i].Loss), "jobs %d and %d are one job", k, i)
		}
	}
}

func (s *suite) textIsData(t *testing.T, x builder.Executor) {
	s.mu.Lock()
	marker := fmt.Sprintf("/tmp/lm2lm-pwned-%d-%d", os.Getpid(), s.rng.Uint32())
	s.mu.Unlock()
	text := "x'; touch " + marker + "; echo \"$(touch /tmp/pwned)\" `touch " + marker + "` " +
		"$(touch " + marker + ") && rm -rf ~ || true; ${IFS}|> /dev/null \\n\n\t%s %d 'quoted' \"dq\" <!-- -->"
	before := statMarker("/tmp/pwned")
	var j builder.Job
	if s.o.Builder == nil {
		j = Job(Spec{SleepMS: s.o.SleepMS})
		j.Proposal.Text = text
		j.Proposal.Params["note"] = "$(touch " + marker + ")"
	} else {
		p := s.o.Proposals[0]
		p.Text = text
		var err error
		j, err = s.o.Builder.Build(context.Background(), s.o.Task, p)
		require.NoError(t, err)
	}
	out, err := x.Execute(context.Background(), j)
	require.NoError(t, err)
	s.check(t, j, out)
	if s.o.Builder == nil {
		require.Contains(t, out.Log, TextLine(text), "the run must see the exact proposal text")
	}
	_, serr := os.Stat(marker)
	require.True(t, errors.Is(serr, os.ErrNotExist), "%s was created: proposal text was executed", marker)
	require.Equal(t, before, statMarker("/tmp/pwned"), "/tmp/pwned was created or touched")
}

func statMarker(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "absent"
	}
	return fi.ModTime().String()
}

func checkOK(t *testing.T, j builder.Job, out builder.Outcome) {
	t.Helper()
	want := Quadratic(j.Task, j.Proposal, j.Seed)
	require.InDelta(t, want, out.Loss, 1e-12, "loss of the quadratic training")
	// METHOD.md §1 Vocabulary: g = b_e − ℓ.
	require.InDelta(t, j.Task.RefLoss-want, out.Gain, 1e-12, "gain = b_e − ℓ")
	require.Contains(t, out.Seeds, j.Seed)
	require.Empty(t, out.Infeasible)
	require.GreaterOrEqual(t, out.Cost.WallSeconds, 0.0)
	require.GreaterOrEqual(t, out.Cost.DeviceSeconds, 0.0)
	require.False(t, strings.Contains(out.Log, "\x00"))
}
