package dapo

import "math"

// InverseVarianceWeights returns w_k = (1/v_k) / Σ_j (1/v_j) (METHOD.md §2
// Inverse-Variance Denoising: the minimum-variance unbiased combination of
// independent unbiased estimates). Weights sum to 1. Edge cases: if some
// variances are 0, those estimates share the weight equally (an exact
// estimate dominates any noisy one); +Inf variances get weight 0; if all
// are +Inf, the weights are equal. A negative or NaN variance panics; an
// empty input returns an empty slice.
func InverseVarianceWeights(variances []float64) []float64 {
	w := make([]float64, len(variances))
	zeros, finiteN := 0, 0
	for _, v := range variances {
		if math.IsNaN(v) || v < 0 {
			panic("dapo: InverseVarianceWeights: variance is negative or NaN")
		}
		if v == 0 {
			zeros++
		}
		if !math.IsInf(v, 1) {
			finiteN++
		}
	}
	switch {
	case len(variances) == 0:
		return w
	case zeros > 0:
		for i, v := range variances {
			if v == 0 {
				w[i] = 1 / float64(zeros)
			}
		}
		return w
	case finiteN == 0:
		for i := range w {
			w[i] = 1 / float64(len(w))
		}
		return w
	}
	var sum float64
	for i, v := range variances {
		w[i] = 1 / v // 0 for +Inf
		sum += w[i]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

// Combine returns the inverse-variance combination Σ_k w_k·x_k of equally
// long estimates x_k (e.g. the policy gradient from anchor groups with
// real rewards and the one from world-model groups), element by element,
// with w = InverseVarianceWeights(variances) (METHOD.md §2). For two
// estimates this is (x_a/v_a + x_w/v_w) / (1/v_a + 1/v_w), whose variance
// 1/(1/v_a + 1/v_w) is below both. Mismatched lengths panic.
//
// WMRL applies the same idea per group rather than per estimate: with
// V_WM = (1 + c·D)·V_E, anchor-group advantages are multiplied by
// 1 + c·D relative to world-model groups; calibrate.Weighter tracks that
// weight and ScaleAdvantages applies it.
func Combine(estimates [][]float64, variances []float64) []float64 {
	if len(estimates) != len(variances) {
		panic("dapo: Combine: len(estimates) != len(variances)")
	}
	if len(estimates) == 0 {
		return nil
	}
	w := InverseVarianceWeights(variances)
	out := make([]float64, len(estimates[0]))
	for k, x := range estimates {
		if len(x) != len(out) {
			panic("dapo: Combine: estimates differ in length")
		}
		if w[k] == 0 {
			continue
		}
		for i, v := range x {
			out[i] += w[k] * v
		}
	}
	return out
}

// ScaleAdvantages multiplies advantages in place by weight: WMRL's
// up-weighting of anchor groups (METHOD.md §2), with weight from
// calibrate.Weighter.Weight.
func ScaleAdvantages(advantages []float64, weight float64) {
	for i := range advantages {
		advantages[i] *= weight
	}
}
