package baseline

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// RerankConfig parameterises NewRerank.
type RerankConfig struct {
	// N is how many samples are drawn from the base proposer per call; the
	// n best-rated distinct ones are kept (best-of-N). Default 32 (library
	// choice: four times a rollout group of 8, enough to cover a 40-card
	// catalogue's better half at the cost of predictions only).
	N int
	// Parallel bounds concurrent world-model predictions; default 4.
	Parallel int
	// History adds the real records of the state's history (those of
	// source Real; synthetic ones never reach a world model, METHOD.md §1
	// Synthetic state expansion) to the evidence of that state's
	// predictions, after the evidence given to NewRerank: what is known of
	// the state's own task joins what is known of the others. Default off
	// (the evidence alone, as METHOD.md §1 Research World Model states W's
	// context).
	History bool
}

// DefaultRerankConfig returns the defaults documented on RerankConfig.
func DefaultRerankConfig() RerankConfig { return RerankConfig{N: 32, Parallel: 4} }

// Validate reports the first problem with c, wrapping ErrConfig.
func (c RerankConfig) Validate() error {
	switch {
	case c.N < 1:
		return fmt.Errorf("%w: RerankConfig.N = %d, want ≥ 1", ErrConfig, c.N)
	case c.Parallel < 1:
		return fmt.Errorf("%w: RerankConfig.Parallel = %d, want ≥ 1", ErrConfig, c.Parallel)
	}
	return nil
}

// Rerank is best-of-N under a world model: it draws max(N, n) samples of a
// base proposer, has the world model predict each valid one's gain with
// all real records in context, and returns the n distinct proposals with
// the highest predicted gain. It is safe for concurrent use when the base
// proposer and the world model are.
type Rerank struct {
	cfg   RerankConfig
	base  proposer.Proposer
	world rwm.WorldModel
	ev    records.Evidence
}

var (
	_ proposer.Proposer   = (*Rerank)(nil)
	_ proposer.RealRunner = (*Rerank)(nil)
)

// NewRerank returns a Rerank of base's samples by world with evidence ev.
func NewRerank(cfg RerankConfig, base proposer.Proposer, world rwm.WorldModel, ev records.Evidence) (*Rerank, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if base == nil || world == nil {
		return nil, fmt.Errorf("%w: rerank needs a base proposer and a world model", ErrConfig)
	}
	return &Rerank{cfg: cfg, base: base, world: world, ev: ev}, nil
}

// RealRuns returns the real records in the world model's context plus the
// base proposer's own (proposer.RealRuns).
func (r *Rerank) RealRuns() int { return r.ev.Len() + proposer.RealRuns(r.base) }

// evidence is the evidence of s's predictions: r.ev, followed by the real
// records of s's history under History.
func (r *Rerank) evidence(s records.State) (records.Evidence, error) {
	if !r.cfg.History {
		return r.ev, nil
	}
	ev, err := r.ev.AddReal(s.History...)
	if err != nil {
		return r.ev, fmt.Errorf("baseline: rerank: history of %s: %w", records.Excerpt(s.Task.ID), err)
	}
	return ev, nil
}

type rated struct {
	i    int     // index in the base's samples
	gain float64 // predicted gain
}

// Propose returns n samples: the best-rated distinct valid samples of the
// base, best first; when fewer than n are distinct it starts their list
// again, and when the world model rates none valid it returns the base's
// first n samples as drawn. The samples keep the base's tokens and
// log-probs (they are the base's behaviour, not a policy of Rerank's own).
func (r *Rerank) Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	if n < 0 {
		return nil, fmt.Errorf("baseline: rerank: n = %d, want ≥ 0", n)
	}
	if n == 0 {
		return nil, nil
	}
	smp, err := r.base.Propose(ctx, s, max(r.cfg.N, n), rng)
	if err != nil {
		return nil, fmt.Errorf("baseline: rerank: %w", err)
	}
	ev, err := r.evidence(s)
	if err != nil {
		return nil, err
	}
	preds := make([]rwm.Prediction, len(smp))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(r.cfg.Parallel)
	for i, x := range smp {
		if x.Invalid {
			continue
		}
		eg.Go(func() error {
			p, err := r.world.Predict(ectx, rwm.Query{Task: s.Task, Proposal: x.Proposal, Evidence: ev})
			if err != nil {
				return fmt.Errorf("baseline: rerank: predict %q: %w", records.Excerpt(x.Proposal.Key()), err)
			}
			preds[i] = p
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var rs []rated
	seen := map[string]bool{}
	for i, x := range smp {
		if x.Invalid || !preds[i].Valid || seen[x.Proposal.Key()] {
			continue
		}
		seen[x.Proposal.Key()] = true
		rs = append(rs, rated{i, preds[i].Gain})
	}
	if len(rs) == 0 {
		return smp[:n], nil
	}
	// Stable: equal predictions keep the base's order.
	slices.SortStableFunc(rs, func(a, b rated) int { return cmp.Compare(b.gain, a.gain) })
	out := make([]proposer.Sample, n)
	for k := range out {
		out[k] = smp[rs[k%len(rs)].i]
		out[k].Proposal = cloneProposal(out[k].Proposal)
	}
	return out, nil
}
