// Package serve is LM2LM's environment service: the training loop
// (loop.Loop) driven by an outside RL trainer such as verl, TRL,
// OpenRLHF, slime or prime-rl, which samples completions from its LLM
// policy and updates it.
//
// The service hands out research states as chat prompts (proposer/openai's
// prompt format), as a JSON API or as a dataset file whose rows carry a
// state id of their own. It scores groups of completions however the
// trainer sends them: each sample names its group, the group size G and
// the trainer's step, and the service assembles the group across requests
// and processes, then scores it once (parse, predict with the world model,
// shape with the duplicate, diversity and invalid rules, group-relative
// advantages, dynamic sampling: METHOD.md §1 Reward and Policy
// optimisation), every sample getting the same answer however the group
// was split. It follows the trainer's step and runs the calibration points
// in the background through the Executor while scoring goes on under M_u
// (METHOD.md §1 On-policy calibration); the new records apply at the next
// step. It evaluates proposals on held-out states with real runs and
// reports the reliability monitors, also as Prometheus metrics. A
// world-model failure is answered as a failure reason, never as a reward.
// Its routes are documented on Service.Handler and in docs/service.md.
//
// Durability: every state change is a checksummed journal entry, synced
// before it is answered; the checkpoint records the entries it covers. A
// restarted service replays the journal without calling the world model,
// refuses a damaged journal with the offset of the damage, and resumes a
// calibration in flight through an idempotent executor (builder.Pool over
// a records store), so nothing acknowledged is lost and no run is paid
// twice.
//
// Safety: the service binds loopback by default and needs a bearer token
// on any other address; its state directory is locked; request bodies,
// batch sizes, requests and connections in process, read and idle times,
// and every store it keeps are bounded, with JSON 4xx and 503 errors;
// completion text is data, parsed by proposer/openai.ParseProposal, never
// a shell argument.
//
// A Service is safe for concurrent use; it does I/O (its state directory,
// the world model, the executor) and owns goroutines that Close stops.
package serve
