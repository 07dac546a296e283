package verdict

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/reward"
)

func TestAggregate(t *testing.T) {
	// Library choice (METHOD.md §2 says only that the checks aggregate):
	// the lowest confident failing rung decides; else valid with q the
	// confidence-weighted mean of the valid predictions' bucket values
	// (0.125, 0.375, 0.625, 0.875).
	pr := func(s reward.Status, b reward.Bucket, c float64) Prediction {
		return Prediction{Status: s, Quality: b, Confidence: c}
	}
	v, rt, ns, se := reward.ValidSubmission, reward.RuntimeError, reward.RanNoSubmission, reward.SyntaxError
	tests := []struct {
		name    string
		ps      []Prediction
		status  reward.Status
		q       float64
		score   float64
		low     float64
		high    float64
		decider int
	}{
		{"all valid, mid", []Prediction{pr(v, reward.Mid, 1), pr(v, reward.Mid, 0.5)}, v, 0.625, 0.8125, 0.8125, 0.8125, -1},
		// q = (0.25·0.875 + 0.75·0.125)/1 = 0.3125; score 0.5 + 0.15625.
		{"weighted quality", []Prediction{pr(v, reward.High, 0.25), pr(v, reward.Low, 0.75)}, v, 0.3125, 0.65625, 0.5625, 0.9375, -1},
		{"unsure failure ignored", []Prediction{pr(v, reward.High, 1), pr(rt, reward.Low, 0.4)}, v, 0.875, 0.9375, 0.1, 0.9375, -1},
		{"confident failure decides", []Prediction{pr(v, reward.High, 1), pr(rt, reward.Low, 0.5)}, rt, 0, 0.1, 0.1, 0.9375, 1},
		{"lowest rung wins", []Prediction{pr(ns, reward.Low, 0.9), pr(se, reward.Low, 0.6), pr(rt, reward.Low, 1)}, se, 0, 0, 0, 0.2, 1},
		{"same rung: higher confidence", []Prediction{pr(rt, reward.Low, 0.6), pr(rt, reward.Low, 0.9)}, rt, 0, 0.1, 0.1, 0.1, 1},
		{"zero confidences: plain mean", []Prediction{pr(v, reward.Low, 0), pr(v, reward.High, 0)}, v, 0.5, 0.75, 0.5625, 0.9375, -1},
		{"no valid, failures unsure: all buckets", []Prediction{pr(rt, reward.Fair, 0.1), pr(ns, reward.Mid, 0.2)}, v, 0.5, 0.75, 0.1, 0.75, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Aggregate(Verdict{Predictions: tt.ps}, reward.DefaultQualityTable(), 0.5)
			require.NoError(t, err)
			require.Equal(t, tt.status, o.Status)
			require.Equal(t, tt.decider, o.Decider)
			require.InDelta(t, tt.q, o.Q, 1e-12)
			require.InDelta(t, tt.score, o.Score, 1e-12)
			require.InDelta(t, tt.low, o.Low, 1e-12)
			require.InDelta(t, tt.high, o.High, 1e-12)
		})
	}
	_, err := Aggregate(Verdict{}, reward.DefaultQualityTable(), 0.5)
	require.Error(t, err)
	_, err = Aggregate(Verdict{Predictions: []Prediction{pr("timeout", reward.Low, 1)}}, reward.DefaultQualityTable(), 0.5)
	require.Error(t, err)
}
