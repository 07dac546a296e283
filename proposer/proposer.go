package proposer

import (
	"context"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/records"
)

// Sample is one proposal drawn from a policy.
type Sample struct {
	Proposal records.Proposal
	// Tokens are the units the policy emitted (for the embedded policy: the
	// card, then each parameter's choice; for an LLM: completion tokens).
	Tokens []string
	// LogProbs[i] is log π(Tokens[i] | s, Tokens[:i]) under the sampling
	// policy at Temperature. Empty when the backend does not report them.
	LogProbs    []float64
	Temperature float64
	// Invalid is set when the output could not be parsed into a proposal; the
	// reward is then −c (METHOD.md §1 Reward 2). Reason says why.
	Invalid bool
	Reason  string
}

// Proposer samples n proposals for state s.
//
// Randomness comes only from rng, so a seeded rng reproduces the samples of
// a deterministic policy. Propose returns a wrapped ctx.Err() on
// cancellation. Implementations are safe for concurrent use unless
// documented otherwise; rng is not, and must not be shared between
// concurrent calls.
type Proposer interface {
	Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]Sample, error)
}

// Item is one sample of a training batch with its state and advantage.
type Item struct {
	State     records.State
	Sample    Sample // Sample.LogProbs are the old (behaviour) log-probs
	Advantage float64
}

// Stats summarises one update.
type Stats struct {
	Loss     float64 // the surrogate loss before the update
	ClipFrac float64 // fraction of tokens whose ratio was clipped
	Entropy  float64 // mean per-token entropy of the policy before the update
	KL       float64 // mean per-token KL(old ‖ new) after the update, estimated on the batch
	Tokens   int     // tokens in the batch
}

// Trainable is a proposer that the library can train itself.
//
// Update applies one DAPO step (METHOD.md §1 Policy optimisation) on the
// batch. It is not safe to call concurrently with any other method.
type Trainable interface {
	Proposer
	Update(ctx context.Context, batch []Item) (Stats, error)
}

// Supervisor is an optional ability of a Trainable, found by type
// assertion: Supervise applies one maximum-likelihood step on the given
// proposals (the SFT and RFT baselines of METHOD.md §1 Data and
// evaluation). It is not safe to call concurrently with any other method.
// The embedded Policy implements it; the trainer never calls it.
type Supervisor interface {
	Supervise(ctx context.Context, examples []Item) (Stats, error)
}

// Scorer is an optional ability of a Proposer, found by type assertion: it
// returns the current policy's per-token log-probabilities of smp's tokens
// for state s, at smp's temperature. After an Update the scores of a batch's
// samples are its new log-probs; before it they equal the samples' LogProbs.
// Score is safe for concurrent use with Propose and Score.
type Scorer interface {
	Score(ctx context.Context, s records.State, smp Sample) ([]float64, error)
}
