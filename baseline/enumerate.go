package baseline

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Enumerate proposes a fixed list of proposals in order, whatever the
// state: sample i of a call is proposal i mod len. Under Rerank with N at
// least the list's length, the rerank predicts every proposal of the list
// and keeps the best-rated: the world model's own choice over the whole
// action space (a list such as lab/cards.All of a catalogue), not over a
// policy's samples. It reads no real record and is safe for concurrent
// use.
type Enumerate struct {
	props []records.Proposal
}

var _ proposer.Proposer = (*Enumerate)(nil)

// NewEnumerate returns an Enumerate of props (copied). It fails, wrapping
// ErrConfig, on an empty list or a proposal without a mechanism.
func NewEnumerate(props []records.Proposal) (*Enumerate, error) {
	if len(props) == 0 {
		return nil, fmt.Errorf("%w: enumerate: no proposal", ErrConfig)
	}
	e := &Enumerate{props: make([]records.Proposal, len(props))}
	for i, p := range props {
		if p.Mechanism == "" {
			return nil, fmt.Errorf("%w: enumerate: proposal %d has no mechanism", ErrConfig, i)
		}
		e.props[i] = cloneProposal(p)
	}
	return e, nil
}

// Len is the number of proposals listed: the N of a Rerank that predicts
// each of them once.
func (e *Enumerate) Len() int { return len(e.props) }

// Propose returns n samples, the list's proposals in order, starting the
// list again after its last. rng is not used.
func (e *Enumerate) Propose(ctx context.Context, _ records.State, n int, _ *rand.Rand) ([]proposer.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("baseline: enumerate: %w", err)
	}
	if n < 0 {
		return nil, fmt.Errorf("baseline: enumerate: n = %d, want ≥ 0", n)
	}
	out := make([]proposer.Sample, n)
	for i := range out {
		out[i] = proposer.Sample{Proposal: cloneProposal(e.props[i%len(e.props)])}
	}
	return out, nil
}
