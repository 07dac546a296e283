// Package serve is LM2LM's environment service: the training loop
// (lm2lm.Loop) driven by an outside RL trainer such as TRL, verl or
// OpenRLHF, which samples completions from its LLM policy and updates it.
//
// The service hands out research states as chat prompts (proposer/openai's
// prompt format), as a JSON API or as a dataset file whose rows carry a
// state id; scores groups of completions (parse, predict with the world
// model, shape with the duplicate, diversity and invalid rules,
// group-relative advantages, dynamic sampling: METHOD.md §1 Reward and
// Policy optimisation); counts the trainer's steps and runs the
// calibration points through the Executor (METHOD.md §1 On-policy
// calibration: greedy top-B over the candidates scored since the last
// one); evaluates proposals on held-out states with real runs; and reports
// the reliability monitors, also as Prometheus metrics. Its routes are
// documented on Service.Handler and in docs/service.md.
//
// Durability: every state-changing request is journalled (fsync) before it
// is answered, and the loop is checkpointed at every calibration and every
// Config.SnapshotEvery requests; a restarted service replays the journal
// without calling the world model, and Resume finishes a calibration in
// flight through an idempotent executor (builder.Pool over a records
// store), so nothing is lost and no run is paid twice. A repeated request
// (same request id, or the same body without one) is answered from its
// first result.
//
// Safety: the service binds loopback by default and needs a bearer token
// on any other address; request bodies, batch sizes and requests in
// process are bounded, with JSON 4xx and 503 errors; completion text is
// data, parsed by proposer/openai.ParseProposal, never a shell argument.
//
// A Service is safe for concurrent use; it does I/O (its state directory,
// the world model, the executor).
package serve
