package records

import "math/rand/v2"

// TaskChange is one (task, proposal) pair planned for a real run.
type TaskChange struct {
	Task     Task
	Proposal Proposal
}

// Key identifies the pair: the task ID and the proposal's canonical key.
func (c TaskChange) Key() string { return c.Task.ID + "\x00" + c.Proposal.Key() }

// DrawChanges draws up to n distinct (task, catalogue proposal) pairs by
// mechanism-library sampling (METHOD.md §1 Data and evaluation: how M_0 is
// drawn): a task uniformly, then a card uniformly, then each parameter's
// choice uniformly in the card's order. A pair drawn before, or whose Key
// is in skip (nil = none), is drawn again: with fixed seeds and stored runs
// a repeat would measure nothing new. It gives up after 100·n draws (a
// small catalogue), returning fewer pairs. tasks and cat must not be empty
// when n > 0.
func DrawChanges(rng *rand.Rand, tasks []Task, cat []Card, n int, skip map[string]bool) []TaskChange {
	var out []TaskChange
	seen := map[string]bool{}
	for draws := 0; len(out) < n && draws < 100*n; draws++ {
		t := tasks[rng.IntN(len(tasks))]
		c := cat[rng.IntN(len(cat))]
		p := Proposal{Mechanism: c.Mechanism, Params: map[string]string{}}
		for _, ps := range c.Params {
			p.Params[ps.Name] = ps.Choices[rng.IntN(len(ps.Choices))]
		}
		ch := TaskChange{t, p}
		if k := ch.Key(); !seen[k] && !skip[k] {
			seen[k] = true
			out = append(out, ch)
		}
	}
	return out
}
