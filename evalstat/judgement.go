package evalstat

import (
	"fmt"
	"math"
	"slices"
)

// Judged is one held-out state of the judgement diagnostic: what the
// policy would propose there and what each change really gains on the
// state's task. The diagnostic asks whether the policy proposes what this
// state needs or what pays on average (METHOD.md §1 Data and evaluation:
// held-out states; the rerank baseline asks the world model about each
// state, so its choices follow the state by construction).
type Judged struct {
	// Region groups states for JudgeRegions ("" for none).
	Region string
	// Policy is the policy's probability of each change at this state, by
	// the change's key: exact for a policy that has them, else the
	// frequencies of its samples (a deterministic choice is 1 on one key).
	// Values are in [0, 1] and sum to 1 within 1e-6; a key it omits has 0.
	Policy map[string]float64
	// Gains is the measured gain of each change on the state's task (any
	// unit, e.g. σ_e); at least one. The state's best change is the
	// largest (the smallest key among equal gains).
	Gains map[string]float64
}

// Judgement is the diagnostic over a set of states.
type Judgement struct {
	Region string
	States int
	// BestRank is the mean over states of the rank of the state's best
	// change among its measured changes, ordered by the policy's
	// probability (1 = the policy's most probable; ties take their mean
	// rank). ChanceRank is the mean rank a policy that ranks the changes
	// without regard to the state would get on average, (n+1)/2 for n
	// measured changes.
	BestRank, ChanceRank float64
	// BestMass is the mean probability the policy puts on the state's best
	// change.
	BestMass float64
	// PolicySpread is the mean, over pairs of states, of the total
	// variation distance between the policy's distributions (0: the same
	// choices everywhere, 1: disjoint). BestSpread is the share of pairs
	// of states whose best changes differ: how much what the states need
	// varies.
	PolicySpread, BestSpread float64
	// Dependence is PolicySpread / BestSpread: 0 for a policy blind to
	// the state, about 1 for one whose choices vary as much as the states'
	// needs do; NaN when every state has the same best change or there is
	// one state.
	Dependence float64
}

// Judge computes the judgement diagnostic over states (all regions
// together). It wraps ErrEmpty without states and ErrData for a state
// whose probabilities or gains are out of range.
func Judge(states []Judged) (Judgement, error) {
	if len(states) == 0 {
		return Judgement{}, fmt.Errorf("%w: no state to judge", ErrEmpty)
	}
	best := make([]string, len(states))
	var j Judgement
	for i, s := range states {
		if err := s.check(); err != nil {
			return Judgement{}, fmt.Errorf("state %d: %w", i, err)
		}
		b := s.best()
		best[i] = b
		j.BestRank += BestRank(s.Policy, s.Gains, 0)
		j.ChanceRank += float64(len(s.Gains)+1) / 2
		j.BestMass += s.Policy[b]
	}
	n := float64(len(states))
	j.States = len(states)
	j.BestRank, j.ChanceRank, j.BestMass = j.BestRank/n, j.ChanceRank/n, j.BestMass/n
	pairs := 0
	for a := range states {
		for b := a + 1; b < len(states); b++ {
			pairs++
			j.PolicySpread += totalVariation(states[a].Policy, states[b].Policy)
			if best[a] != best[b] {
				j.BestSpread++
			}
		}
	}
	j.Dependence = math.NaN()
	if pairs > 0 {
		j.PolicySpread /= float64(pairs)
		j.BestSpread /= float64(pairs)
		if j.BestSpread > 0 {
			j.Dependence = j.PolicySpread / j.BestSpread
		}
	}
	return j, nil
}

// JudgeRegions is Judge over all states (Region "") and then over each
// region's states, regions in sorted order.
func JudgeRegions(states []Judged) ([]Judgement, error) {
	all, err := Judge(states)
	if err != nil {
		return nil, err
	}
	out := []Judgement{all}
	var regions []string
	for _, s := range states {
		if s.Region != "" && !slices.Contains(regions, s.Region) {
			regions = append(regions, s.Region)
		}
	}
	slices.Sort(regions)
	for _, r := range regions {
		var in []Judged
		for _, s := range states {
			if s.Region == r {
				in = append(in, s)
			}
		}
		j, err := Judge(in)
		if err != nil {
			return nil, err
		}
		j.Region = r
		out = append(out, j)
	}
	return out, nil
}

func (s Judged) check() error {
	if len(s.Gains) == 0 {
		return fmt.Errorf("%w: no measured change", ErrData)
	}
	for k, g := range s.Gains {
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return fmt.Errorf("%w: gain of %q is %v", ErrData, k, g)
		}
	}
	sum := 0.0
	for k, p := range s.Policy {
		if !(p >= 0 && p <= 1) {
			return fmt.Errorf("%w: probability of %q is %v", ErrData, k, p)
		}
		sum += p
	}
	if math.Abs(sum-1) > 1e-6 {
		return fmt.Errorf("%w: the policy's probabilities sum to %v, want 1", ErrData, sum)
	}
	return nil
}

// best returns the key of the largest gain, the smallest key among ties.
func (s Judged) best() string { return bestKey(s.Gains) }

// bestKey returns the key of gains' largest value, the smallest key among
// ties ("" for no key).
func bestKey(gains map[string]float64) string {
	keys := make([]string, 0, len(gains))
	for k := range gains {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	slices.Sort(keys)
	b := keys[0]
	for _, k := range keys[1:] {
		if gains[k] > gains[b] {
			b = k
		}
	}
	return b
}

// BestRank is the rank of gains' best key (the largest gain, the smallest
// key among equal gains) among the keys of gains ordered by score, highest
// first: 1 + the number of keys scored above it + half the number scored
// equal to it (ties take their mean rank). A key score lacks scores
// missing: 0 for a policy's probabilities (Judge), −Inf for a ranking that
// puts what it never saw last. (n+1)/2 for n keys is the mean rank of a
// ranking blind to which key is best; 0 without keys.
func BestRank(score, gains map[string]float64, missing float64) float64 {
	b := bestKey(gains)
	if b == "" {
		return 0
	}
	get := func(k string) float64 {
		if v, ok := score[k]; ok {
			return v
		}
		return missing
	}
	sb := get(b)
	above, ties := 0, 0
	for k := range gains {
		switch v := get(k); {
		case k == b:
		case v > sb:
			above++
		case v == sb:
			ties++
		}
	}
	return 1 + float64(above) + float64(ties)/2
}

// totalVariation is ½ Σ |p(k) − q(k)| over the keys of either.
func totalVariation(p, q map[string]float64) float64 {
	d := 0.0
	for k, x := range p {
		d += math.Abs(x - q[k])
	}
	for k, y := range q {
		if _, ok := p[k]; !ok {
			d += y
		}
	}
	return d / 2
}
