// Package evalstat holds the statistics of an evaluation over many seeds
// (METHOD.md §1 Data and evaluation): per method Avg@K, Best@K, the
// negative-gain rate and the share of proposals above 2σ_e, each with a 95%
// stratified bootstrap confidence interval over seeds and states; the
// interquartile mean of the per-state Avg@K; and the paired per-state
// difference of one method against another (Base, the best baseline) with
// its interval and the probability of improvement.
//
// The unit of data is a Cell: one research state of one seed with the real
// gains of its K proposals in σ_e units (METHOD.md §1 Headline results:
// seed-normalised gains). Each state weighs the same in every statistic
// (library choice: a state whose proposal failed to run is not worth less).
//
// The bootstrap (Efron and Tibshirani 1993; stratified as in Agarwal et al.
// 2021, "Deep RL at the edge of the statistical precipice") is
// hierarchical: a replicate draws the seeds with replacement, then within
// each drawn seed and each stratum (a task, say) as many of that seed's
// states as the stratum holds, with replacement. An interval thus shows the
// spread between trained seeds as well as between states; with one seed it
// shows the spread between states only. A stratum with a single state
// contributes no spread (it is drawn every time), so strata should hold
// several states each. The interval is the percentile interval of the
// replicates (gonum's empirical quantile).
//
// Scale re-expresses gains on a robust scale before the statistics: each
// gain divided by a floored noise (the task family's median σ_e over the
// training tasks, NewScale) and clipped at the reward clip c, so that a
// task of tiny σ_e cannot carry a mean (lab v2 pitfall: σ_e spans an order
// of magnitude across tasks). Report it beside the raw σ_e units.
//
// Everything is pure: values in, values out, no I/O, no clocks, no
// goroutines; randomness comes from the caller's *rand.Rand, so a seed
// gives the same intervals bit for bit. Functions are safe for concurrent
// use with distinct *rand.Rand values.
package evalstat
