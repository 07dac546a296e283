// Package reward turns world-model predictions for one group of proposals
// into shaped scalar rewards, following METHOD.md §1 Reward.
//
// The pipeline for a group of G proposals of one research state is:
//
//  1. τ_e = max(σ_e, 1.4826·MAD_e) over the task's predicted gains
//     (TaskScale), and r_i = clip(ĝ_i/τ_e, −c, c) (Normalise).
//  2. Invalid or infeasible proposals get −c; a proposal that changes
//     nothing gets NoOpReward (−3).
//  3. Duplicates get min(reward of the scored proposals) − δ.
//  4. Scored proposals get the diversity bonus λ·σ_G·d̃_i.
//
// Shape documents every choice the paper leaves open (how d̃ is normalised,
// over which rewards σ_G is taken, what counts for the duplicate minimum);
// Explain returns the same rewards with their parts for logging and tests.
// Beyond the paper, Config.Pessimism (off by default) blends in the world
// model's pessimistic quantile (q10) so uncertain predictions earn less.
//
// WMRL's execution ladder (METHOD.md §2) lives here too: LadderScore maps
// a code solution's Status (syntax error 0.0, runtime error 0.1, ran
// without a submission 0.2, valid 0.5 + 0.5·q) to a score in [0, 1],
// Percentile places a submission's metric on a leaderboard (q), and
// QualityTable maps a verdict world model's predicted quality buckets to q
// (library choice: quarter midpoints).
//
// The package is pure: values in, values out, no I/O, no clocks, no
// goroutines. Every function is safe for concurrent use.
package reward
