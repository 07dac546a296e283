package buildertest

import (
	"context"
	"errors"
	"fmt"
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

// Options tune Run to an executor's speed.
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
// executor under test never join it with another test's job.
func Job(spec Spec) builder.Job {
	n := suiteSeq.Add(1)
	return builder.Job{
		Task: Task("conformance"),
		Proposal: records.Proposal{Mechanism: "lr-scale",
			Params: map[string]string{"factor": "1.5", "run": fmt.Sprintf("%d-%d", os.Getpid(), n)},
			Text:   "scale the learning rate by 1.5"},
		Seed: rand.Uint64N(1 << 53), // exact in any JSON reader
		Spec: spec.JSON(),
	}
}

// Run is the conformance suite of builder.Executor (METHOD.md §1 Builder):
// results, every failure class (crash, hang past a timeout, garbage
// output, NaN, the infeasible and transient exit codes, cancellation),
// concurrency, and proposal text carrying shell metacharacters that must
// reach the run only as data. newExecutor is called once per subtest.
// The executor must run test jobs as Spec asks: Scripted does in process,
// examples/trainscript does behind the subprocess protocol.
func Run(t *testing.T, newExecutor func(t *testing.T) builder.Executor, opts Options) {
	o := opts.withDefaults()
	sub := func(name string, f func(t *testing.T, x builder.Executor)) {
		t.Run(name, func(t *testing.T) {
			if o.Parallel {
				t.Parallel()
			}
			f(t, newExecutor(t))
		})
	}

	sub("Result", func(t *testing.T, x builder.Executor) {
		j := Job(Spec{SleepMS: o.SleepMS})
		out, err := x.Execute(context.Background(), j)
		require.NoError(t, err)
		checkOK(t, j, out)
	})
	sub("NoChange", func(t *testing.T, x builder.Executor) {
		j := Job(Spec{SleepMS: o.SleepMS})
		j.Proposal = records.Proposal{Mechanism: records.NoChange, Params: map[string]string{"run": j.Proposal.Params["run"]}}
		out, err := x.Execute(context.Background(), j)
		require.NoError(t, err)
		checkOK(t, j, out)
	})
	sub("Infeasible", func(t *testing.T, x builder.Executor) {
		reason := "diverged: loss is NaN at step 7"
		j := Job(Spec{Behaviour: Infeasible, Reason: reason})
		out, err := x.Execute(context.Background(), j)
		require.ErrorIs(t, err, builder.ErrInfeasible)
		require.Equal(t, builder.ErrInfeasible, builder.Class(err))
		require.Equal(t, reason, out.Infeasible)
	})
	for _, c := range []struct {
		behaviour string
		class     error
		also      error
	}{
		{Crash, builder.ErrFailed, nil},
		{Garbage, builder.ErrFailed, builder.ErrBadResult},
		{NaN, builder.ErrFailed, builder.ErrBadResult},
		{Transient, builder.ErrTransient, nil},
	} {
		sub("Class/"+c.behaviour, func(t *testing.T, x builder.Executor) {
			j := Job(Spec{Behaviour: c.behaviour})
			_, err := x.Execute(context.Background(), j)
			require.Error(t, err)
			require.Equal(t, c.class, builder.Class(err), "error: %v", err)
			if c.also != nil {
				require.ErrorIs(t, err, c.also)
			}
			var re *builder.RunError
			require.ErrorAs(t, err, &re, "failures are *builder.RunError")
		})
	}
	sub("HangPastTimeout", func(t *testing.T, x builder.Executor) {
		ctx, cancel := builder.WithTimeout(context.Background(), o.Timeout)
		defer cancel()
		out, err := x.Execute(ctx, Job(Spec{Behaviour: Hang}))
		require.ErrorIs(t, err, builder.ErrInfeasible)
		require.ErrorIs(t, err, builder.ErrTimedOut)
		require.NotErrorIs(t, err, builder.ErrCancelled)
		require.NotEmpty(t, out.Infeasible)
	})
	sub("Cancel", func(t *testing.T, x builder.Executor) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(o.CancelAfter, cancel)
		_, err := x.Execute(ctx, Job(Spec{Behaviour: Hang}))
		require.ErrorIs(t, err, builder.ErrCancelled)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, builder.ErrInfeasible)
	})
	sub("CancelledBefore", func(t *testing.T, x builder.Executor) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := x.Execute(ctx, Job(Spec{}))
		require.ErrorIs(t, err, builder.ErrCancelled)
		require.ErrorIs(t, err, context.Canceled)
	})
	sub("Concurrent", func(t *testing.T, x builder.Executor) {
		jobs := make([]builder.Job, 2*o.Concurrency)
		for i := range jobs {
			jobs[i] = Job(Spec{SleepMS: o.SleepMS})
		}
		// One infeasible job among them must not disturb the others.
		jobs[1] = Job(Spec{Behaviour: Infeasible, Reason: "too wide"})
		outs := make([]builder.Outcome, len(jobs))
		errs := make([]error, len(jobs))
		var wg sync.WaitGroup
		sem := make(chan struct{}, o.Concurrency)
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
			if i == 1 {
				require.ErrorIs(t, errs[i], builder.ErrInfeasible)
				require.Equal(t, "too wide", outs[i].Infeasible)
				continue
			}
			require.NoError(t, errs[i], "job %d", i)
			checkOK(t, j, outs[i])
		}
	})
	sub("ProposalTextIsData", func(t *testing.T, x builder.Executor) {
		marker := fmt.Sprintf("/tmp/lm2lm-pwned-%d-%d", os.Getpid(), rand.Uint32())
		text := "x'; touch " + marker + "; echo \"$(touch /tmp/pwned)\" `touch " + marker + "` " +
			"$(touch " + marker + ") && rm -rf ~ || true; ${IFS}|> /dev/null \\n\n\t%s %d 'quoted' \"dq\" <!-- -->"
		before := statMarker("/tmp/pwned")
		j := Job(Spec{SleepMS: o.SleepMS})
		j.Proposal.Text = text
		j.Proposal.Params["note"] = "$(touch " + marker + ")"
		out, err := x.Execute(context.Background(), j)
		require.NoError(t, err)
		checkOK(t, j, out)
		require.Contains(t, out.Log, TextLine(text), "the run must see the exact proposal text")
		_, serr := os.Stat(marker)
		require.True(t, errors.Is(serr, os.ErrNotExist), "%s was created: proposal text was executed", marker)
		require.Equal(t, before, statMarker("/tmp/pwned"), "/tmp/pwned was created or touched")
	})
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
