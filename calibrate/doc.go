// Package calibrate holds the pure parts of keeping a world model honest:
// LM2LM's on-policy calibration (METHOD.md §1 On-policy calibration) and
// WMRL's corrections (METHOD.md §2).
//
//   - Selection: TopB and TopBWith pick the B_u top-rated candidates to
//     execute (greedy top-B, with optional per-task and unique-key limits).
//   - Schedules: Schedule (fixed steps 16/40/64 with budgets 31/38/31) and
//     Trigger, an adaptive rule beyond the paper that fires when a monitor
//     crosses a threshold.
//   - Monitors: Decompose (Ĵ_M, J̄, Δ_M), AdvantageCosine,
//     PairwiseAccuracy, Gap and MechanismShare over groups with both
//     predicted and real rewards.
//   - Online Debiasing: FitIsotonic (weighted pool-adjacent-violators),
//     FitBinned (WMRL's binned variant) and OnlineDebiaser.
//   - Anchor groups and Inverse-Variance Denoising: AnchorCount,
//     Disagreement and Weighter.
//
// Everything is pure: values in, values out, no I/O, no clocks, no
// goroutines, no randomness. Functions are safe for concurrent use; an
// OnlineDebiaser or a Weighter is not (guard it or give each loop its own).
// An Isotonic is immutable once fitted and safe to share. Length
// mismatches between paired slices panic with a "calibrate:" message.
package calibrate
