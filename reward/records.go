package reward

import (
	"strings"

	"github.com/lm2lm/lm2lm/records"
)

// NewCandidate returns the Candidate of proposal p, sampled for state s,
// with the world model's predicted gain and validity (false when the
// proposal could not be parsed, built or run). Key is p.Key(); Mechanism is
// p's mechanism direction, trimmed and lower-cased as in the key; NoOp is
// p.IsNoChange(); Repeat is set when a record of s.History has the same
// key (METHOD.md §1 Reward 3: repeating the state's history is a
// duplicate). Low and HasLow are left for the caller.
func NewCandidate(s records.State, p records.Proposal, predicted float64, valid bool) Candidate {
	key := p.Key()
	c := Candidate{
		Predicted: predicted,
		Valid:     valid,
		NoOp:      p.IsNoChange(),
		Key:       key,
		Mechanism: strings.ToLower(strings.Join(strings.Fields(p.Mechanism), " ")),
	}
	for _, r := range s.History {
		if r.Proposal.Key() == key {
			c.Repeat = true
			break
		}
	}
	return c
}

// ScaleFor returns TaskScale(t.SeedNoise, predicted): τ_e of task t over
// its predicted gains, which must be in the units of t.SeedNoise.
func ScaleFor(t records.Task, predicted []float64) float64 {
	return TaskScale(t.SeedNoise, predicted)
}
