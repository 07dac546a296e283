package proposer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lm2lm/lm2lm/records"
)

// maxTopProposals bounds the proposals Top enumerates, so that a
// catalogue with many parameter choices fails clearly instead of running
// for ever.
const maxTopProposals = 1 << 16

// Top returns the n most probable distinct proposals of the policy for s
// at its temperature, most probable first: the sequence log-probability
// Σ_t log π(token_t | s, tokens[:t]) of every proposal in the catalogue
// (every card with every combination of its parameters' choices), ties
// kept in catalogue order. When n exceeds the number of proposals, the
// ranking repeats from the top, so a caller that measures each sample
// with its own seed measures the best ones again. Each sample carries its
// tokens and their log-probs, as Propose's do.
//
// Decoding the mode instead of sampling is the T → 0 limit of sampling
// with distinct proposals; it is an evaluation choice (the README's
// levers), never used in training, where DAPO needs samples. It fails for
// an invalid state, n < 0 or a catalogue of more than 65,536 proposals,
// and returns a wrapped ctx.Err() on cancellation.
func (p *Policy) Top(ctx context.Context, s records.State, n int) ([]Sample, error) {
	if err := checkRequest(ctx, "top", s, n); err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.ready(); err != nil {
		return nil, fmt.Errorf("proposer: top: %w", err)
	}
	total := 0
	for _, cl := range p.lay.cards {
		k := 1
		for _, pl := range cl.params {
			k *= len(pl.choices)
			if k > maxTopProposals {
				break
			}
		}
		if total += k; total > maxTopProposals {
			return nil, fmt.Errorf("proposer: top: more than %d proposals in the catalogue", maxTopProposals)
		}
	}
	if n == 0 {
		return []Sample{}, nil
	}
	temp := p.cfg.Temperature
	state := p.lay.stateFeatures(s, p.cfg.FamilyBuckets)
	hid := p.hiddenAct(state)
	cardLogp := logSoftmax(p.logits(nil, p.lay.heads[0], state, hid, temp))
	type cand struct {
		toks []int
		lp   []float64
		sum  float64
	}
	all := make([]cand, 0, total)
	var x []int
	var walk func(toks []int, lp []float64, sum float64)
	walk = func(toks []int, lp []float64, sum float64) {
		c := toks[0]
		t := len(toks)
		if t == 1+len(p.lay.cards[c].params) {
			all = append(all, cand{toks: slices.Clone(toks), lp: slices.Clone(lp), sum: sum})
			return
		}
		var h head
		h, x = p.lay.tokenFeatures(x, state, c, toks, t)
		logp := logSoftmax(p.logits(nil, h, x, hid, temp))
		for k, l := range logp {
			walk(append(toks, k), append(lp, l), sum+l)
		}
	}
	for c, l := range cardLogp {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("proposer: top: %w", err)
		}
		walk([]int{c}, []float64{l}, l)
	}
	slices.SortStableFunc(all, func(a, b cand) int {
		switch {
		case a.sum > b.sum:
			return -1
		case a.sum < b.sum:
			return 1
		}
		return 0
	})
	out := make([]Sample, n)
	for i := range out {
		c := all[i%len(all)]
		pr, toks := p.lay.decode(c.toks)
		out[i] = Sample{Proposal: pr, Tokens: toks, LogProbs: slices.Clone(c.lp), Temperature: temp}
	}
	return out, nil
}

// decode returns the proposal that token indices toks (a card, then one
// choice per parameter in catalogue order) stand for, and its token
// strings: the card's mechanism, then "name=choice" per parameter. A card
// without parameters has nil Params.
func (l *layout) decode(toks []int) (records.Proposal, []string) {
	cl := &l.cards[toks[0]]
	pr := records.Proposal{Mechanism: cl.mechanism}
	strs := make([]string, len(toks))
	strs[0] = cl.mechanism
	if len(cl.params) > 0 {
		pr.Params = make(map[string]string, len(cl.params))
	}
	for t := 1; t < len(toks); t++ {
		pl := &cl.params[t-1]
		ch := pl.choices[toks[t]]
		pr.Params[pl.name] = ch
		strs[t] = pl.name + "=" + ch
	}
	return pr, strs
}

// Greedy is a Proposer that decodes a Policy's most probable distinct
// proposals (Policy.Top) instead of sampling: Propose ignores its rng.
type Greedy struct{ Policy *Policy }

var _ Proposer = Greedy{}

// Propose returns g.Policy.Top(ctx, s, n).
func (g Greedy) Propose(ctx context.Context, s records.State, n int, _ *rand.Rand) ([]Sample, error) {
	if g.Policy == nil {
		return nil, fmt.Errorf("proposer: greedy: %w", ErrNotInitialised)
	}
	return g.Policy.Top(ctx, s, n)
}
