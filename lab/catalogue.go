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
// reference's value of it: a width, context or batch is doubled (and, by
// RelativeOpposite, halved); a depth gains a layer (and loses one). The
// residual cards are about adding depth: they go to at least 2 layers and
// have no opposite.
var relativeSize = map[string]struct {
	param    string
	of       func(ref model.Config) int
	residual bool
}{
	"width":              {param: "hidden", of: func(c model.Config) int { return c.Hidden }},
	"embed-dim":          {param: "embed", of: func(c model.Config) int { return c.Embed }},
	"context":            {param: "length", of: func(c model.Config) int { return c.Context }},
	"batch-size":         {param: "batch", of: func(c model.Config) int { return c.Batch }},
	"batch-size-sqrt-lr": {param: "batch", of: func(c model.Config) int { return c.Batch }},
	"depth":              {param: "layers", of: func(c model.Config) int { return c.Layers }},
	"residual-depth":     {param: "layers", of: func(c model.Config) int { return c.Layers }, residual: true},
	"deep-normed":        {param: "layers", of: func(c model.Config) int { return c.Layers }, residual: true},
}

// larger and smaller are the relative edits of a size card's value v.
func larger(param string, v int, residual bool) int {
	switch {
	case residual:
		return max(2, v+1)
	case param == "layers":
		return v + 1
	}
	return 2 * v
}

func smaller(param string, v int) int {
	if param == "layers" {
		return v - 1
	}
	return v / 2
}

// relativeFactor names the cards whose representative multiplies a value
// by a factor > 1; RelativeOpposite is the reciprocal.
var relativeFactor = map[string]string{"lr-scale": "factor", "model-scale": "factor"}

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
		params[rel.param] = strconv.Itoa(larger(rel.param, rel.of(spec.Config), rel.residual))
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

// OppositeLabel names a card's opposite choice in a landscape (e.g.
// "width ×½", "depth −1", "lr-scale factor=0.5"); ok is false for a card
// without one.
func OppositeLabel(c records.Card) (label string, ok bool) {
	if rel, found := relativeSize[c.Mechanism]; found && !rel.residual {
		if rel.param == "layers" {
			return c.Mechanism + " −1", true
		}
		return c.Mechanism + " ×½", true
	}
	if param, found := relativeFactor[c.Mechanism]; found {
		return c.Mechanism + " " + param + "=0.5", true
	}
	return "", false
}

// RelativeOpposite returns the opposite of the card's relative
// representative: half the size (one layer fewer) for the size cards, the
// factor ½ for lr-scale and model-scale. A landscape sweep runs both,
// because whether a reference learns too fast or too slowly, or is too
// large or too small for its budget and data, is the state the best
// direction depends on. ok is false when the card has no
// direction, the value is out of the card's range or it changes nothing.
func RelativeOpposite(spec TaskSpec, c records.Card) (records.Proposal, bool) {
	p := cards.Representative(c)
	params := map[string]string{}
	for k, v := range p.Params {
		params[k] = v
	}
	if rel, found := relativeSize[c.Mechanism]; found && !rel.residual {
		params[rel.param] = strconv.Itoa(smaller(rel.param, rel.of(spec.Config)))
	} else if param, found := relativeFactor[c.Mechanism]; found {
		params[param] = "0.5"
	} else {
		return records.Proposal{}, false
	}
	p.Params = params
	if _, err := cards.Parse(cards.Render(p)); err != nil {
		return records.Proposal{}, false
	}
	cfg, err := cards.Apply(spec.Config, p)
	if err != nil || cfg == spec.Config {
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
