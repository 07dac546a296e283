package calibrate

import (
	"math"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// DisagreementFloor is the variance of the real scores below which a group
// has no ranking information and Disagreement is undefined: 1e-9, library
// choice taken from WMRL's code (METHOD.md §2 gives no number).
const DisagreementFloor = 1e-9

// AnchorCount returns how many of groups are anchor groups, scored both by
// the world model and by real execution (METHOD.md §2: about 10%):
// max(min, round(fraction·groups)) with round half to even, then at most
// groups, then at most max when max > 0 (max 0 = no cap). groups ≤ 0
// gives 0; the result is never negative. The product is rounded as the
// decimal it stands for: a float product within a relative 1e-9 of a half
// (0.7·45 = 31.499999999999996) counts as that half (31.5 → 32).
func AnchorCount(groups int, fraction float64, min, max int) int {
	if groups <= 0 {
		return 0
	}
	want := math.RoundToEven(snapHalf(fraction * float64(groups)))
	if math.IsNaN(want) {
		want = 0
	}
	want = math.Max(want, float64(min))
	want = math.Min(want, float64(groups))
	if max > 0 {
		want = math.Min(want, float64(max))
	}
	return int(math.Max(want, 0))
}

// snapHalf returns k + 0.5 when p is within a relative 1e-9 of it, and p
// otherwise, so float residue does not decide a round-half-to-even tie.
func snapHalf(p float64) float64 {
	h := math.Floor(p) + 0.5
	if math.Abs(p-h) <= 1e-9*math.Max(1, math.Abs(p)) {
		return h
	}
	return p
}

// Disagreement returns the normalised within-group disagreement between
// (calibrated) world-model scores d and real scores s of one anchor group
// (METHOD.md §2 Inverse-Variance Denoising):
//
//	D = mean(((d − d̄) − (s − s̄))²) / var(s)
//
// with the population variance. It is centred because group-relative
// advantages ignore a constant offset, and normalised so groups of
// different spread compare. ok is false (D undefined) when var(s) <
// DisagreementFloor, the group is empty, or a value is not finite.
// Mismatched lengths panic.
func Disagreement(pred, real []float64) (float64, bool) {
	if len(pred) != len(real) {
		panic("calibrate: Disagreement: len(pred) != len(real)")
	}
	n := float64(len(pred))
	if n == 0 {
		return 0, false
	}
	var md, ms float64
	for i := range pred {
		if !stat.Finite(pred[i]) || !stat.Finite(real[i]) {
			return 0, false
		}
		md += pred[i]
		ms += real[i]
	}
	md, ms = md/n, ms/n
	var vs, e float64
	for i := range pred {
		ds := real[i] - ms
		vs += ds * ds
		r := (pred[i] - md) - ds
		e += r * r
	}
	vs /= n
	if vs < DisagreementFloor {
		return 0, false
	}
	return e / n / vs, true
}

// Weighter turns measured disagreement into the weight of anchor-group
// advantages relative to world-model groups (METHOD.md §2 Inverse-Variance
// Denoising). With V_WM = (1 + c·D)·V_E, the inverse-variance weight of an
// anchor group is 1 + c·D. METHOD.md §2 gives only that principle; the
// rest follows WMRL's code (library choice):
//
//   - D is an EWMA of the observed group disagreements with
//     α = 1 − 0.5^(1/halfLife) (halfLife < 1 counts as 1); the first
//     observation initialises it.
//   - After each observation, if c is not yet set, at least warmup
//     observations have been made and the EWMA D exceeds 1e-12, c is
//     frozen at (target − 1)/D, using that EWMA value, so the weight is
//     exactly target at that moment.
//   - Weight() = clip(1 + c·D_now, 1, maxWeight) with the current EWMA, or
//     exactly 1 before c is set. The weight thus follows how disagreement
//     moves after warm-up, not its absolute scale.
//
// Not safe for concurrent use.
type Weighter struct {
	alpha             float64
	warmup            int
	maxWeight, target float64
	d, c              float64
	n                 int
	frozen            bool
}

// NewWeighter returns a weighter with the given half-life (in
// observations), warm-up, maximum weight and target weight.
// DefaultWMRLConfig gives 64, 32, 4 and 2: library choice taken from
// WMRL's code (METHOD.md §2 gives no numbers).
func NewWeighter(halfLife, warmup int, maxWeight, target float64) *Weighter {
	return &Weighter{
		alpha:     1 - math.Pow(0.5, 1/float64(max(halfLife, 1))),
		warmup:    warmup,
		maxWeight: maxWeight,
		target:    target,
	}
}

// Observe folds one group's disagreement into the EWMA and freezes c when
// due. NaN, infinite or negative values are ignored (a degenerate group
// must not drag the estimate toward zero).
func (w *Weighter) Observe(d float64) {
	if !stat.Finite(d) || d < 0 {
		return
	}
	if w.n == 0 {
		w.d = d
	} else {
		w.d = (1-w.alpha)*w.d + w.alpha*d
	}
	w.n++
	if !w.frozen && w.n >= w.warmup && w.d > 1e-12 {
		w.c = (w.target - 1) / w.d
		w.frozen = true
	}
}

// ObserveGroup measures one anchor group with Disagreement and observes
// it; degenerate groups are skipped. It reports whether it observed.
func (w *Weighter) ObserveGroup(pred, real []float64) bool {
	d, ok := Disagreement(pred, real)
	if ok {
		w.Observe(d)
	}
	return ok
}

// Weight returns the current anchor weight, 1 before c is frozen.
func (w *Weighter) Weight() float64 {
	if !w.frozen {
		return 1
	}
	return math.Min(w.maxWeight, math.Max(1, 1+w.c*w.d))
}

// Disagreement returns the EWMA of observed disagreement (0 before any).
func (w *Weighter) Disagreement() float64 { return w.d }

// Scale returns the frozen c and whether it is set.
func (w *Weighter) Scale() (float64, bool) { return w.c, w.frozen }

// Observations returns the number of disagreements observed.
func (w *Weighter) Observations() int { return w.n }
