// Package landscape reads a landscape store (examples/sweep -landscape
// -store FILE): every catalogue change run for real on every task of a
// split, from which the judgement diagnostics read each task's needs
// (examples/compare's judgement and its references, examples/judgement's
// rankings). One reading for all of them, so their ranks compare.
package landscape

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// InfeasibleGain is the gain, in σ_e units, an infeasible run counts as:
// −c, the reward rule's clip (METHOD.md §1 Reward 2).
var InfeasibleGain = -reward.DefaultConfig().Clip

// ErrEmpty marks a store with no real run of a change on a task with σ_e.
var ErrEmpty = errors.New("landscape: no real run")

// Gains is, per task ID, each mechanism's (records.CanonicalName) best
// measured gain in σ_e units: the mean over the seeds run of its best
// proposal, an infeasible run counting InfeasibleGain. Gains are not
// clipped.
type Gains map[string]map[string]float64

// Landscape is a store as the diagnostics read it.
type Landscape struct {
	// Gains is each task's landscape over all its seeds.
	Gains Gains
	// BySeed holds each task's landscape from its first and from its
	// second seed's runs alone (seeds in increasing order; a run's seed is
	// its first); a task run with one seed is in neither.
	BySeed [2]Gains
	// Tasks is each task as its records name it (family, split,
	// descriptors).
	Tasks map[string]records.Task
}

// Read reads the landscape store at path, opened read only. Only real
// runs count, of a change (a no-change record is a reference, not a
// mechanism) on a task with a seed noise σ_e > 0. A store with none is an
// error wrapping ErrEmpty.
func Read(ctx context.Context, path string) (*Landscape, error) {
	s, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	rs, err := s.Scan(ctx, records.Filter{Source: records.Real})
	if err != nil {
		return nil, err
	}
	l := FromRecords(rs)
	if len(l.Gains) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrEmpty, path)
	}
	return l, nil
}

// run is one real run of a proposal: its seed and gain in σ_e units.
type run struct {
	seed uint64
	gain float64
}

// proposalRuns are one proposal's runs on one task.
type proposalRuns struct {
	mech string
	runs []run
}

// FromRecords builds the landscape of rs's real runs, as Read does.
func FromRecords(rs []records.Record) *Landscape {
	byKey := map[string]map[string]*proposalRuns{}
	seeds := map[string][]uint64{}
	l := &Landscape{Gains: Gains{}, BySeed: [2]Gains{{}, {}}, Tasks: map[string]records.Task{}}
	for _, r := range rs {
		if r.Source != records.Real || !(r.Task.SeedNoise > 0) || r.Proposal.IsNoChange() {
			continue
		}
		g := InfeasibleGain
		if r.Infeasible == "" {
			g = r.Gain / r.Task.SeedNoise
		}
		m := byKey[r.Task.ID]
		if m == nil {
			m = map[string]*proposalRuns{}
			byKey[r.Task.ID] = m
			l.Tasks[r.Task.ID] = r.Task
		}
		p := m[r.Proposal.Key()]
		if p == nil {
			p = &proposalRuns{mech: records.CanonicalName(r.Proposal.Mechanism)}
			m[r.Proposal.Key()] = p
		}
		var seed uint64
		if len(r.Seeds) > 0 {
			seed = r.Seeds[0]
		}
		p.runs = append(p.runs, run{seed, g})
		if !slices.Contains(seeds[r.Task.ID], seed) {
			seeds[r.Task.ID] = append(seeds[r.Task.ID], seed)
		}
	}
	for task, m := range byKey {
		ss := seeds[task]
		slices.Sort(ss)
		for _, p := range m {
			l.Gains.put(task, p.mech, p.runs, func(run) bool { return true })
			if len(ss) < 2 {
				continue
			}
			for i := range l.BySeed {
				l.BySeed[i].put(task, p.mech, p.runs, func(r run) bool { return r.seed == ss[i] })
			}
		}
	}
	return l
}

// put sets mech's gain on task to the mean of the runs keep admits when
// it beats the gain there (a mechanism keeps its best proposal); no run
// admitted puts nothing.
func (g Gains) put(task, mech string, runs []run, keep func(run) bool) {
	sum, n := 0.0, 0
	for _, r := range runs {
		if keep(r) {
			sum += r.gain
			n++
		}
	}
	if n == 0 {
		return
	}
	mean := sum / float64(n)
	best := g[task]
	if best == nil {
		best = map[string]float64{}
		g[task] = best
	}
	if b, ok := best[mech]; !ok || mean > b {
		best[mech] = mean
	}
}
