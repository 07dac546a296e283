// Package grader grades Python solutions of code-solution tasks on WMRL's
// execution ladder (METHOD.md §2): syntax error 0.0, runtime error 0.1, ran
// without a submission 0.2, valid submission 0.5 + 0.5·q with q the
// submission's leaderboard percentile (reward.LadderScore). It is the real
// execution that a verdict world model (rwm/verdict) predicts, and the
// source of WMRL's anchor scores.
//
// A Task is data: a description, input files (train.csv, test.csv), hidden
// answers, a metric (Accuracy or RMSE, computed in Go, never by the
// solution) and a leaderboard of reference scores. Prepare builds five
// embedded tasks from the datasets that scikit-learn ships inside its
// package (iris, wine, breast cancer, diabetes, digits; no download), each
// with a leaderboard of reference solutions of increasing quality.
//
// A Grader is a builder.Builder and builder.Executor: a proposal's Text is
// the solution's code, the outcome's Gain its ladder score (records.Task
// metric records.LadderShortfall, b_e = 1), so the trainer's WMRL mode runs
// anchor groups on it unchanged.
//
// # What a run may do
//
// docs/sandbox.md is the whole statement. In short: each run gets a fresh
// private directory with solution.py and copies of the inputs, whose row
// ids are relabelled for that grade (ids a fresh random permutation, test
// rows shuffled), and runs Config.Python (default /usr/bin/python3) in
// isolated mode (-I) through a small runner, under an init of its own (a
// re-execution of this binary) that is a child subreaper. Enforced, where
// the host allows (Grade.Sandbox says what a run had; Config.RequireIsolation
// turns a shortfall into ErrIsolation): a user id of the run's own from
// Config.UIDFirst..UIDCount (as root); a session of its own, with no
// controlling terminal; private PID, network, mount and IPC namespaces (no
// network, no host Unix socket, no terminal device, the run directory and
// /tmp, /var/tmp, /dev/shm and /run each a private tmpfs bounded by
// Config.Memory and Config.Inodes, every task directory and Task.Hide
// masked, every process of the run killed when it ends); cgroup v2 or v1
// limits on the memory and processes of the whole run (Config.Memory,
// Config.Processes; as root) and, where the host gives the cpu controller,
// an equal CPU weight and at most Config.CPUs CPUs; per process RLIMIT_AS,
// RLIMIT_FSIZE, a CPU-time backstop and no core dumps; no_new_privs; a
// wall-clock limit (Config.Timeout); a minimal environment (PATH, HOME,
// TMPDIR, LANG, PYTHONHASHSEED and one BLAS thread; no proxies, no keys).
// The run directory is removed after every grade, however deep the tree a
// run left; a failure is named in Grade.Detail and logged. Not enforced: a
// system-call filter, CPU shares without the cpu controller, disk use
// without a mount namespace (the run directory is then on
// Config.TempDir's file system, each file bounded by the file-size limit
// only), and a file-system view narrower than "what the run's user may
// read, less the masked directories".
//
// # Any command
//
// Sandbox runs any program (Command: an argv, a run directory the caller
// made, read-only paths, masked paths, kept files, named variables) under
// the same init, namespaces, user pool and cgroups as Grade, which share
// one core; there the whole view is read-only but for the run directory
// and the private directories, RequireIsolation defaults to true (an
// error wrapping ErrIsolation, nothing run, when the host cannot give it),
// and Result says how the program ended and what isolated it.
// builder/overlay's SandboxRunner runs overlaid training scripts through
// it.
//
// # Concurrency and I/O
//
// Grader and Sandbox are safe for concurrent use and do process and file
// I/O; Score, ReadTable and Task.Percentile are pure. A program that imports the
// package re-executes its own binary (/proc/self/exe) as each run's init:
// the package's init function recognises that process by the environment
// variable LM2LM_GRADER_SANDBOX and never returns to main in it, as
// builder.Subprocess's reaper does. The package is Linux-only.
package grader
