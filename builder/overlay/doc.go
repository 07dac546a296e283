// Package overlay is the paper's builder (METHOD.md §1 Vocabulary,
// Builder): an LLM behind any OpenAI-compatible chat-completions endpoint
// implements a proposal as a bounded code overlay against a task's training
// code, the overlay is validated before anything runs, applied to a private
// copy of the code and smoke-tested with a tiny budget, and the proposal's
// real run is an overlay job that runs the same overlaid code. Proposals
// outside the catalogue (records.FreeForm, text only) can be built this
// way; catalogue proposals can too, but the catalogue's own builders stay
// the default.
//
// # The overlay format: whole files
//
// The model answers with one JSON object, {"files": [{"path", "content"}]}
// (or {"infeasible": reason}), each file whole. Library choice, over a
// unified diff: a model writes a whole file far more reliably than a diff
// whose hunk headers, line counts and context must match the file exactly,
// and applying whole files is exact (no fuzz, no partial application).
// The paper's bound is kept by measuring, not by trusting the answer: the
// changed lines are counted by a minimal line diff against the current
// file (insertions plus deletions; Validate), and the unified diff of that
// comparison is what a record keeps (records.Code.Diff). The cost is
// tokens: the model re-sends each changed file whole, so the allow-list
// should name the files that matter.
//
// # Validation
//
// Validate refuses, before anything is written: a path that is absolute,
// not clean, climbs out with "..", repeats, or is not on the allow-list
// (ErrBadPath); content that is not UTF-8 text, holds a NUL or a carriage
// return without a line feed (Python ends a line there; the lines counted
// and the diff kept must be the lines that run), is larger than
// MaxFileBytes, or would replace a directory (ErrBadContent); more
// than MaxLines changed lines, default 400 (ErrTooLarge); no change at all
// (ErrNoChange). The format has no modes, links or deletions: an overlay
// cannot make a file executable, add a symbolic link, or touch a file off
// the allow-list. The code directory itself must hold only regular files
// and directories (ErrBadCode).
//
// # Failure classes
//
// Build's errors are *BuildError around a *builder.RunError (builder's
// failure classes): a declined, unusable, invalid or smoke-failing overlay
// is builder.ErrInfeasible (the caller records r = −c, METHOD.md §1 Reward
// 2) with its reason and the smoke test's log tail; a server that keeps
// failing transiently (oaichat's retries: 429 with Retry-After, 408, 409,
// 5xx, dropped connections) is builder.ErrTransient; unchanged code that
// fails its own smoke test is builder.ErrFailed (ErrBaseSmoke): the host's
// fault, not the proposal's.
//
// # Caching and provenance
//
// An overlay is keyed by (code digest, proposal key) and kept in a Cache
// directory (atomic writes, each entry checked against its digest and
// validated again on read), so a proposal built again reuses it. A job's
// spec (Spec) carries the code directory and its digest, the overlay, its
// digest and diff; Executor copies the code for each run, refuses a copy
// whose digest is not the job's, applies the overlay and sets
// builder.Outcome.Code, which the record keeps (records.Record.Code). The
// builder's calls, tokens and smoke tests go to builder.LedgerTotals.Build.
//
// # Sandboxing
//
// An overlay is code nobody reviewed. Executor runs it through the
// executor its Runner returns for the run's private copy; what a run may
// do is what that executor guarantees (docs/code-builder.md lists them).
// The default (no Runner) is SandboxRunner: each smoke test and real run
// in grader.Sandbox, with a user of its own, no network, a read-only view
// of the host but for its copy and private /tmp, the task's data bound
// read-only, chosen paths masked (after every other mount, failing
// closed; a hidden path inside the code directory is left out of each
// copy), cgroup limits on memory, processes and CPU, and a time limit.
// NewExecutor probes the host and fails with an error wrapping
// grader.ErrIsolation when it cannot give all of that, unless
// ExecutorConfig.Unsandboxed allows SubprocessRunner, which gives
// builder.Subprocess's process group, subreaper, minimal environment and
// time limit only.
//
// # A loss the overlay cannot forge
//
// An overlaid script computes and writes its own validation loss. With
// SandboxConfig.Eval (an EvalConfig) the loss recorded is not the
// script's: the training run writes a checkpoint (CheckpointEnv) and never
// sees the held-out data (hidden from it), and a fixed evaluator, copied
// afresh from a directory no overlay writes to, measures the checkpoint on
// the held-out data in a sandboxed run of its own (METHOD.md §1
// Vocabulary: ℓ, and g = b_e − ℓ). Without Eval, and with any other
// Runner, the script measures itself.
//
// # Concurrency and I/O
//
// Builder, Executor, SandboxRunner and Cache are safe for concurrent use
// and do network, file and process I/O; ParseAnswer, Validate, CleanPath
// and Prompt are pure. A program that imports the package re-executes its
// own binary as the init of each sandboxed run (see builder/grader).
package overlay
