// Package proposer defines the proposer π_θ(a | s) that LM2LM trains
// (METHOD.md §1 Objective and Policy optimisation): Proposer samples
// proposals for a research state with per-token log-probabilities,
// Trainable adds DAPO updates and the optional Supervisor supervised ones. The package holds the embedded
// log-linear policy over a mechanism catalogue; subpackage openai samples
// from an LLM endpoint; proposertest is a conformance suite.
//
// # The embedded policy
//
// Policy (NewPolicy) is a softmax policy in which a proposal is a short
// token sequence: the card, then one choice per parameter of the card
// (records.ParamSpec.Choices), optionally with the no-change proposal
// (records.NoChange) as one more card. Each token's logits are linear in
// binary features of the research state (task family, metric, budget,
// history length, the history's cards with the signs of their gains, the
// last record) and of the tokens before it, so DAPO's token-level clipped
// loss (package dapo) applies to it exactly as to an LLM's completion
// tokens. An optional hidden layer over the state features
// (PolicyConfig.Hidden, default 0 = off) adds V·tanh(U·x + c) to every
// head's logits, for rewards that depend on combinations of features.
// Update runs one DAPO step: new log-probs are recomputed, the loss
// gradient with respect to them comes from dapo.Evaluate and is
// back-propagated analytically through the softmax heads (and the hidden
// layer) into an Adam step.
// Supervise is one maximum-likelihood step (the SFT and RFT baselines).
// MarshalBinary and UnmarshalBinary checkpoint weights, Adam state, config
// and catalogue. The catalogue reaches the policy as data ([]records.Card),
// so any host's catalogue works and this package does not import the lab.
//
// # Determinism, I/O and concurrency
//
// The package does no I/O and starts no goroutines. Randomness comes only
// from the *rand.Rand passed to NewPolicy (initial weights, when
// PolicyConfig.InitStd > 0 or PolicyConfig.Hidden > 0) and to Propose, so
// equal seeds give equal policies, samples and updates. A Policy is safe for concurrent use:
// Propose, Score and CardProbs run concurrently under a read lock; Update,
// Supervise, SetTemperature and UnmarshalBinary take the write lock. An rng
// must not be shared between concurrent calls.
package proposer
