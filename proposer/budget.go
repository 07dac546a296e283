package proposer

// RealRunner is an optional ability of a Proposer, found by type
// assertion: RealRuns returns the number of real runs whose records the
// proposer reads when it proposes (the records in its context, the records
// it ranks). It is the proposer's share of a method's real-run budget, so
// that methods are compared at equal budget (METHOD.md §1 Headline results:
// cost). Runs the proposer's owner paid to train it are counted by that
// owner, not here. A proposer that reads no real records need not
// implement it.
type RealRunner interface {
	RealRuns() int
}

// RealRuns returns p's RealRuns when p is a RealRunner, else 0.
func RealRuns(p Proposer) int {
	if r, ok := p.(RealRunner); ok {
		return r.RealRuns()
	}
	return 0
}
