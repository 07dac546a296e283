// Package openai is a proposer (METHOD.md §1 Objective and Policy
// optimisation) that samples proposals from an LLM behind any
// OpenAI-compatible chat-completions endpoint, through the official Go SDK
// github.com/openai/openai-go/v3.
//
// Propose sends one request for n samples (the API's n parameter, at the
// configured temperature, with a seed drawn from the caller's rng) and asks
// for token log-probabilities; when the server returns fewer choices than
// asked (servers that ignore n), it asks again for the rest. Each choice
// becomes a proposer.Sample: the parsed proposal (ParseProposal: a JSON object
// {mechanism, params, rationale}, prose around it tolerated), the completion
// tokens and their log-probs when the server reports them, and the sampling
// temperature. Proposal.Text holds the whole completion (the LLM's wording),
// so that an exported batch carries the exact text that was sampled. An answer that cannot be parsed, a refusal or a proposal
// outside the catalogue is a Sample marked Invalid with a Reason (it earns
// −c, METHOD.md §1 Reward 2), never an error; only transport failures that
// outlive the retries (429 honouring Retry-After, 5xx, timeouts, broken
// bodies) and cancellation are errors.
//
// The prompt (SystemPrompt, UserTemplate) shows the task, the research
// state's history with gains and, when Config.Catalogue is set, the mechanism
// cards with their allowed parameter values; without a catalogue the LLM
// proposes in free form. Everything from outside the library sits in one
// fenced data block of JSON lines whose fence cannot be closed from inside
// (see rwm/openai).
//
// A Proposer samples from a remote LLM but does not update it. To train
// an LLM proposer, run the environment service (package serve, the command
// cmd/lm2lm-serve, docs/service.md): TRL, verl or OpenRLHF sample
// completions from their policy and the service scores them with the world
// model and runs the calibration points for real. A host with its own
// trainer can also take DAPO batches: ExportBatch writes one (prompt
// messages, completion, completion tokens, old log-probs, advantage per
// sample) as JSON lines, and DecodeBatch reads it back. Endpoint settings come from Config or, for empty fields,
// OPENAI_BASE_URL, OPENAI_API_KEY and LM2LM_MODEL (explicit fields win).
// The package does network I/O; a *Proposer is safe for concurrent use.
package openai
