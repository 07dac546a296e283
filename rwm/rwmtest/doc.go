// Package rwmtest is the conformance suite for world models (METHOD.md §1
// Research World Model), in the manner of testing/fstest: Run checks any
// rwm.WorldModel for validity of its predictions, handling of invalid
// queries, cancellation, determinism, context sensitivity and concurrent
// use. Fixed is a fixed world model for tests of code that consumes one;
// Task, Proposals and Evidence build the suite's generic test vocabulary.
//
// The package does no I/O. Run starts goroutines for its concurrency check
// and waits for them; Fixed is safe for concurrent use.
package rwmtest
