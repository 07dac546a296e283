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
// Each run gets a fresh private directory with copies of the inputs and
// solution.py, and runs Config.Python (default /usr/bin/python3) in
// isolated mode (-I) through a small runner. Enforced: a wall-clock limit
// (Config.Timeout, then SIGTERM and SIGKILL to the process group), an
// address-space limit (RLIMIT_AS, Config.Memory), a file-size limit
// (RLIMIT_FSIZE), a CPU-time backstop (RLIMIT_CPU), no core dumps, a
// minimal environment (PATH, HOME, TMPDIR, LANG, PYTHONHASHSEED and one
// BLAS thread; no proxies, no keys), a private network namespace with no
// usable interface (Config.Isolate; as root directly, otherwise through a
// user namespace; when the kernel refuses, the run goes ahead without it
// and Grade.Isolated says so, unless Config.RequireIsolation), and, when
// the grader runs as root, an unprivileged user (Config.DropTo, nobody).
// Not enforced: a file-system sandbox (a run can read what its user can
// read, but the hidden answers are never copied into its directory) and a
// process-count limit.
//
// # Concurrency and I/O
//
// Grader is safe for concurrent use and does process and file I/O; Score,
// ReadTable and Task.Percentile are pure.
package grader
