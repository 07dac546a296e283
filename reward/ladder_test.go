package reward

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestLadderScore(t *testing.T) {
	// METHOD.md §2 (the WMRL ladder): syntax error 0.0, runtime error 0.1,
	// ran without a submission 0.2, valid 0.5 + 0.5·q.
	tests := []struct {
		status Status
		q      float64
		want   float64
	}{
		{Malformed, 0.9, 0}, // library choice: scores like a syntax error; q ignored
		{SyntaxError, 0.9, 0},
		{RuntimeError, 0.9, 0.1},
		{RanNoSubmission, 0.9, 0.2},
		{ValidSubmission, 0, 0.5},
		{ValidSubmission, 0.25, 0.625},
		{ValidSubmission, 0.5, 0.75},
		{ValidSubmission, 0.875, 0.9375},
		{ValidSubmission, 1, 1},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			got, err := LadderScore(tt.status, tt.q)
			require.NoError(t, err)
			require.InDelta(t, tt.want, got, 1e-15)
		})
	}
}

func TestLadderScoreErrors(t *testing.T) {
	for _, s := range []Status{"", "valid ", "VALID", "timeout", "runtime_error"} {
		_, err := LadderScore(s, 0.5)
		require.ErrorIs(t, err, ErrStatus, "%q", s)
		require.False(t, s.Valid())
		require.Equal(t, -1, s.Rank())
	}
	for _, q := range []float64{-0.01, 1.01, math.NaN(), math.Inf(1)} {
		_, err := LadderScore(ValidSubmission, q)
		require.ErrorIs(t, err, ErrQuality, "q = %g", q)
	}
	// q is read only for a valid submission.
	got, err := LadderScore(RuntimeError, math.NaN())
	require.NoError(t, err)
	require.Equal(t, 0.1, got)
}

func TestLadderMonotone(t *testing.T) {
	// Property: the score lies in [0, 1], rises with the rung, and every
	// valid submission outscores every failure.
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SampledFrom(Statuses()).Draw(t, "a")
		b := rapid.SampledFrom(Statuses()).Draw(t, "b")
		qa := rapid.Float64Range(0, 1).Draw(t, "qa")
		qb := rapid.Float64Range(0, 1).Draw(t, "qb")
		sa, err := LadderScore(a, qa)
		require.NoError(t, err)
		sb, err := LadderScore(b, qb)
		require.NoError(t, err)
		require.True(t, sa >= 0 && sa <= 1)
		if a.Rank() < b.Rank() {
			require.Less(t, sa, sb)
		}
		if a == ValidSubmission && b == ValidSubmission && qa < qb {
			// 0.5 + 0.5·q rounds: qualities closer than the spacing of
			// floats near 1 may map to one score, never to a lower one.
			require.LessOrEqual(t, sa, sb)
			if qb-qa > 1e-15 {
				require.Less(t, sa, sb)
			}
		}
	})
}

func TestPercentile(t *testing.T) {
	board := []float64{0.6, 0.8, 0.9, 0.95} // accuracies, higher is better
	tests := []struct {
		name   string
		score  float64
		board  []float64
		higher bool
		want   float64
	}{
		{"below all", 0.5, board, true, 0},
		{"beats two", 0.85, board, true, 0.5},
		{"ties one, beats one", 0.8, board, true, 0.375}, // (1 + 0.5)/4
		{"above all", 0.99, board, true, 1},
		{"lower is better", 0.85, board, false, 0.5}, // beats 0.9 and 0.95
		{"lower, beats all", 0.1, board, false, 1},
		{"order does not matter", 0.85, []float64{0.95, 0.6, 0.9, 0.8}, true, 0.5},
		{"empty board", 0.3, nil, true, 0.5},
		{"NaN entry skipped", 0.7, []float64{0.6, math.NaN(), 0.8}, true, 0.5},
		{"NaN score", math.NaN(), board, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, Percentile(tt.score, tt.board, tt.higher), 1e-15)
		})
	}
}

func TestQualityTable(t *testing.T) {
	// Library choice (METHOD.md §2 gives no mapping): quarter midpoints.
	tab := DefaultQualityTable()
	require.NoError(t, tab.Validate())
	want := map[Bucket]float64{Low: 0.125, Fair: 0.375, Mid: 0.625, High: 0.875}
	for b, q := range want {
		got, err := tab.Quality(b)
		require.NoError(t, err)
		require.Equal(t, q, got)
		require.Equal(t, b, BucketOf(q), "BucketOf inverts the table at %g", q)
	}
	_, err := tab.Quality("great")
	require.ErrorIs(t, err, ErrBucket)

	for _, c := range []struct {
		q    float64
		want Bucket
	}{{-1, Low}, {0, Low}, {0.2499, Low}, {0.25, Fair}, {0.5, Mid}, {0.75, High}, {1, High}, {2, High}, {math.NaN(), Low}} {
		require.Equal(t, c.want, BucketOf(c.q), "q = %g", c.q)
	}

	for _, bad := range []QualityTable{
		{Low: -0.1, Fair: 0.3, Mid: 0.6, High: 0.9},
		{Low: 0.1, Fair: 0.3, Mid: 0.6, High: 1.1},
		{Low: 0.5, Fair: 0.3, Mid: 0.6, High: 0.9},
		{Low: 0.1, Fair: math.NaN(), Mid: 0.6, High: 0.9},
	} {
		require.ErrorIs(t, bad.Validate(), ErrConfig, "%+v", bad)
	}
	require.NoError(t, QualityTable{High: 1}.Validate() /* 0, 0, 0, 1 */)
}
