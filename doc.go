// Package lm2lm trains a proposer to suggest changes to language-model
// training recipes that really lower validation loss.
//
// # The method in one page
//
// A research state s = (e, h) is a task e (a reference training
// configuration with reference loss b_e and seed noise σ_e) and a history h of
// up to eight earlier experiments on it. A proposer π_θ(a | s) suggests a
// change a; its gain g(s, a) = b_e − ℓ is the reference loss minus the
// measured loss (METHOD.md §1 Vocabulary). Measuring g costs a real training
// run, so LM2LM (METHOD.md §1) trains the proposer on rewards from a research
// world model W that predicts ĝ(e, a; M) from the real records M in its
// context, and keeps W honest by executing a few proposals for real:
//
//  1. Sample research states from the pool; the proposer draws G = 8
//     proposals per state (package proposer).
//  2. W predicts each proposal's gain from (task, proposal, M) (package rwm).
//  3. Rewards are shaped per group: r = clip(ĝ/τ_e, −6, 6) with
//     τ_e = max(σ_e, 1.4826·MAD_e); −6 for invalid, −3 for no change,
//     min − 1 for duplicates, plus a diversity bonus (package reward,
//     METHOD.md §1 Reward).
//  4. Dynamic sampling drops groups whose rewards are all equal; group
//     advantages are mean-centred; the token-level clipped surrogate with
//     ε_low 0.2, ε_high 0.28 updates the policy (package dapo, METHOD.md §1
//     Policy optimisation).
//  5. Every 8 steps the rollout's (state, proposal, predicted gain) triples
//     join the state pool as synthetic records, which build histories but are
//     never evidence for W (package records, METHOD.md §1 Synthetic state
//     expansion).
//  6. At calibration steps (16, 40, 64) the B_u = 31, 38, 31 top-rated
//     proposals of the current policy (greedy top-B) are built and executed
//     for real, and their records join M (packages calibrate and builder,
//     METHOD.md §1 On-policy calibration). Reliability monitors compare
//     predicted and real rewards on exactly those proposals.
//
// WMRL (METHOD.md §2) corrects W numerically instead: about 10% of the kept
// groups (anchor groups) are also executed for real and trained on real
// rewards, an isotonic map from predicted to real score is refitted online
// on their pairs and applied to every world-model reward, and the anchor
// groups' advantages are multiplied by an inverse-variance weight 1 + c·D
// relative to world-model groups, where D is the measured disagreement
// (calibrate.Weighter, dapo.ScaleAdvantages). That is WMRL's per-group form
// of inverse-variance denoising: the trainer does not call dapo.Combine,
// which combines separately computed gradient estimates and is offered for
// hosts that compute them (packages calibrate and dapo).
//
// The method's state is package loop's Loop, a pure state machine in the
// shape of etcd raft's RawNode: it owns M, the state pool, the calibration
// and WMRL state and a random source; its inputs draw states, score groups,
// observe the trainer's step and absorb finished runs, and its one output,
// Ready, names the predictions to make and the runs to execute. It computes
// τ_e, shaped rewards, dynamic sampling, advantages, calibration picks,
// WMRL's corrections and the monitors; it does no I/O. The Trainer is one
// driver of it (it samples and updates the policy); the environment
// service (package serve), which lets an outside RL trainer such as TRL,
// verl or OpenRLHF train an LLM proposer, is another.
//
// # Package map
//
//   - lm2lm (this package): Trainer drives the loop with the interfaces
//     below (Config.Calibration selects top-rated, random or no
//     calibration; Config.WMRL adds WMRL's corrections; Config.Trigger
//     times calibrations adaptively at the schedule's budgets) and checkpoints
//     between steps; Evaluate executes a policy's proposals on held-out
//     research states for real (METHOD.md §1 Data and evaluation).
//   - loop: the method's state and its one vocabulary (above), with its
//     own Config of scoring, calibration and WMRL parameters. Pure.
//   - records: tasks, proposals and canonical keys, records, research states,
//     real-only Evidence, the Store contract with in-memory and durable file
//     stores, the state pool.
//   - reward: task scale, normalisation and clipping, invalid / no-change /
//     duplicate rules, diversity bonus. Pure.
//   - dapo: group advantages, dynamic sampling, the clipped surrogate and its
//     gradient, inverse-variance combination. Pure.
//   - calibrate: greedy top-B, calibration schedules, reliability monitors,
//     isotonic debiasing, anchor groups and weighting. Pure.
//   - rwm: the WorldModel contract, wrappers (cache, limit, retry,
//     accounting) and the embedded in-context model; rwm/openai speaks to any
//     OpenAI-compatible server.
//   - proposer: the Proposer and Trainable contracts and the embedded
//     log-linear policy; proposer/openai samples from an LLM server.
//   - builder: the Builder and Executor contracts, a bounded local pool and a
//     subprocess executor for host training scripts; builder/slurm runs the
//     same protocol on Slurm.
//   - lab: the embedded LM development lab: tiny language models trained on
//     CPU with real, noisy validation losses, a mechanism catalogue and tasks.
//
// Each interface has a conformance suite in a …test package (storetest,
// rwmtest, proposertest, buildertest) that host implementations can run.
package lm2lm
