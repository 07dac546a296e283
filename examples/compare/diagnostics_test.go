package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/examples/compare/internal/probe"
)

// judgementRows averages over seeds, a NaN dependence left out of its mean.
func TestJudgementRows(t *testing.T) {
	rs := []Result{
		{Method: "m", Judgement: []evalstat.Judgement{{States: 4, BestRank: 2, ChanceRank: 3, BestMass: 0.2, PolicySpread: 0.1, BestSpread: 0.5, Dependence: 0.2},
			{Region: "starved", States: 1, BestRank: 1, ChanceRank: 3, BestMass: 0.5, Dependence: math.NaN()}}},
		{Method: "m", Judgement: []evalstat.Judgement{{States: 4, BestRank: 4, ChanceRank: 3, BestMass: 0.4, PolicySpread: 0.3, BestSpread: 0.5, Dependence: 0.6},
			{Region: "starved", States: 2, BestRank: 3, ChanceRank: 3, BestMass: 0.1, PolicySpread: 0.2, BestSpread: 0.5, Dependence: 0.4}}},
	}
	rows := judgementRows(rs)
	require.Len(t, rows, 2)
	require.Equal(t, JudgementRow{Method: "m", Part: "all", Seeds: 2, States: 8, BestRank: 3, ChanceRank: 3, BestMass: 0.30000000000000004,
		PolicySpread: 0.2, BestSpread: 0.5, Dependence: 0.4}, rows[0])
	require.Equal(t, "starved", rows[1].Part)
	require.InDelta(t, 0.4, rows[1].Dependence, 1e-12, "the NaN seed is left out")
	require.True(t, slices.ContainsFunc(rows, func(r JudgementRow) bool { return r.States == 3 }))
}

// Within a part the rows follow the methods' row order, whatever order the
// results came in.
func TestJudgementRowsInMethodOrder(t *testing.T) {
	j := []evalstat.Judgement{{States: 1, BestRank: 1, ChanceRank: 2}, {Region: "in-distribution", States: 1, BestRank: 1, ChanceRank: 2}}
	rows := judgementRows([]Result{{Method: "lm2lm", Judgement: j}, {Method: "rerank", Judgement: j}, {Method: "base", Judgement: j}})
	var got []string
	for _, r := range rows {
		got = append(got, r.Part+" "+r.Method)
	}
	require.Equal(t, []string{"all base", "all rerank", "all lm2lm", "in-distribution base", "in-distribution rerank", "in-distribution lm2lm"}, got)
}

// The references' table: one row per reference and part; none without
// -landscape.
func TestJudgementRefTable(t *testing.T) {
	var b strings.Builder
	judgementRefTable(&b, []probe.Reference{{Reference: probe.RefNearest, Part: "all", Tasks: 3, BestRank: 7.0 / 3, ChanceRank: 2}})
	require.Contains(t, b.String(), "| nearest task | all | 3 | 2.3 (2.0) |")
	b.Reset()
	judgementRefTable(&b, nil)
	require.Empty(t, b.String())
}

func TestLocalityRows(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	rs := []Result{
		{Method: "a", Locality: []probe.Locality{
			{Step: 16, Classes: []probe.LocalityClass{{Class: "calibrated", Pairs: 1, MeanAbsShift: f(2)}, {Class: "same task", MeanAbsShift: nil}, {Class: "same mechanism", Pairs: 1, MeanAbsShift: f(1)}, {Class: "other", Pairs: 1, MeanAbsShift: f(0.5)}}, GapBefore: f(3), GapAfter: f(1)},
			{Step: 40, Classes: []probe.LocalityClass{{Class: "calibrated", Pairs: 1, MeanAbsShift: f(4)}, {Class: "same task", Pairs: 1, MeanAbsShift: f(1)}, {Class: "same mechanism", Pairs: 1, MeanAbsShift: f(1)}, {Class: "other", Pairs: 1, MeanAbsShift: f(1.5)}}, GapBefore: f(1), GapAfter: f(0)},
		}, Probes: []CalibrationResult{{Accuracy: f(0.6), AccuracyBefore: f(0.5)}, {Accuracy: f(0.7)}}},
		{Method: "static"},
	}
	rows := localityRows(rs)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, 2, r.Calibrations)
	require.Equal(t, []float64{3, 1, 1, 1}, []float64{*r.Shift[0], *r.Shift[1], *r.Shift[2], *r.Shift[3]})
	require.Equal(t, 2.0, *r.GapBefore)
	require.Equal(t, 0.5, *r.GapAfter)
	require.Equal(t, 0.5, *r.AccuracyBefore)
	require.Equal(t, 0.6, *r.Accuracy)
	require.Equal(t, 1, r.AccuracyProbes)
	var b strings.Builder
	localityTable(&b, rows)
	require.Contains(t, b.String(), "| a | 2 | 3.00 | 1.00 | 1.00 | 1.00 | +2.00 → +0.50 | 0.500 → 0.600 (1) |")
}

// teacherRows averages by method and step over seeds: methods in order of
// first appearance, steps increasing, Spearman over the seeds that have it.
func TestTeacherRows(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	rk := func(best float64, rho *float64, top float64) probe.Ranking {
		return probe.Ranking{BestRank: best, Spearman: rho, TopGain: top}
	}
	rs := []Result{
		{Method: "lm2lm", Seed: 1, Teacher: []probe.Teacher{
			{Step: 40, World: rk(12, f(0.2), 3), World0: rk(10, f(0.4), 5), Policy: rk(15, nil, 1)},
			{Step: 16, World: rk(10, f(0.4), 5), World0: rk(10, f(0.4), 5), Policy: rk(14, f(0.1), 2)},
		}},
		{Method: "static", Seed: 1, Teacher: []probe.Teacher{{Step: 16, World: rk(9, f(0.5), 4), World0: rk(9, f(0.5), 4), Policy: rk(13, f(0.2), 2)}}},
		{Method: "lm2lm", Seed: 2, Teacher: []probe.Teacher{{Step: 40, World: rk(14, f(0.0), 1), World0: rk(12, f(0.2), 3), Policy: rk(17, f(0.3), 3)}}},
		{Method: "base"},
	}
	rows := teacherRows(rs)
	require.Len(t, rows, 3)
	require.Equal(t, []string{"lm2lm", "lm2lm", "static"}, []string{rows[0].Method, rows[1].Method, rows[2].Method})
	require.Equal(t, []int{16, 40, 16}, []int{rows[0].Step, rows[1].Step, rows[2].Step})
	r := rows[1]
	require.Equal(t, 2, r.Seeds)
	require.Equal(t, 13.0, r.World.BestRank)
	require.InDelta(t, 0.1, *r.World.Spearman, 1e-12)
	require.Equal(t, 2.0, r.World.TopGain)
	require.Equal(t, 16.0, r.Policy.BestRank)
	require.Equal(t, 0.3, *r.Policy.Spearman, "only seed 2 has a correlation")
	var b strings.Builder
	teacherTable(&b, rows)
	require.Contains(t, b.String(), "| lm2lm | 40 | 2 | 13.0 / 0.100 / +2.00 | 11.0 / 0.300 / +4.00 | 16.0 / 0.300 / +2.00 |")
	b.Reset()
	teacherTable(&b, nil)
	require.Empty(t, b.String())
}
