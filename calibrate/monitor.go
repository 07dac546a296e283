package calibrate

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// The monitors compare predicted and real rewards of the same proposals,
// given as groups: pred[g][i] and real[g][i] are the world model's and the
// real (normalised) reward of proposal i of group g, where a group is the
// proposals of one research state (METHOD.md §1 On-policy calibration:
// reliability). pred and real must have the same shape, or the monitors
// panic. A pair with a NaN or infinite side is left out.

// Bias is the decomposition J̄ = Δ_M + Ĵ_M of METHOD.md §1 On-policy
// calibration, estimated over the monitored proposals.
type Bias struct {
	JHat  float64 // Ĵ_M: mean predicted reward (what RL optimises)
	JBar  float64 // J̄: mean real reward
	Delta float64 // Δ_M = J̄ − Ĵ_M: the bias RL cannot see
	N     int     // finite pairs used
}

// Gap returns Ĵ_M − J̄ = −Δ_M, the mean predicted-minus-real reward gap.
func (b Bias) Gap() float64 { return -b.Delta }

// Decompose returns the bias decomposition over all finite pairs; the
// means are NaN when there is none.
func Decompose(pred, real [][]float64) Bias {
	checkShape("Decompose", pred, real)
	var sp, sr float64
	var n int
	for g := range pred {
		for i := range pred[g] {
			if stat.Finite(pred[g][i]) && stat.Finite(real[g][i]) {
				sp += pred[g][i]
				sr += real[g][i]
				n++
			}
		}
	}
	if n == 0 {
		return Bias{JHat: math.NaN(), JBar: math.NaN(), Delta: math.NaN()}
	}
	jh, jb := sp/float64(n), sr/float64(n)
	return Bias{JHat: jh, JBar: jb, Delta: jb - jh, N: n}
}

// Gap returns the mean predicted-minus-real reward gap, mean(pred − real)
// over finite pairs (NaN when there is none). The paper reports ≈ 2.0 for
// a static world model at step 96 and 0.17 for the calibrated one at 128.
func Gap(pred, real [][]float64) float64 { return Decompose(pred, real).Gap() }

// AdvantageCosine returns the cosine between the predicted and the real
// group-relative advantages: within each group both are mean-centred (over
// the group's finite pairs), then all groups are concatenated into two
// vectors and cos = ⟨a, b⟩ / (‖a‖·‖b‖). It is NaN when undefined (no
// group with two finite pairs, or either vector is zero, as when every
// group is flat). The paper reports 0.50–0.71 for a calibrated world model.
func AdvantageCosine(pred, real [][]float64) float64 {
	checkShape("AdvantageCosine", pred, real)
	var dot, na, nb float64
	var p, r []float64
	for g := range pred {
		p, r = p[:0], r[:0]
		for i := range pred[g] {
			if stat.Finite(pred[g][i]) && stat.Finite(real[g][i]) {
				p = append(p, pred[g][i])
				r = append(r, real[g][i])
			}
		}
		if len(p) < 2 {
			continue
		}
		mp, mr := stat.Mean(p), stat.Mean(r)
		for i := range p {
			a, b := p[i]-mp, r[i]-mr
			dot += a * b
			na += a * a
			nb += b * b
		}
	}
	if na == 0 || nb == 0 {
		return math.NaN()
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}

// PairwiseAccuracy returns the within-state ranking accuracy: over every
// pair (i, j) of proposals of the same group whose real rewards differ,
// the fraction whose predicted rewards are ordered the same way. A pair
// with equal predicted rewards counts one half (a coin flip); pairs with
// equal real rewards carry no ranking and are left out. It is NaN when no
// pair qualifies. Chance is 0.5; the paper reports 0.61–0.69 calibrated and
// 0.37 for a static world model.
func PairwiseAccuracy(pred, real [][]float64) float64 {
	checkShape("PairwiseAccuracy", pred, real)
	return pairwise(pred, real, 0)
}

// PairwiseAccuracyGap is PairwiseAccuracy over the pairs whose real
// rewards differ by at least gap (≥ 0): pairs closer than the noise of a
// real measurement carry no ranking either. PairwiseAccuracyGap(p, r, 0)
// equals PairwiseAccuracy(p, r).
func PairwiseAccuracyGap(pred, real [][]float64, gap float64) float64 {
	acc, _ := pairwiseChecked("PairwiseAccuracyGap", pred, real, gap)
	return acc
}

// PairwiseAccuracyPairs is PairwiseAccuracyGap with the number of pairs it
// counted (0, with NaN accuracy, when none qualifies): how much evidence
// an accuracy rests on.
func PairwiseAccuracyPairs(pred, real [][]float64, gap float64) (float64, int) {
	return pairwiseChecked("PairwiseAccuracyPairs", pred, real, gap)
}

func pairwiseChecked(name string, pred, real [][]float64, gap float64) (float64, int) {
	checkShape(name, pred, real)
	if !(gap >= 0) {
		panic(fmt.Sprintf("calibrate: %s: gap %g, want ≥ 0", name, gap))
	}
	return pairwiseN(pred, real, gap)
}

func pairwise(pred, real [][]float64, gap float64) float64 {
	acc, _ := pairwiseN(pred, real, gap)
	return acc
}

func pairwiseN(pred, real [][]float64, gap float64) (float64, int) {
	var score float64
	var pairs int
	for g := range pred {
		p, r := pred[g], real[g]
		for i := range p {
			if !stat.Finite(p[i]) || !stat.Finite(r[i]) {
				continue
			}
			for j := i + 1; j < len(p); j++ {
				if !stat.Finite(p[j]) || !stat.Finite(r[j]) || r[i] == r[j] || math.Abs(r[i]-r[j]) < gap {
					continue
				}
				pairs++
				switch {
				case p[i] == p[j]:
					score += 0.5
				case (p[i] < p[j]) == (r[i] < r[j]):
					score++
				}
			}
		}
	}
	if pairs == 0 {
		return math.NaN(), 0
	}
	return score / float64(pairs), pairs
}

// Monitors bundles the reliability monitors of one set of groups.
type Monitors struct {
	Bias     Bias
	Cosine   float64 // AdvantageCosine
	Accuracy float64 // PairwiseAccuracy
}

// Monitor computes every reliability monitor over the same groups.
func Monitor(pred, real [][]float64) Monitors {
	return Monitors{Bias: Decompose(pred, real), Cosine: AdvantageCosine(pred, real), Accuracy: PairwiseAccuracy(pred, real)}
}

// Share is one mechanism direction's share of sampled proposals.
type Share struct {
	Mechanism string
	Count     int
	Fraction  float64
}

// MechanismShare returns each mechanism direction's share of the sampled
// proposals (one entry per proposal in mechanisms), most frequent first,
// ties by name. The paper's case: one optimiser change fell from 79% to
// 8% of training proposals after the first calibration.
func MechanismShare(mechanisms []string) []Share {
	counts := map[string]int{}
	for _, m := range mechanisms {
		counts[m]++
	}
	out := make([]Share, 0, len(counts))
	for m, c := range counts {
		out = append(out, Share{Mechanism: m, Count: c, Fraction: float64(c) / float64(len(mechanisms))})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Mechanism, b.Mechanism)
	})
	return out
}

func checkShape(name string, pred, real [][]float64) {
	if len(pred) != len(real) {
		panic("calibrate: " + name + ": pred and real have different numbers of groups")
	}
	for g := range pred {
		if len(pred[g]) != len(real[g]) {
			panic("calibrate: " + name + ": a group of pred and real differ in length")
		}
	}
}
