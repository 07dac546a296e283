// Package proposer defines the proposer π_θ(a | s) that LM2LM trains
// (METHOD.md §1 Objective and Policy optimisation): Proposer samples
// proposals for a research state with per-token log-probabilities, and
// Trainable adds DAPO and supervised updates. The package holds the embedded
// log-linear policy over a mechanism catalogue; subpackage openai samples
// from an LLM endpoint; proposertest is a conformance suite.
package proposer
