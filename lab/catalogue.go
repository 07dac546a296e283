package lab

import (
	"strconv"

	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// Catalogue returns the lab's mechanism cards as data (see package cards):
// the action space of a proposer and the list a prompt shows. The caller
// owns the slice.
func Catalogue() []records.Card { return cards.Catalogue() }

// ParseProposal reads a proposal in the catalogue's text form, e.g.
// "lr-scale factor=2" (see cards.Parse). Unknown cards and out-of-range
// values return an error wrapping builder.ErrInfeasible with the reason.
func ParseProposal(text string) (records.Proposal, error) { return cards.Parse(text) }

// Render writes p in the catalogue's text form; ParseProposal(Render(p))
// equals p for every proposal ParseProposal accepts.
func Render(p records.Proposal) string { return cards.Render(p) }

// ApplyProposal returns ref edited by p (records.NoChange returns ref), or
// an error wrapping builder.ErrInfeasible with the reason.
func ApplyProposal(ref model.Config, p records.Proposal) (model.Config, error) {
	return cards.Apply(ref, p)
}

// direction is a card with a direction: the parameter that sets it, its
// identity value (no change) and the card's opposite choice, which
// RelativeOpposite proposes and OppositeLabel names. The size cards are
// relative to the reference (cards.Apply): factor 2 doubles a width,
// context or batch and 0.5 halves it; add 1 adds a layer and −1 removes
// one. The residual cards are about adding depth and have no opposite.
type direction struct {
	param, identity, opposite, label string
}

var directions = map[string]direction{
	"width":              {"factor", "1", "0.5", "width ×½"},
	"embed-dim":          {"factor", "1", "0.5", "embed-dim ×½"},
	"context":            {"factor", "1", "0.5", "context ×½"},
	"batch-size":         {"factor", "1", "0.5", "batch-size ×½"},
	"batch-size-sqrt-lr": {"factor", "1", "0.5", "batch-size-sqrt-lr ×½"},
	"depth":              {"add", "0", "-1", "depth −1"},
	"lr-scale":           {"factor", "1", "0.5", "lr-scale factor=0.5"},
	"model-scale":        {"factor", "1", "0.5", "model-scale factor=0.5"},
}

// sameWay reports whether p moves a directional card's parameter away from
// the identity on the side of the card's first choice (not towards its
// opposite); true for a card without a direction.
func sameWay(c records.Card, p records.Proposal) bool {
	d, ok := directions[c.Mechanism]
	if !ok {
		return true
	}
	side := func(s string) int {
		x, _ := strconv.ParseFloat(s, 64)
		id, _ := strconv.ParseFloat(d.identity, 64)
		switch {
		case x > id:
			return 1
		case x < id:
			return -1
		}
		return 0
	}
	return side(p.Params[d.param]) == side(cards.Representative(c).Params[d.param])
}

// Changes reports whether p is feasible on spec's reference and changes
// it: a landscape sweeps a proposal only where it does (not a no-op, not
// out of a card's range).
func Changes(spec TaskSpec, p records.Proposal) bool {
	cfg, err := cards.Apply(spec.Config, p)
	return err == nil && cfg != spec.Config
}

// RelativeRepresentative returns the card's representative proposal for a
// task: its first choice (cards.Proposals order, most typical first) that
// changes the task's reference. The size cards are relative to the
// reference, so the representative means the same change on every task:
// width, embed-dim, context, batch-size and batch-size-sqrt-lr double the
// reference's value (factor=2), depth, residual-depth and deep-normed add
// a layer (add=1). A card with a direction (width, embed-dim, context,
// batch-size, batch-size-sqrt-lr, depth, lr-scale, model-scale) only takes
// choices on the side of its first one, never its opposite. ok is false
// when no such choice is feasible and changes the reference (a sweep skips
// the card there rather than spend runs on a no-op or on a change that
// reverses the card's meaning).
func RelativeRepresentative(spec TaskSpec, c records.Card) (p records.Proposal, ok bool) {
	for _, p := range cards.Proposals(c) {
		if sameWay(c, p) && Changes(spec, p) {
			return p, true
		}
	}
	return records.Proposal{}, false
}

// OppositeLabel names a card's opposite choice in a landscape (e.g.
// "width ×½", "depth −1", "lr-scale factor=0.5"); ok is false for a card
// without one.
func OppositeLabel(c records.Card) (label string, ok bool) {
	d, ok := directions[c.Mechanism]
	return d.label, ok
}

// RelativeOpposite returns the opposite of the card's relative
// representative: the card's first choice with its direction reversed —
// half the size (factor=0.5) or one layer fewer (add=-1) for the size
// cards, factor=0.5 for lr-scale and model-scale. A landscape sweep runs
// both, because whether a reference learns too fast or too slowly, or is
// too large or too small for its budget and data, is the state the best
// direction depends on. ok is false when the card has no direction or the
// opposite is infeasible on the reference or changes nothing.
func RelativeOpposite(spec TaskSpec, c records.Card) (records.Proposal, bool) {
	d, ok := directions[c.Mechanism]
	if !ok {
		return records.Proposal{}, false
	}
	p := cards.Representative(c)
	params := map[string]string{}
	for k, v := range p.Params {
		params[k] = v
	}
	params[d.param] = d.opposite
	p.Params = params
	if !Changes(spec, p) {
		return records.Proposal{}, false
	}
	return p, true
}

// Representative returns the card's representative proposal for a task:
// RelativeRepresentative, falling back to cards.Representative when that
// has none.
func Representative(spec TaskSpec, c records.Card) records.Proposal {
	if p, ok := RelativeRepresentative(spec, c); ok {
		return p
	}
	return cards.Representative(c)
}
