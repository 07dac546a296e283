package dapo

import "math"

// Advantages returns the group-relative advantage of each reward of one
// group (METHOD.md §1 Policy optimisation):
//
//   - MeanCentered: Â_i = R_i − mean(R) (LM2LM: keeps differences across
//     groups; eps is unused).
//   - ZScore: (R_i − mean) / (s + eps) with s the n−1 (sample) std, as verl
//     and TRL.
//   - ZScorePopulation: (R_i − mean) / (σ + eps) with σ the population std,
//     as WMRL.
//
// A single reward has advantage 0 under every norm (its sample std is
// taken as 0), and so does every reward of a flat group when std + eps is
// 0 (eps 0). An empty group returns an empty slice. Non-finite rewards
// propagate. An unknown norm panics.
func Advantages(rewards []float64, norm Norm, eps float64) []float64 {
	out := make([]float64, len(rewards))
	advantagesInto(out, rewards, norm, eps)
	return out
}

// AdvantagesInto is Advantages writing into dst, which must have the
// length of rewards; dst may alias rewards.
func AdvantagesInto(dst, rewards []float64, norm Norm, eps float64) {
	if len(dst) != len(rewards) {
		panic("dapo: AdvantagesInto: len(dst) != len(rewards)")
	}
	advantagesInto(dst, rewards, norm, eps)
}

func advantagesInto(dst, r []float64, norm Norm, eps float64) {
	n := len(r)
	if n == 0 {
		return
	}
	var sum float64
	for _, x := range r {
		sum += x
	}
	mean := sum / float64(n)
	if norm == MeanCentered {
		for i, x := range r {
			dst[i] = x - mean
		}
		return
	}
	var ss float64
	for _, x := range r {
		ss += (x - mean) * (x - mean)
	}
	var std float64
	switch norm {
	case ZScore:
		if n > 1 {
			std = math.Sqrt(ss / float64(n-1))
		}
	case ZScorePopulation:
		std = math.Sqrt(ss / float64(n))
	default:
		panic("dapo: Advantages: unknown Norm " + norm.String())
	}
	d := std + eps
	if d == 0 {
		// A flat group with eps 0: no signal, not 0/0 = NaN.
		clear(dst)
		return
	}
	for i, x := range r {
		dst[i] = (x - mean) / d
	}
}

// Informative reports whether a group carries signal for the policy
// gradient: max(R) − min(R) > tol (METHOD.md §1 Policy optimisation,
// dynamic sampling drops groups whose rewards are all equal). The tolerance
// is absolute. Whatever tol is (even 0), a spread of at most
// ResidueUlps·ε·max(|min R|, |max R|) (ε the float64 machine epsilon) is
// float residue and counts as flat, so [0.7, 7·0.1, 0.7] is flat for every
// tol ≥ 0. Groups with fewer than two rewards, or with a NaN reward, are
// not informative.
func Informative(rewards []float64, tol float64) bool {
	if len(rewards) < 2 {
		return false
	}
	lo, hi := rewards[0], rewards[0]
	for _, x := range rewards {
		if math.IsNaN(x) {
			return false
		}
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	spread := hi - lo
	residue := ResidueUlps * epsilon * math.Max(math.Abs(lo), math.Abs(hi))
	return spread > tol && (math.IsInf(spread, 1) || spread > residue)
}

// ResidueUlps is how many machine epsilons of relative spread Informative
// always treats as float residue (library choice: sums and products of a
// few terms stay well inside it; any real reward difference is far above).
const ResidueUlps = 64

// epsilon is the float64 machine epsilon, 2⁻⁵².
const epsilon = 0x1p-52
