// Package proposertest checks that a proposer.Proposer (and optionally a
// proposer.Trainable) meets the contract of package proposer, in the manner
// of testing/fstest: call Run from a test of the implementation. It also
// holds Scripted, a deterministic fake Proposer and Trainable that other
// packages use in their tests.
//
// The suite exercises the sampling side of METHOD.md §1 Policy optimisation
// (G proposals per state, per-token log-probs under the sampling policy) and
// the invalid-proposal rule of METHOD.md §1 Reward 2 (an unparseable output
// is a Sample marked Invalid with a reason, never an error). It does no I/O
// of its own; whatever I/O the proposer under test does is its own. Run
// starts goroutines only in its concurrency check and waits for all of them.
// Scripted is safe for concurrent use.
package proposertest
