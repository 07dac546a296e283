// Package cards is the lab's mechanism catalogue (METHOD.md §1 Vocabulary:
// each proposal instantiates one of a curated library of mechanism
// directions; the paper curates 40, the lab 30). A card is a mechanism
// direction with typed parameters (valid ranges and a finite list of choices
// a policy samples from), a prior, and an edit of a model.Config.
//
// Proposals have a one-line text form that an LLM can read and write:
//
//	lr-scale factor=2
//	adamw decay=0.1
//	none
//
// followed, optionally, by free-text lines (a rationale) that become
// Proposal.Text. Parse and Render round-trip: Parse(Render(p)) equals p for
// every proposal Parse accepts. Unknown cards, unknown, missing or
// duplicated parameters, malformed values and values outside a parameter's
// range are infeasible: the errors wrap builder.ErrInfeasible and say why
// (METHOD.md §1 Reward 2 gives such proposals r = −c).
//
// Relative sizes. The size cards edit the reference relative to itself,
// so that a proposal means the same research move on every task whatever
// the reference's size (a choice like "hidden=256" would double one
// reference, leave another unchanged and halve a third): width, embed-dim,
// context, batch-size and batch-size-sqrt-lr multiply the size by factor
// (×2 doubles it; a factor below 1 rounds down, so ×0.5 is v/2 in integer
// division; others round to the nearest integer), depth, residual-depth and
// deep-normed add add layers (negative removes them; the residual cards go
// to at least 2). Each card keeps its result within a range given in its
// description (width 8–512, embed-dim 2–128, context 2–32, batch 8–512,
// layers 0–6, 2–6 for the residual cards); a result outside it is
// ErrOutOfRange, and one the model rejects ErrInvalidConfig.
//
//	width factor=2
//	depth add=-1
//
// Priors. Each card's Prior (records.Prior, gain in units of the task's
// seed noise σ_e) is the effect a researcher would expect from general
// machine-learning knowledge of small language models trained for a few
// hundred steps. The priors were written down before any proposal was
// measured in the lab and are never fitted to the lab's results, so they
// can be right or wrong for this setting exactly as an LLM world model's
// knowledge can (a world model may start from them).
//
// The package is pure: no I/O, no goroutines. The catalogue is immutable
// and every function is safe for concurrent use.
package cards
