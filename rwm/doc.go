// Package rwm defines the research world model (METHOD.md §1 Research World
// Model): a frozen predictor W that estimates a proposal's gain ĝ(e, a; M)
// from the task e, the proposal a and the real records M in its context. A
// world model is calibrated only by adding records to M, never by training.
// Query.Evidence is a records.Evidence, which admits only real records, so
// predicted or synthetic records (METHOD.md §1 Synthetic state expansion)
// can never reach a world model as context.
//
// The package holds the WorldModel contract, Prediction, and:
//
//   - Embedded, the in-context model that runs with no LLM: a Gaussian
//     process on gains in units of σ_e whose kernel shares strength across
//     tasks of a family and proposals of a mechanism, with optional
//     per-mechanism priors from a catalogue and Gaussian q10/q90
//     (EmbeddedConfig documents the kernel and its fixed hyperparameters;
//     Tune picks them from a small grid by marginal likelihood on the
//     records, LogMarginal scores one configuration);
//   - Tuned, the embedded model that re-tunes itself when its records
//     change: each query is predicted by an Embedded of the configuration
//     Tune picks on the query's evidence, tuned once per distinct evidence
//     (in training, once per calibration segment, METHOD.md §1 On-policy
//     calibration);
//   - wrappers any backend can use, each a WorldModel itself: Cache (LRU,
//     keyed by model identity, task, proposal key and evidence fingerprint,
//     with coalescing of identical calls in flight), Limit (concurrency
//     bound), Retry (transient errors with backoff and Retry-After, through
//     TransientError) and Ledger (calls, cache hits and tokens). Stack them
//     as Ledger → Cache → Limit → Retry → backend.
//
// Subpackage openai is an LLM-backed world model over any OpenAI-compatible
// chat endpoint; rwmtest is the conformance suite and a fixed fake.
//
// I/O: none; Retry's default sleep uses a timer (inject RetryConfig.Sleep
// to avoid it). Goroutines: none are started. Every type here is safe for
// concurrent use.
package rwm
