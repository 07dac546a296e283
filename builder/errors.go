package builder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/records"
)

// More failure classes and markers, added beside ErrInfeasible, ErrTransient
// and ErrCancelled. Callers test them with errors.Is.
var (
	// ErrFailed: the run failed and nobody can say whose fault it was (a
	// training script that crashed with an unknown exit code or signal,
	// wrote no or malformed results, or an executor that is misconfigured).
	// It is permanent: the pool does not retry it and does not record it,
	// so the caller decides (library choice: retrying a deterministic crash
	// pays for it again; recording it as infeasible would punish a proposal
	// for a host bug).
	ErrFailed = errors.New("builder: run failed")
	// ErrTimedOut marks a run stopped because it exceeded its time limit
	// (an executor's Timeout, a pool's Timeout, a context made by
	// WithTimeout, or Slurm's TIMEOUT state). Such a run is also
	// ErrInfeasible: the time limit is the task's budget, and a proposal
	// that cannot finish within it has not produced a result under the
	// task's rules (library choice, documented in doc.go).
	ErrTimedOut = errors.New("builder: run exceeded its time limit")
	// ErrBadResult marks a result file that is missing, malformed, or
	// holds a non-finite number. Such a run is ErrFailed.
	ErrBadResult = errors.New("builder: bad result")
)

// RunError is the typed error of a run that did not produce a usable
// outcome, or that was infeasible. Class is one of ErrInfeasible,
// ErrTransient, ErrCancelled or ErrFailed; errors.Is matches both Class and
// Err, so a caller can write errors.Is(err, builder.ErrTransient) and
// errors.As(err, &runErr) to read the log tail.
type RunError struct {
	Class  error  // the failure class
	Reason string // a short human-readable reason
	Log    string // tail of the run's log, when there was a run
	Err    error  // underlying cause, may be nil
}

// Error implements error.
func (e *RunError) Error() string {
	var b strings.Builder
	if e.Class != nil {
		b.WriteString(e.Class.Error())
	} else {
		b.WriteString("builder: run error")
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the class and the cause, for errors.Is and errors.As.
func (e *RunError) Unwrap() []error {
	var out []error
	if e.Class != nil {
		out = append(out, e.Class)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// Class returns the failure class of err: ErrInfeasible, ErrTransient,
// ErrCancelled or ErrFailed, or nil when err is nil. An error of no known
// class is reported as ErrFailed.
func Class(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrCancelled):
		return ErrCancelled
	case errors.Is(err, ErrInfeasible):
		return ErrInfeasible
	case errors.Is(err, ErrTransient):
		return ErrTransient
	default:
		return ErrFailed
	}
}

// WithTimeout returns a context that is done after d with ErrTimedOut as its
// cause. Executors report a run stopped by such a context as timed out
// (ErrInfeasible and ErrTimedOut) rather than cancelled; see DoneError.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, ErrTimedOut)
}

// DoneError is the error an executor returns when ctx is done before its
// run finished: a timeout (class ErrInfeasible, wrapping ErrTimedOut and
// context.DeadlineExceeded) when ctx's cause is ErrTimedOut, otherwise a
// cancellation (class ErrCancelled, wrapping ctx.Err()). log is the run's
// log tail. DoneError must only be called once ctx is done.
func DoneError(ctx context.Context, log string) *RunError {
	if errors.Is(context.Cause(ctx), ErrTimedOut) {
		return &RunError{Class: ErrInfeasible, Reason: "timed out", Log: log,
			Err: fmt.Errorf("%w: %w", ErrTimedOut, ctx.Err())}
	}
	return &RunError{Class: ErrCancelled, Log: log, Err: ctx.Err()}
}

// DoneOutcome is DoneError with the Outcome an executor returns beside it:
// for a timeout, an infeasible outcome (reason "timed out", the job's seed);
// for a cancellation, the zero Outcome. cost and log describe the run so
// far.
func DoneOutcome(ctx context.Context, j Job, cost records.Cost, log string) (Outcome, error) {
	err := DoneError(ctx, log)
	if errors.Is(err, ErrTimedOut) {
		return Outcome{Infeasible: "timed out", Seeds: []uint64{j.Seed}, Cost: cost, Log: log}, err
	}
	return Outcome{Cost: cost, Log: log}, err
}
