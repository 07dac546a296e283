// Package progress shows how far long work has come (reference runs, M_0,
// evaluation, training, comparisons): runs done / total and the estimated
// time left, as a bar on a terminal (github.com/schollz/progressbar/v3) and
// as plain periodic log/slog lines when the output is a file or a pipe.
//
// A Reporter is fed by its owner (Done, Reused, Grow) or by Executor, a
// builder.Executor wrapper that reports every finished run; runs a
// builder.Pool serves from its store (Outcome.Reused) leave the total, so
// the ETA counts only runs that are paid for. Nothing here starts a
// goroutine: the display moves when a unit finishes. A Reporter is safe for
// concurrent use.
package progress
