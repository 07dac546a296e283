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
// taken as 0). An empty group returns an empty slice. Non-finite rewards
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
	for i, x := range r {
		dst[i] = (x - mean) / d
	}
}

// Informative reports whether a group carries signal for the policy
// gradient: max(R) − min(R) > tol (METHOD.md §1 Policy optimisation,
// dynamic sampling drops groups whose rewards are all equal). The tolerance
// is absolute, so float residue such as [0.7, 7·0.1, 0.7] counts as flat
// for any tol ≥ 1e-15. Groups with fewer than two rewards, or with a NaN
// reward, are not informative.
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
	return hi-lo > tol
}
