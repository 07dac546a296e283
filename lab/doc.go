// Package lab is the embedded LM development environment (METHOD.md §1
// Vocabulary: tasks e, proposals a, gains g = b_e − ℓ, the Builder): real
// tiny language models trained on CPU, so that gains are real, noisy,
// sometimes negative, and sometimes the run fails.
//
// A task is a model family × corpus × data slice × reference configuration
// × compute budget (TaskSpec). Two suites exist. SuiteV1 (DefaultTasks) has
// 20 training and 4 held-out hand-written tasks over two autoregressive
// families measured in bits per byte and two diffusion families measured in
// nats per masked token, with fixed step budgets; HoldOutFamily holds out a
// whole family. SuiteV2 is generated (Space documents the distribution):
// 64 training, 16 validation and 16 test tasks (8 in-distribution, 8 from a
// compute-starved region training never covers) over four families, with
// learning rates from too low to too hot, data slices from 1 KiB to whole
// corpora, three corpora (prose, code, markup) and budgets in FLOPs: a
// proposal's run trains until the task's budget (model.StepFLOPs, forward
// and backward matrix multiplies counted from the shapes) is spent, so the
// best change depends on the research state. The V3 held-out splits
// (V3Test, V3Val: 48 tasks each, half in distribution, half over three
// out-of-distribution regions, SplitRegions and RegionOf) are evaluated
// with policies trained on SuiteV2's training split; the new-corpora
// region reads Debian files (corpus.DebianSources) no other split reads. Each task carries named
// numeric descriptors (Desc*, records.Task.Descriptors). The reference loss
// b_e and seed noise σ_e of a task come from five seeded reference runs,
// trained once and cached in a records.Store. Proposals are instances of the mechanism cards of package
// cards (Catalogue, ParseProposal, Render, ApplyProposal); Lab implements
// builder.Builder (a proposal becomes the JSON of a model.Config) and
// builder.Executor (train, evaluate, gain against the reference run of the
// same seed, CPU seconds and FLOPs as cost; divergence is infeasible).
// Corpora live in package corpus and the training core in package model.
//
// Landscape measures, from a card × task sweep, how much the best change
// depends on the task (median pairwise Spearman, cards changing sign,
// oracle minus best fixed set), robustly (σ floored at the family's median
// σ_e, seeds clipped at the reward clip) and raw, and with the choice and
// its score on disjoint seeds (HeldOutOracle, HeldOutFixed);
// RelativeRepresentative gives each card a choice that means the same
// change on every task, and since the size cards are relative, every
// proposal of the catalogue does too (examples/sweep sweeps them all).
//
// I/O: loading corpora reads files under GOROOT (or the caller's file);
// reference runs are read from and appended to the caller's store.
// Concurrency: a Lab is safe for concurrent use; training happens on the
// calling goroutine, except that Reference (and the methods that need it)
// trains a task's missing reference seeds on up to Config.Parallel
// goroutines that it waits for, and RunAll runs jobs on up to its parallel
// argument's goroutines. Runs are parallel across runs, never within one.
package lab
