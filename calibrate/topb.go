package calibrate

import (
	"cmp"
	"math"
	"slices"
)

// TopB returns the indices of the b highest scores, highest first, ties
// broken by lower index: the greedy solution of
// Q_u = argmax_{|Q| = B_u} Σ r(s,a; M_u) (METHOD.md §1 On-policy
// calibration). NaN scores rank below every number (they are picked only
// after all others). b ≤ 0 returns an empty slice; b > len(scores) returns
// every index.
func TopB(scores []float64, b int) []int {
	return TopBWith(scores, b, Options{})
}

// Options restricts TopBWith. Zero values impose nothing.
type Options struct {
	// Key[i] is candidate i's canonical proposal key (records.Proposal.Key);
	// with UniqueKeys at most one candidate per key is selected. An empty
	// key never collides.
	Key []string
	// UniqueKeys selects at most one candidate per canonical key: executing
	// the same change twice spends a run on an answer already known.
	UniqueKeys bool
}

// TopBWith is TopB under opt: it walks the candidates in TopB order and
// skips any that would repeat a key already selected, until b are
// selected or the candidates run out (so it may return fewer than b). Key,
// when set with UniqueKeys, must have len(scores) entries, or TopBWith
// panics.
func TopBWith(scores []float64, b int, opt Options) []int {
	n := len(scores)
	useKey := opt.UniqueKeys && len(opt.Key) > 0
	if useKey && len(opt.Key) != n {
		panic("calibrate: TopBWith: Options.Key length differs from len(scores)")
	}
	if b <= 0 || n == 0 {
		return []int{}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		if c := compareDesc(scores[i], scores[j]); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	if !useKey {
		return idx[:min(b, n):min(b, n)]
	}
	out := make([]int, 0, min(b, n))
	keys := map[string]bool{}
	for _, i := range idx {
		if len(out) == b {
			break
		}
		if useKey && opt.Key[i] != "" && keys[opt.Key[i]] {
			continue
		}
		out = append(out, i)
		if useKey && opt.Key[i] != "" {
			keys[opt.Key[i]] = true
		}
	}
	return out
}

// compareDesc orders a before b when a is larger; NaN is smallest.
func compareDesc(a, b float64) int {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
