// Package dapo holds the policy-optimisation mathematics of METHOD.md §1
// Policy optimisation (DAPO) and the inverse-variance combination of
// METHOD.md §2 (WMRL): group advantages (Advantages), the test of whether
// a group carries signal (Informative), dynamic sampling that fills a batch
// with informative groups (Fill, Select, Filler), the token-level clipped
// surrogate loss with its gradient with respect to the new log-probs
// (Loss, Evaluate, ClipFraction), and inverse-variance weights (Combine).
//
// Everything is pure math on slices: no I/O, no clocks, no goroutines, no
// randomness (dynamic sampling takes already-drawn groups or a draw
// callback). Functions are safe for concurrent use; a Filler is not.
// Length mismatches between paired slices are programmer errors and panic
// with a "dapo:" message.
package dapo
