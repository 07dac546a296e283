package baseline

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Supervision names a supervised baseline (METHOD.md §1 Data and
// evaluation, baselines): the policy is trained by maximum likelihood on
// real records of M_0 instead of by RL.
type Supervision string

// The supervised baselines.
const (
	// SFT imitates every feasible real record of M_0.
	SFT Supervision = "sft"
	// RFT (RFT-Real) imitates the feasible real records of M_0 with a
	// positive gain.
	RFT Supervision = "rft"
)

// Encoder turns a proposal into the tokens a policy emits for it, or an
// error for a proposal outside the policy's catalogue (proposer.Policy's
// Encode).
type Encoder interface {
	Encode(records.Proposal) ([]string, error)
}

// SupervisedItems returns the examples that kind imitates among m0's
// records, in m0's order: every feasible record for SFT, those with a gain
// > 0 for RFT. A record enc cannot encode (outside the policy's catalogue)
// is skipped. An unknown kind is an error wrapping ErrConfig; an empty
// result is an error wrapping ErrNoRecords.
func SupervisedItems(kind Supervision, enc Encoder, m0 records.Evidence) ([]proposer.Item, error) {
	if kind != SFT && kind != RFT {
		return nil, fmt.Errorf("%w: supervision %q, want %q or %q", ErrConfig, records.Excerpt(string(kind)), SFT, RFT)
	}
	var items []proposer.Item
	for _, r := range m0.Records() {
		if r.Infeasible != "" || (kind == RFT && !(r.Gain > 0)) {
			continue
		}
		toks, err := enc.Encode(r.Proposal)
		if err != nil {
			continue // a record outside the catalogue cannot be imitated
		}
		items = append(items, proposer.Item{State: records.State{Task: r.Task},
			Sample: proposer.Sample{Proposal: r.Proposal, Tokens: toks}})
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: %s: none of the %d records of M_0 to imitate", ErrNoRecords, kind, m0.Len())
	}
	return items, nil
}

// Supervise applies steps maximum-likelihood steps of s, each on the whole
// of items (the SFT and RFT baselines: items from SupervisedItems), and
// calls each, when not nil, after every step with the step's number
// (1-based) and its proposer.Stats. A negative steps is an error wrapping
// ErrConfig; s's errors (a done ctx) are returned as they are.
func Supervise(ctx context.Context, s proposer.Supervisor, items []proposer.Item, steps int, each func(step int, st proposer.Stats)) error {
	if steps < 0 {
		return fmt.Errorf("%w: supervised steps = %d, want ≥ 0", ErrConfig, steps)
	}
	if s == nil {
		return fmt.Errorf("%w: supervise needs a policy", ErrConfig)
	}
	for i := range steps {
		st, err := s.Supervise(ctx, items)
		if err != nil {
			return err
		}
		if each != nil {
			each(i+1, st)
		}
	}
	return nil
}
