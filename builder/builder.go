package builder

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/lm2lm/lm2lm/records"
)

// Failure classes. Callers test them with errors.Is.
var (
	// ErrInfeasible: the proposal's fault (cannot be built, diverged, out of
	// range). The caller records reward −c (METHOD.md §1 Reward 2) and must
	// not retry.
	ErrInfeasible = errors.New("builder: infeasible")
	// ErrTransient: infrastructure failed (node lost, preempted, crashed
	// runner); retrying may succeed.
	ErrTransient = errors.New("builder: transient failure")
	// ErrCancelled: the run was cancelled by the caller (context done).
	ErrCancelled = errors.New("builder: cancelled")
)

// Job is a built, runnable experiment.
type Job struct {
	Task     records.Task
	Proposal records.Proposal
	Seed     uint64
	// Spec is the builder's description of the run (for the lab: the
	// training configuration), opaque to executors that only forward it.
	Spec json.RawMessage
	// Slots is how many device slots the job needs (e.g. GPUs); 0 means 1.
	Slots int64
}

// Outcome is what a finished run measured.
type Outcome struct {
	Loss  float64 // measured validation loss ℓ
	Gain  float64 // b_e − ℓ, against the reference with shared seeds when the executor can
	Seeds []uint64
	Cost  records.Cost
	// Log is the tail of the run's log, for humans.
	Log string
	// LogFile is where the run's whole log was kept (an executor's
	// LogDir); "" when it was not.
	LogFile string
	// Infeasible is the reason when the run was infeasible (then Execute also
	// returns an error wrapping ErrInfeasible).
	Infeasible string
	// Reused is set when no run was paid for this outcome: a Pool served it
	// from its records store (an identical (task, proposal key, seed) had
	// run before), or the requester joined an identical run that another
	// requester had started (a coalesced twin). Cost is then the original
	// run's cost, which callers counting what they spent must not add again.
	// Executors that always run leave it false.
	Reused bool
	// Code names the code that produced the outcome when the change was
	// implemented as code (builder/overlay's executor sets it); nil
	// otherwise. Record copies it, so that a real result can be traced to
	// the code that produced it.
	Code *records.Code
}

// Record returns the real record of j's outcome. An infeasible one keeps
// the tail of its log (records.LogTail), so that the reason can be read
// from the store; every one keeps where its whole log is.
func (o Outcome) Record(j Job) records.Record {
	r := records.Record{
		Task: j.Task, Proposal: j.Proposal, Gain: o.Gain, Loss: o.Loss,
		Source: records.Real, Seeds: o.Seeds, Cost: o.Cost, Infeasible: o.Infeasible, Code: o.Code, LogFile: o.LogFile,
	}
	if o.Infeasible != "" {
		r.Log = records.LogTail(o.Log)
	}
	return r
}

// LogPath returns where an executor with log directory dir keeps the whole
// log of j: dir/<task>/<mechanism>-<digest of the proposal key>-seed<seed>.log,
// the task ID and mechanism with every byte outside [A-Za-z0-9._-]
// replaced by '_' (a proposal is outside input: it never names a path of
// its own).
func LogPath(dir string, j Job) string {
	sum := sha256.Sum256([]byte(j.Proposal.Key()))
	mech := j.Proposal.Mechanism
	if len(mech) > 40 {
		mech = mech[:40]
	}
	name := fmt.Sprintf("%s-%x-seed%d.log", FileName(mech), sum[:6], j.Seed)
	return filepath.Join(dir, FileName(j.Task.ID), name)
}

// FileName maps s to a file name: every byte outside [A-Za-z0-9._-]
// becomes '_', and a leading '.' too; "" becomes "_".
func FileName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// Builder turns a proposal for a task into a job. A proposal that cannot be
// built returns an error wrapping ErrInfeasible with the reason. Build is
// safe for concurrent use.
type Builder interface {
	Build(ctx context.Context, t records.Task, p records.Proposal) (Job, error)
}

// Executor runs one built job to completion.
//
// A run that diverges or otherwise fails through the proposal's fault
// returns its Outcome (Infeasible set, cost and log filled) together with an
// error wrapping ErrInfeasible. Infrastructure failures wrap ErrTransient; a
// run stopped because ctx was done wraps ErrCancelled and ctx.Err(), unless
// ctx's cause is ErrTimedOut (see WithTimeout), which is a timeout. Failures
// whose cause is unknown wrap ErrFailed. Execute may be called concurrently.
type Executor interface {
	Execute(ctx context.Context, j Job) (Outcome, error)
}
