package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSpearman(t *testing.T) {
	// Ranks (1,2,3,4) vs (1,3,2,4): d² sum = 2, ρ = 1 − 6·2/(4·15) = 0.8.
	require.InDelta(t, 0.8, spearman([]float64{1, 2, 3, 4}, []float64{10, 30, 20, 40}), 1e-12)
	require.InDelta(t, -1, spearman([]float64{1, 2, 3}, []float64{3, 2, 1}), 1e-12)
	require.InDelta(t, 1, spearman([]float64{math.Inf(-1), 0, 1}, []float64{-5, 0, 5}), 1e-12)
	require.Equal(t, 0.0, spearman([]float64{1, 1}, []float64{1, 2}))
}

func TestPairwise(t *testing.T) {
	// Group a: pairs (0,1) right, (0,2) wrong, (1,2) tie in prediction → ½;
	// group b: one pair right; the cross-group pairs do not count: 2.5/4.
	pred := []float64{1, 2, 2, 0, 1}
	real := []float64{1, 3, 0, 5, 6}
	group := []string{"a", "a", "a", "b", "b"}
	require.InDelta(t, 2.5/4, pairwise(pred, real, group), 1e-12)
	require.True(t, math.IsNaN(pairwise([]float64{1}, []float64{1}, []string{"a"})))
}
