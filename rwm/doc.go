// Package rwm defines the research world model (METHOD.md §1 Research World
// Model): a frozen predictor W that estimates a proposal's gain ĝ(e, a; M)
// from the task e, the proposal a and the real records M in its context. A
// world model is calibrated only by adding records to M, never by training.
//
// The package holds the WorldModel contract, Prediction, wrappers that any
// backend can use (cache, concurrency limit, retries, accounting) and the
// embedded in-context model. Subpackage openai is an LLM-backed world model
// over any OpenAI-compatible chat endpoint; rwmtest is a conformance suite.
package rwm
