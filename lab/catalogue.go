package lab

import (
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

// Representative returns the card's representative proposal for a task:
// the first of the card's proposals (cards.Proposals order, most typical
// choice first) that changes the task's reference configuration, so that a
// sweep never spends runs on a no-op (e.g. "batch-size batch=32" on a
// reference that already uses 32). It falls back to cards.Representative
// when every choice is a no-op or infeasible.
func Representative(spec TaskSpec, c records.Card) records.Proposal {
	for _, p := range cards.Proposals(c) {
		if cfg, err := cards.Apply(spec.Config, p); err == nil && cfg != spec.Config {
			return p
		}
	}
	return cards.Representative(c)
}
