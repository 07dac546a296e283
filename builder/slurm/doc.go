// Package slurm runs builder jobs on a Slurm cluster under the builder's
// subprocess protocol (METHOD.md §1 Vocabulary, Builder; see package
// builder for the protocol).
//
// For each job the executor makes a private directory under
// Config.WorkDir (which must be on a file system the compute nodes share),
// writes job.json there and a generated batch script job.sh beside it. The
// script only changes into the directory and execs the configured command
// with a minimal environment (env -i with PATH, HOME and configured
// names, plus the device variables Slurm set on the node for the job's
// GRES, Config.NodeEnv, so that a run uses the GPUs it was given) and the
// two file paths; every word in it comes from configuration
// and is shell-quoted, and nothing comes from the proposal, which the
// training script reads from job.json as data. The job is submitted with
// `sbatch --parsable --no-requeue` (the pool, not Slurm, owns retries),
// sbatch itself running with a minimal environment (SubmitEnv), and its state is polled with `scontrol show job -o`
// (falling back to `squeue`) every Config.PollInterval; `sbatch --wait` is
// not used, since it polls at growing intervals and can exit 0 for a job
// whose state is TIMEOUT. When ctx is done the job is scancelled.
//
// Job states map to failure classes:
//
//	COMPLETED                  the result file is read under the protocol
//	FAILED                     the exit code under the protocol: 3 infeasible,
//	                           75 transient, others (and signals) ErrFailed
//	TIMEOUT                    ErrInfeasible + ErrTimedOut: the time limit is the
//	                           task's budget, as for every executor's timeout; a
//	                           recipe change that cannot finish in it is the
//	                           proposal's fault, and retrying would pay again
//	OUT_OF_MEMORY              ErrInfeasible: memory is fixed per task by
//	                           configuration, so a run that exceeds it does so
//	                           because of the change it applies (a wider model, a
//	                           bigger batch); it would fail again on retry
//	NODE_FAIL, BOOT_FAIL,      ErrTransient: the infrastructure failed
//	PREEMPTED, REVOKED
//	CANCELLED                  by us (ctx done): ErrCancelled, or a timeout when
//	                           ctx's cause is builder.ErrTimedOut; by someone
//	                           else: ErrFailed (not resubmitted behind an
//	                           operator's back)
//	DEADLINE, SPECIAL_EXIT     ErrFailed
//	PENDING with a reason that can never clear (BadConstraints, InvalidAccount,
//	InvalidQOS, PartitionConfig, DependencyNeverSatisfied): scancelled, ErrFailed
//	other states               not finished: polled again
//
// A job that Slurm forgets before it is seen to end is read from its result
// file when that parses, and is otherwise transient. A failed sbatch is
// ErrFailed when the cluster rejects the request and transient otherwise.
//
// Executor does I/O (files, Slurm commands) and is safe for concurrent
// use; the parsers are pure.
package slurm
