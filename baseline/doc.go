// Package baseline holds the methods LM2LM is compared with, each an
// ordinary proposer.Proposer so that every method goes through the same
// evaluation (METHOD.md §1 Data and evaluation: baselines and ablations),
// and each reporting the real runs it reads (proposer.RealRunner) so that
// comparisons can be made at equal real-run budget.
//
//   - BestKnown proposes the changes whose real records were best on the
//     most similar tasks: "reuse what worked", with the same real records
//     LM2LM starts from and no learning at all.
//   - Rerank draws N samples from a base proposer and keeps the ones a world
//     model rates highest with all real records in context: best-of-N, the
//     embedded counterpart of the in-context (ICL) baselines.
//   - Enumerate proposes a fixed list (a whole catalogue, lab/cards.All):
//     a Rerank over it with N its length is the world model's own choice
//     over the action space, which no policy's samples limit.
//   - StaticPlusRandom builds M'_0 of the static-RWM ablation: M_0 plus the
//     calibration budget spent up front on random real records
//     (RandomDraws, RunDraws).
//   - SFT and RFT-Real train the embedded policy by maximum likelihood on
//     the real records of M_0 instead of by RL: SupervisedItems picks the
//     records each imitates (every feasible one, or those with a positive
//     gain) and Supervise runs the steps (proposer.Supervisor).
//
// The LLM in-context baseline (Base-ICL, strong model + ICL) is
// proposer/openai.ICL; Base is the untrained policy itself.
//
// The package sits beside the root package rather than in it, and imports
// neither it nor the other way round: records are measured as lm2lm.RunReal
// measures them (both call one internal implementation), and the root (the
// trainer and the evaluation harness) never needs a baseline.
package baseline
