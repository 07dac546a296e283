package dapo

import "fmt"

// Report describes one dynamic-sampling batch (METHOD.md §1 Policy
// optimisation: sample 277 states, keep 256, drop flat groups).
type Report struct {
	Draws     int  // groups drawn or offered
	Kept      int  // informative groups kept (≤ quota)
	Flat      int  // groups dropped because they carry no signal
	Surplus   int  // informative groups dropped because the quota was already met
	Short     bool // fewer than quota groups were kept
	Exhausted bool // the draw callback reported that no more groups exist
}

// Filler accumulates groups into a batch: it keeps informative groups, in
// the order offered, until it holds quota of them, and counts the rest as
// flat or surplus. It holds no group data, only indices. Typical use
// mirrors the paper: offer an over-sampled rollout (277 groups for a quota
// of 256), then, while !Full() and the draw budget allows, draw and offer
// more. Not safe for concurrent use.
type Filler struct {
	quota int
	tol   float64
	kept  []int
	rep   Report
}

// NewFiller returns a filler for quota informative groups, with flatness
// decided by Informative(rewards, tol).
func NewFiller(quota int, tol float64) *Filler {
	return &Filler{quota: max(quota, 0), tol: tol}
}

// Offer considers one drawn group and reports whether it was kept. The
// group's index is the number of groups offered before it.
func (f *Filler) Offer(rewards []float64) bool {
	i := f.rep.Draws
	f.rep.Draws++
	switch {
	case !Informative(rewards, f.tol):
		f.rep.Flat++
		return false
	case len(f.kept) >= f.quota:
		f.rep.Surplus++
		return false
	}
	f.kept = append(f.kept, i)
	f.rep.Kept++
	return true
}

// Full reports whether the batch holds its quota.
func (f *Filler) Full() bool { return len(f.kept) >= f.quota }

// Kept returns the indices (in offer order) of the kept groups. The slice
// is the caller's.
func (f *Filler) Kept() []int { return append([]int(nil), f.kept...) }

// Report returns the counts so far; Short is set when the batch is not full.
func (f *Filler) Report() Report {
	r := f.rep
	r.Short = !f.Full()
	return r
}

// Err returns nil when the batch is full, and otherwise an error wrapping
// ErrShortBatch that says how far it got.
func (f *Filler) Err() error {
	if f.Full() {
		return nil
	}
	return fmt.Errorf("%w: %d of %d informative groups after %d draws (%d flat)",
		ErrShortBatch, len(f.kept), f.quota, f.rep.Draws, f.rep.Flat)
}

// Select keeps the first quota informative groups of already-drawn groups
// (the paper's 277 → 256) and reports the flat and surplus ones. When fewer
// than quota are informative it returns them all with Report.Short set and
// an error wrapping ErrShortBatch; the indices are valid either way.
func Select(groups [][]float64, quota int, tol float64) ([]int, Report, error) {
	f := NewFiller(quota, tol)
	for _, g := range groups {
		f.Offer(g)
	}
	return f.Kept(), f.Report(), f.Err()
}

// Fill draws groups one at a time with draw until the batch holds quota
// informative groups, at most maxDraws draws, or draw returns ok = false
// (no more groups; the returned slice is then ignored). Kept indices count
// draws from 0. It never draws more than needed, so Report.Surplus is 0;
// use Select or a Filler for over-sampled batches. When the quota is not
// met it returns what it has, Report.Short set, and an error wrapping
// ErrShortBatch. Fill calls draw from the calling goroutine only.
func Fill(quota, maxDraws int, tol float64, draw func() ([]float64, bool)) ([]int, Report, error) {
	f := NewFiller(quota, tol)
	exhausted := false
	for !f.Full() && f.rep.Draws < maxDraws {
		g, ok := draw()
		if !ok {
			exhausted = true
			break
		}
		f.Offer(g)
	}
	rep := f.Report()
	rep.Exhausted = exhausted
	err := f.Err()
	if err != nil && exhausted {
		err = fmt.Errorf("%w (draw exhausted)", err)
	}
	return f.Kept(), rep, err
}
