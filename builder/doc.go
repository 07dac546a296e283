// Package builder turns proposals into runs and executes them (METHOD.md §1
// Vocabulary, Builder): Builder makes a Job from a task and a proposal (or
// reports it infeasible), Executor runs a Job and returns its Outcome. The
// package holds a bounded local pool and a subprocess executor for host
// training scripts; subpackage slurm runs the same protocol on a Slurm
// cluster; subpackage overlay is the paper's LLM builder, which implements
// a proposal as a bounded code overlay with a smoke test; buildertest is a
// conformance suite with a scripted fake.
//
// # Failure classes
//
// Every error of an executor in this module is a *RunError whose Class is
// one of ErrInfeasible (the proposal's fault: record reward −c, METHOD.md
// §1 Reward 2; never retried), ErrTransient (infrastructure: retried by the
// pool), ErrCancelled (the caller's ctx was done) or ErrFailed (a crash,
// garbage output or misconfiguration whose cause is unknown: neither
// retried nor recorded). A run past its time limit (WithTimeout, an
// executor's Timeout, Slurm's TIMEOUT) is ErrInfeasible and ErrTimedOut:
// the limit is the task's compute budget, and a change that cannot finish
// within it has no result under the task's rules; retrying would pay again.
//
// # The subprocess protocol
//
// A host training script is run as `<Command...> <job file> <result file>`
// in a private temporary directory. The command line is fixed by
// configuration and never built from proposal text. The job file is the
// JSON of JobFile: protocol version, task, proposal (including its free
// text, as data), canonical key, seed, budget, slots, spec and the result
// path. The script writes the JSON of Result to the result file:
//
//	{"loss": 1.234, "gain": 0.01, "seeds": [7], "cost": {"device_seconds": 60}}
//
// where only loss is required (gain defaults to b_e − ℓ, seeds to the job's
// seed, cost to the executor's measurement), or {"infeasible": "reason"}.
// The file is parsed strictly (ParseResult: no unknown fields, finite
// numbers; NaN, Inf or a missing loss are ErrBadResult, class ErrFailed).
// It must be a regular file of at most MaxResultBytes, opened without
// blocking (a FIFO or device in its place is ErrBadResult, never a hang).
// A result that cannot be a real measurement (records.Plausible: a loss
// outside its metric's range, a gain that disagrees with b_e − ℓ beyond
// records.GainTolSigmas·σ_e + records.GainTolRel·|b_e|) is ErrFailed too,
// and the Pool applies the same check to every executor's outcome, so an
// implausible number is never stored or used as evidence.
// Exit codes: 0 (ExitOK) success, 3 (ExitInfeasible) infeasible, 75
// (ExitTransient, BSD's EX_TEMPFAIL) transient; any other code or a death
// by signal is ErrFailed. The script sees only PATH, HOME and configured
// variables; it runs in its own process group, which gets SIGTERM and then
// SIGKILL on cancel or timeout, and is killed whole when the script exits.
//
// On Linux the script runs under a reaper (unless SubprocessConfig.NoReaper):
// the executor re-executes its own binary (/proc/self/exe) with the
// variable LM2LM_BUILDER_REAPER set, which this package's init function
// recognises before main runs; that process makes itself a child subreaper
// (prctl(2) PR_SET_CHILD_SUBREAPER), starts the script, and, when the script
// ends or is stopped, kills and reaps every remaining descendant, including
// those that left the process group with setsid or were orphaned by a
// double fork, before it exits as the script did. (The re-executed binary
// runs the package initialisers of the host program, as any re-exec does.)
// Other systems have no subreaper: there a descendant that calls setsid
// survives the process-group kill.
// The tail of its stdout and stderr is kept in Outcome.Log.
// examples/trainscript is a complete script in Go.
//
// # Concurrency and I/O
//
// Pool, Subprocess and Ledger are safe for concurrent use. The pool starts
// one goroutine per distinct run in flight and its requesters wait for it.
// Subprocess and the pool's store do I/O; ParseResult, ExitError and the
// other protocol helpers are pure.
package builder
