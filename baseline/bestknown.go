package baseline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Errors of the package.
var (
	// ErrConfig marks an invalid configuration.
	ErrConfig = errors.New("baseline: bad config")
	// ErrNoRecords: a proposer that ranks real records was given none.
	ErrNoRecords = errors.New("baseline: no real records")
)

// BestKnownConfig parameterises NewBestKnown.
type BestKnownConfig struct {
	// Tasks is how many of the most similar tasks with records are pooled
	// to rank proposals (tasks tied in similarity with the last one are
	// pooled too, so the answer does not depend on record order). Default
	// 3 (library choice: a family's sibling tasks; a single nearest task
	// holds too few records to rank a catalogue).
	Tasks int
	// Clip is c: an infeasible record counts as a gain of −c σ_e, the
	// reward rule's −c (METHOD.md §1 Reward 2). Default 6.
	Clip float64
	// KeepHistory proposes changes the state's history already holds too;
	// default false (library choice: a change whose outcome the researcher
	// has seen teaches nothing new, so it is skipped while others remain).
	KeepHistory bool
	// Similarity scores tasks; nil = records.Similarity.
	Similarity func(a, b records.Task) float64
}

// DefaultBestKnownConfig returns the defaults documented on
// BestKnownConfig.
func DefaultBestKnownConfig() BestKnownConfig { return BestKnownConfig{Tasks: 3, Clip: 6} }

// Validate reports the first problem with c, wrapping ErrConfig.
func (c BestKnownConfig) Validate() error {
	switch {
	case c.Tasks < 1:
		return fmt.Errorf("%w: BestKnownConfig.Tasks = %d, want ≥ 1", ErrConfig, c.Tasks)
	case !(c.Clip > 0) || math.IsInf(c.Clip, 1):
		return fmt.Errorf("%w: BestKnownConfig.Clip = %g, want finite and > 0", ErrConfig, c.Clip)
	}
	return nil
}

// BestKnown proposes, for a state of task e, the changes with the highest
// mean σ-normalised real gain over the records of the tasks most similar
// to e. It learns nothing and draws no randomness: its answer is a
// deterministic function of its records and the state. It is safe for
// concurrent use.
type BestKnown struct {
	cfg    BestKnownConfig
	n      int
	tasks  []records.Task              // tasks with records, in first-seen order
	byTask map[string][]records.Record // task ID -> its records
}

var (
	_ proposer.Proposer   = (*BestKnown)(nil)
	_ proposer.RealRunner = (*BestKnown)(nil)
)

// NewBestKnown returns a BestKnown ranking the records of ev.
func NewBestKnown(cfg BestKnownConfig, ev records.Evidence) (*BestKnown, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ev.Len() == 0 {
		return nil, fmt.Errorf("baseline: best known: %w", ErrNoRecords)
	}
	if cfg.Similarity == nil {
		cfg.Similarity = records.Similarity
	}
	b := &BestKnown{cfg: cfg, n: ev.Len(), byTask: map[string][]records.Record{}}
	for _, r := range ev.Records() {
		if _, ok := b.byTask[r.Task.ID]; !ok {
			b.tasks = append(b.tasks, r.Task)
		}
		b.byTask[r.Task.ID] = append(b.byTask[r.Task.ID], r)
	}
	return b, nil
}

// RealRuns returns the number of real records BestKnown ranks.
func (b *BestKnown) RealRuns() int { return b.n }

// Ranked is one proposal of a BestKnown ranking.
type Ranked struct {
	Proposal records.Proposal
	Mean     float64 // mean gain in σ_e units of its records (infeasible = −c)
	Records  int     // how many records the mean is over
}

// Rank returns every proposal recorded on the tasks most similar to task,
// best first: by mean σ-normalised gain, then by more records, then by
// key.
func (b *BestKnown) Rank(task records.Task) []Ranked {
	type acc struct {
		p   records.Proposal
		sum float64
		n   int
	}
	byKey := map[string]*acc{}
	for _, t := range b.nearest(task) {
		for _, r := range b.byTask[t.ID] {
			g := -b.cfg.Clip
			if r.Infeasible == "" {
				g = r.Gain / r.Task.SeedNoise
			}
			a := byKey[r.Proposal.Key()]
			if a == nil {
				a = &acc{p: r.Proposal}
				byKey[r.Proposal.Key()] = a
			}
			a.sum += g
			a.n++
		}
	}
	out := make([]Ranked, 0, len(byKey))
	for _, a := range byKey {
		p := a.p
		p.Text = ""
		out = append(out, Ranked{Proposal: p, Mean: a.sum / float64(a.n), Records: a.n})
	}
	slices.SortFunc(out, func(x, y Ranked) int {
		if c := cmp.Compare(y.Mean, x.Mean); c != 0 {
			return c
		}
		if c := cmp.Compare(y.Records, x.Records); c != 0 {
			return c
		}
		return cmp.Compare(x.Proposal.Key(), y.Proposal.Key())
	})
	return out
}

// nearest returns the Tasks tasks with records most similar to task, and
// every task tied with the last of them.
func (b *BestKnown) nearest(task records.Task) []records.Task {
	ts := slices.Clone(b.tasks)
	sim := make(map[string]float64, len(ts))
	for _, t := range ts {
		sim[t.ID] = b.cfg.Similarity(task, t)
	}
	slices.SortStableFunc(ts, func(x, y records.Task) int { return cmp.Compare(sim[y.ID], sim[x.ID]) })
	n := min(b.cfg.Tasks, len(ts))
	for n < len(ts) && sim[ts[n].ID] == sim[ts[n-1].ID] {
		n++
	}
	return ts[:n]
}

// Propose returns the n best-ranked proposals for s's task, skipping those
// in s's history unless KeepHistory is set (or unless nothing else is
// left). When fewer than n proposals are known it starts the list again,
// so that every one of the n samples is a proposal; rng is not used.
func (b *BestKnown) Propose(ctx context.Context, s records.State, n int, _ *rand.Rand) ([]proposer.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("baseline: best known: %w", err)
	}
	if n < 0 {
		return nil, fmt.Errorf("baseline: best known: n = %d, want ≥ 0", n)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("baseline: best known: %w", err)
	}
	ranked := b.Rank(s.Task)
	if !b.cfg.KeepHistory {
		seen := map[string]bool{}
		for _, r := range s.History {
			seen[r.Proposal.Key()] = true
		}
		fresh := slices.DeleteFunc(slices.Clone(ranked), func(r Ranked) bool { return seen[r.Proposal.Key()] })
		if len(fresh) > 0 {
			ranked = fresh
		}
	}
	out := make([]proposer.Sample, n)
	for i := range out {
		out[i] = proposer.Sample{Proposal: cloneProposal(ranked[i%len(ranked)].Proposal)}
	}
	return out, nil
}

func cloneProposal(p records.Proposal) records.Proposal {
	if p.Params != nil {
		params := make(map[string]string, len(p.Params))
		for k, v := range p.Params {
			params[k] = v
		}
		p.Params = params
	}
	return p
}
