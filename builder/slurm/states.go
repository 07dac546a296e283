package slurm

import (
	"fmt"

	"github.com/lm2lm/lm2lm/builder"
)

// Action is what the executor does after a poll.
type Action int

const (
	Wait       Action = iota // the job is not finished: poll again
	ReadResult               // COMPLETED: read the result file under the protocol
	ReadExit                 // FAILED: classify the exit code under the protocol
	Fail                     // finished without a result: return the error
)

// fatalPending are the pending reasons under which a job can never start
// without someone changing it; the executor cancels such a job.
var fatalPending = map[string]bool{
	"BadConstraints": true, "InvalidAccount": true, "InvalidQOS": true,
	"DependencyNeverSatisfied": true, "PartitionConfig": true,
}

// Classify maps a polled job to an action and, for Fail, the error
// (see doc.go for the table and the reasons behind it). States it does
// not know are treated as not finished: a future Slurm may add transitional
// states, and a run stuck in one is bounded by the caller's timeout.
func Classify(info JobInfo) (Action, *builder.RunError) {
	reason := func(what string) string {
		if info.Reason != "" && info.Reason != "None" {
			return fmt.Sprintf("Slurm job %s %s (%s)", info.ID, what, info.Reason)
		}
		return fmt.Sprintf("Slurm job %s %s", info.ID, what)
	}
	switch info.State {
	case "COMPLETED":
		return ReadResult, nil
	case "FAILED":
		return ReadExit, nil
	case "PENDING":
		if fatalPending[info.Reason] {
			return Fail, &builder.RunError{Class: builder.ErrFailed, Reason: reason("can never start")}
		}
		return Wait, nil
	case "TIMEOUT":
		return Fail, &builder.RunError{Class: builder.ErrInfeasible, Reason: "timed out",
			Err: fmt.Errorf("%s: %w", reason("reached its time limit"), builder.ErrTimedOut)}
	case "OUT_OF_MEMORY":
		return Fail, &builder.RunError{Class: builder.ErrInfeasible, Reason: "out of memory",
			Err: fmt.Errorf("%s", reason("ran out of memory"))}
	case "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "REVOKED":
		return Fail, &builder.RunError{Class: builder.ErrTransient, Reason: reason("ended " + info.State)}
	case "CANCELLED":
		return Fail, &builder.RunError{Class: builder.ErrFailed, Reason: reason("was cancelled by someone else")}
	case "DEADLINE", "SPECIAL_EXIT":
		return Fail, &builder.RunError{Class: builder.ErrFailed, Reason: reason("ended " + info.State)}
	default: // RUNNING, CONFIGURING, COMPLETING, SUSPENDED, REQUEUED, REQUEUE_HOLD, RESIZING, SIGNALING, STAGE_OUT, STOPPED, ...
		return Wait, nil
	}
}
