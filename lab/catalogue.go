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

// relativeSize names the size parameter of the cards whose representative
// choice is relative to the reference (RelativeRepresentative), with the
// edit it makes: double a width, context or batch, add a layer.
var relativeSize = map[string]struct {
	param string
	next  func(ref model.Config) int
}{
	"width":              {"hidden", func(c model.Config) int { return 2 * c.Hidden }},
	"embed-dim":          {"embed", func(c model.Config) int { return 2 * c.Embed }},
	"context":            {"length", func(c model.Config) int { return 2 * c.Context }},
	"batch-size":         {"batch", func(c model.Config) int { return 2 * c.Batch }},
	"batch-size-sqrt-lr": {"batch", func(c model.Config) int { return 2 * c.Batch }},
	"depth":              {"layers", func(c model.Config) int { return c.Layers + 1 }},
	"residual-depth":     {"layers", func(c model.Config) int { return max(2, c.Layers+1) }},
	"deep-normed":        {"layers", func(c model.Config) int { return max(2, c.Layers+1) }},
}

// RelativeRepresentative returns the card's representative proposal for a
// task, expressed relative to the task's reference so that it means the
// same change on every task: the size cards double the reference's value
// (width, embed-dim, context, batch-size, batch-size-sqrt-lr) or add a layer
// (depth, residual-depth, deep-normed; other parameters at their first
// choice); every other card takes its first choice (cards.Proposals order,
// most typical first) that changes the reference. ok is false when the
// relative value is out of the card's range or no choice changes the
// reference (a sweep skips the card there rather than spend runs on a
// no-op or on a change that reverses the card's meaning).
func RelativeRepresentative(spec TaskSpec, c records.Card) (p records.Proposal, ok bool) {
	changes := func(p records.Proposal) bool {
		cfg, err := cards.Apply(spec.Config, p)
		return err == nil && cfg != spec.Config
	}
	if rel, found := relativeSize[c.Mechanism]; found {
		p = cards.Representative(c)
		params := map[string]string{}
		for k, v := range p.Params {
			params[k] = v
		}
		params[rel.param] = strconv.Itoa(rel.next(spec.Config))
		p.Params = params
		if _, err := cards.Parse(cards.Render(p)); err != nil || !changes(p) {
			return records.Proposal{}, false
		}
		return p, true
	}
	for _, p := range cards.Proposals(c) {
		if changes(p) {
			return p, true
		}
	}
	return records.Proposal{}, false
}

// RelativeChoices returns the proposals a landscape sweep runs for the
// card on a task: RelativeRepresentative, and for lr-scale also its
// opposite, factor ½, because whether a reference learns too fast or too
// slowly is the state the learning rate's best direction depends on. Empty
// when the card has no relative choice on the task.
func RelativeChoices(spec TaskSpec, c records.Card) []records.Proposal {
	p, ok := RelativeRepresentative(spec, c)
	if !ok {
		return nil
	}
	out := []records.Proposal{p}
	if c.Mechanism == "lr-scale" {
		out = append(out, records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "0.5"}})
	}
	return out
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
