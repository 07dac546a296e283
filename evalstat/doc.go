// Package evalstat holds the statistics of an evaluation over many seeds
// (METHOD.md §1 Data and evaluation): per method Avg@K, Best@K, the
// negative-gain rate and the share of proposals above 2σ_e, each with a 95%
// bootstrap confidence interval over seeds, tasks and states; the
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
// 2021, "Deep RL at the edge of the statistical precipice") has two
// schemes (Config.Scheme); the interval is the percentile interval of the
// replicates (gonum's empirical quantile) under both.
//
// Hierarchical, the one to report, counts tasks: a replicate draws the
// seeds with replacement; then, within each region (Cell.Stratum), as many
// tasks (Cell.Task) as the region holds, with replacement, one draw that
// every drawn seed shares (tasks are crossed with seeds: every seed
// evaluates the same tasks, so drawing them per seed would shrink their
// spread by the number of seeds); then, for each drawn seed and task, as
// many of that seed's states of the task as it holds, with replacement.
// Each drawn state weighs the same in the replicate's statistic. An
// interval thus says how a result would move on the next sample of
// seeds, of tasks from each region and of states; with one task per
// region it reduces to seeds and states. Seeds, regions and tasks are
// numbered in order of first appearance, so renaming them leaves every
// interval bit for bit the same. SummarizeRegions and CompareRegions give
// each region's statistics apart.
//
// StateLevel, this release's default, is the earlier scheme and stays
// beside Hierarchical for one release, then goes: a replicate draws the
// seeds with replacement, then within each drawn seed and each stratum as
// many of that seed's states as the stratum holds, with replacement. It
// treats the tasks as fixed: a task's states are not independent draws,
// so its intervals understate the spread between tasks and say little
// about the next sample of tasks. With one seed it shows the spread
// between states only. A stratum with a single state contributes no
// spread (it is drawn every time), so strata should hold several states
// each.
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
