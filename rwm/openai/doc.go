// Package openai is a research world model (METHOD.md §1 Research World
// Model) backed by an LLM behind any OpenAI-compatible chat-completions
// endpoint (vLLM, SGLang, llama.cpp's server, a hosted API), called through
// the official Go SDK github.com/openai/openai-go/v3.
//
// One Predict is one call: the prompt (SystemPrompt and UserTemplate) gives
// the model its role, the task and metric with the reference loss b_e, the
// seed noise σ_e and the budget, the most relevant real records of M first
// (same task, then same family, then same mechanism) within a record and
// character budget, and the proposal as parsed (mechanism and parameters;
// its free text, which the policy being trained writes, only with
// Config.ShowProposalText). Everything taken from outside the
// library (records, task description, proposal) sits in one fenced data
// block: each item is JSON-encoded with HTML escaping, so it holds no '<' or
// '>' and no raw line break, and the fence token is derived from a hash of
// the block and verified absent from it, so no proposal can close the fence
// or smuggle instructions out of it. The answer is requested as a JSON object
// {gain, q10, q90, valid, reason} through a JSON-schema response format;
// servers that ignore it and wrap the JSON in prose are handled by taking
// the first balanced JSON object of the text. ParsePrediction is strict:
// an answer with no JSON object, an ambiguous one, a missing field or one
// of the wrong type cannot be read (ErrUnreadable: a failure of the world
// model, which the loop and the service give no reward); NaN, infinities,
// absurd magnitudes and refusals are typed errors wrapping
// rwm.ErrBadPrediction (an unusable prediction about the proposal, scored
// invalid); never a silent zero.
//
// Transient failures (429 honouring Retry-After, 408, 409, 5xx, timed-out
// attempts, dropped connections, truncated or malformed bodies) are retried
// with exponential backoff through an injectable sleep; when retries run
// out, the error is an *rwm.TransientError (it wraps rwm.ErrTransient and
// carries the server's Retry-After for rwm.Retry). Each Prediction reports
// its token usage in Prediction.Usage for rwm.Ledger; Model.Usage returns the
// running totals.
//
// The endpoint comes from Config or, for empty fields, the environment:
// OPENAI_BASE_URL, OPENAI_API_KEY and LM2LM_MODEL (an explicit Config field
// always wins; with an API key but no base URL the official endpoint is
// used). The package does network I/O; a *Model is safe for concurrent use.
package openai
