package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The hand-made landscape: 3 tasks × 5 proposals, gains in σ_e units on
// seeds 1 and 2 (inf = infeasible). σ_e = 0.5 keeps the σ_e arithmetic
// exact. Task c's gains all lie within 1 σ_e of each other, so no pair of
// it counts in the pairwise accuracy.
const sigma = 0.5

var inf = math.Inf(1)

var handGains = map[string][2][5]float64{
	"a": {{3, 1, 0, -2, inf}, {2, 2, -1, -3, inf}},
	"b": {{0.5, 4, 1, -1, 9}, {0, 3, 1.5, -0.5, 8}},
	"c": {{1, 1.2, 0.8, 1.1, 0.9}, {1, 1.4, 0.6, 1.2, 0.9}},
}

// handPred are the stub model's predictions in σ_e units (NaN = judged
// invalid).
var handPred = map[string][5]float64{
	"a": {-1, 2, 0, 3, 1},
	"b": {math.NaN(), 1, 2, 0, 5},
	"c": {5, 4, 3, 2, 1},
}

func handTask(id string) records.Task {
	return records.Task{ID: id, Family: "f", Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 10, SeedNoise: sigma}
}

func handProposal(j int) records.Proposal {
	return records.Proposal{Mechanism: "m", Params: map[string]string{"x": strconv.Itoa(j)}}
}

func handRecord(id string, j int, seed uint64, g float64) records.Record {
	r := records.Record{Task: handTask(id), Proposal: handProposal(j), Source: records.Real, Seeds: []uint64{seed}}
	if math.IsInf(g, 1) {
		r.Infeasible = "diverged"
		return r
	}
	r.Gain = g * sigma
	r.Loss = r.Task.RefLoss - r.Gain
	return r
}

// handRecords returns the landscape's records, seed 2 before seed 1, with
// a reference run per task; symmetric makes seed 1 measure what seed 2 does.
func handRecords(symmetric bool) []records.Record {
	var rs []records.Record
	for _, id := range []string{"c", "a", "b"} {
		rs = append(rs, records.Record{Task: handTask(id), Proposal: records.Proposal{Mechanism: records.NoChange}, Source: records.Reference, Seeds: []uint64{1}, Loss: 10})
		g := handGains[id]
		for j := range 5 {
			rs = append(rs, handRecord(id, j, 2, g[1][j]))
			s1 := g[0][j]
			if symmetric {
				s1 = g[1][j]
			}
			rs = append(rs, handRecord(id, j, 1, s1))
		}
	}
	return rs
}

func handLandscape(t *testing.T, symmetric bool) *landscape {
	t.Helper()
	l, err := newLandscape(handRecords(symmetric), nil)
	require.NoError(t, err)
	return l
}

var errStub = errors.New("stub failure")

// stubModel returns handPred and remembers the size of each context.
type stubModel struct {
	contexts []int
	failOn   string // task ID whose predictions fail
}

func (s *stubModel) Predict(_ context.Context, q rwm.Query) (rwm.Prediction, error) {
	if q.Task.ID == s.failOn {
		return rwm.Prediction{}, errStub
	}
	if len(s.contexts) == 0 || s.contexts[len(s.contexts)-1] != q.Evidence.Len() {
		s.contexts = append(s.contexts, q.Evidence.Len())
	}
	j, err := strconv.Atoi(q.Proposal.Params["x"])
	if err != nil {
		return rwm.Prediction{}, err
	}
	v := handPred[q.Task.ID][j]
	if math.IsNaN(v) {
		return rwm.Prediction{Valid: false, Reason: "stub: invalid"}, nil
	}
	return rwm.Prediction{Gain: v * q.Task.SeedNoise, Valid: true}, nil
}

func TestLandGain(t *testing.T) {
	// σ_e units, clipped to ±6; infeasible −6 whatever its gain field.
	for _, c := range []struct {
		g, want float64
		infeas  bool
	}{{2.5, 2.5, false}, {10, 6, false}, {-8, -6, false}, {3, -6, true}} {
		r := handRecord("a", 0, 1, c.g)
		if c.infeas {
			r.Infeasible = "diverged"
		}
		require.Equal(t, c.want, landGain(r))
	}
}

func TestPairAccuracy(t *testing.T) {
	// Pairs with |Δtruth| ≥ 1: (0,1) Δ exactly 1, tied prediction → ½;
	// (0,2), (0,3), (1,3) right; (2,3) wrong; (1,2) Δ 0.5 does not count:
	// 3.5/5. A threshold > 1 would give 3/4, none 4.5/6.
	require.InDelta(t, 0.7, pairAccuracy([]float64{3, 3, 0, 1}, []float64{2, 1, 0.5, -6}), 1e-12)
	require.Equal(t, 1.0, pairAccuracy([]float64{1, 0}, []float64{-1, -6}))
	require.True(t, math.IsNaN(pairAccuracy([]float64{1, 2, 3}, []float64{0, 0.5, 0.9})))
	require.Equal(t, 0.5, pairAccuracy([]float64{0, 0, 0}, []float64{-6, 0, 6}))
}

func TestTopMean(t *testing.T) {
	pred, truth := []float64{5, 1, 5, 3, 0}, []float64{1, 6, -6, 2, 4}
	// Best predicted: cells 0 and 2 (tie, earlier first), 3, 1.
	require.InDelta(t, (1-6+2+6)/4.0, topMean(pred, truth, 4), 1e-12)
	require.InDelta(t, (1-6)/2.0, topMean(pred, truth, 2), 1e-12)
	require.InDelta(t, 7/5.0, topMean(pred, truth, 10), 1e-12)
	require.True(t, math.IsNaN(topMean(nil, nil, 4)))
}

func TestNewLandscapeGroups(t *testing.T) {
	rs := handRecords(false)
	// A cell measured on one seed is dropped, and a third seed is ignored.
	rs = append(rs, handRecord("a", 7, 1, 0), handRecord("b", 0, 3, -6))
	l, err := newLandscape(rs, nil)
	require.NoError(t, err)
	require.Len(t, l.cells, 15)
	require.Equal(t, []string{"a", "b", "c"}, l.ids)
	require.Equal(t, [][]int{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}, {10, 11, 12, 13, 14}}, l.tasks)
	for _, c := range l.cells {
		require.Equal(t, []uint64{1}, c.seeds[0].Seeds)
		require.Equal(t, []uint64{2}, c.seeds[1].Seeds)
	}
	require.Equal(t, 4.0, landGain(l.cells[6].seeds[0]))  // b, p1, seed 1
	require.Equal(t, -6.0, landGain(l.cells[4].seeds[1])) // a, p4 infeasible

	// A seed's run repeated in the store is not a second seed: the first
	// record of seed 1 stays, and a cell with seed 1 twice and no other is
	// dropped.
	dup := append([]records.Record{handRecord("a", 0, 1, 5)}, rs...)
	dup = append(dup, handRecord("c", 9, 1, 0), handRecord("c", 9, 1, 0))
	ld, err := newLandscape(dup, nil)
	require.NoError(t, err)
	require.Len(t, ld.cells, 15)
	require.Equal(t, 5.0, landGain(ld.cells[0].seeds[0]))
	require.Equal(t, []uint64{2}, ld.cells[0].seeds[1].Seeds)

	only, err := newLandscape(rs, func(id string) bool { return id == "b" })
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, only.ids)
	require.Len(t, only.cells, 5)
}

func TestNewLandscapeErrors(t *testing.T) {
	var refs, single []records.Record
	for _, r := range handRecords(false) {
		switch {
		case r.Source == records.Reference:
			refs = append(refs, r)
		case r.Seeds[0] == 1:
			single = append(single, r)
		}
	}
	_, err := newLandscape(refs, nil)
	require.ErrorIs(t, err, errNoLandscape)
	require.Contains(t, err.Error(), "3 records, 0 real runs of a proposal")

	_, err = newLandscape(single, nil)
	require.ErrorIs(t, err, errNoLandscape)
	require.Contains(t, err.Error(), "15 (task, proposal) cells and none measured on two seeds")

	_, err = newLandscape(handRecords(false), func(string) bool { return false })
	require.ErrorIs(t, err, errNoLandscape)
	require.Contains(t, err.Error(), "30 real runs of a proposal, 0 of them on the chosen tasks")
}

// TestScoreContextHandDerived scores the empty context with the context
// on seed 1 and the truth on seed 2 (the derivations are in the comments).
func TestScoreContextHandDerived(t *testing.T) {
	l := handLandscape(t, false)
	d := landDraw{seed: make([]int, 15), order: make([]int, 15)}
	for i := range d.order {
		d.order[i] = i
	}
	type got struct{ pair, top, bias float64 }
	res := map[[2]int]got{}
	m := &stubModel{}
	require.NoError(t, l.scoreContext(context.Background(), d, 0, 4, []rankModel{{"stub", m}}, func(kind, task int, p, top, bias float64) {
		res[[2]int{kind, task}] = got{p, top, bias}
	}))
	require.Equal(t, []int{0}, m.contexts)
	const a, b, c = 0, 1, 2
	const blind, oracle, stub = 0, 1, 2
	nan := math.NaN()
	want := map[[2]int]got{
		// a: truth (2, 2, −1, −3, −6); 9 pairs ≥ 1 σ_e apart. The oracle's
		// top-rated (seen 3) has truth 2; the stub's (predicted 3) −3.
		{blind, a}:  {0.5, -6.0 / 5, nan},
		{oracle, a}: {1, (2 + 2 - 1 - 3) / 4.0, 3 - 2}, // seen (3, 1, 0, −2, −6) orders all 9
		{stub, a}:   {3.0 / 9, (-3 + 2 - 6 - 1) / 4.0, 3 - -3},
		// b: truth (0, 3, 1.5, −0.5, 6 clipped); the invalid prediction is −6.
		// The oracle's top-rated is seen 9 clipped to 6, truth 6; the stub's
		// predicted 5, truth 6.
		{blind, b}:  {0.5, 10.0 / 5, nan},
		{oracle, b}: {1, (6 + 3 + 1.5 + 0) / 4, 6 - 6},
		{stub, b}:   {8.0 / 9, (6 + 1.5 + 3 - 0.5) / 4, 5 - 6},
		// c: no pair ≥ 1 σ_e apart. Top-rated: seen 1.2 (truth 1.4),
		// predicted 5 (truth 1).
		{blind, c}:  {nan, 5.1 / 5, nan},
		{oracle, c}: {nan, (1.4 + 1.2 + 1 + 0.9) / 4, 1.2 - 1.4},
		{stub, c}:   {nan, (1 + 1.4 + 0.6 + 1.2) / 4, 5 - 1},
	}
	require.Len(t, res, len(want))
	for k, w := range want {
		g := res[k]
		for _, f := range []struct {
			name      string
			want, got float64
		}{{"pair", w.pair, g.pair}, {"top", w.top, g.top}, {"bias", w.bias, g.bias}} {
			if math.IsNaN(f.want) {
				require.True(t, math.IsNaN(f.got), "%v %s", k, f.name)
			} else {
				require.InDelta(t, f.want, f.got, 1e-12, "%v %s", k, f.name)
			}
		}
	}
}

// TestScoreContextHeldOut puts the first proposal of every task in the
// context (seed 2) and scores the other four against seed 1.
func TestScoreContextHeldOut(t *testing.T) {
	l := handLandscape(t, false)
	d := landDraw{seed: slices.Repeat([]int{1}, 15), order: []int{0, 5, 10, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14}}
	m := &stubModel{}
	var aPair, aTop, aBias float64
	require.NoError(t, l.scoreContext(context.Background(), d, 3, 4, []rankModel{{"stub", m}}, func(kind, task int, p, top, bias float64) {
		if kind == 2 && task == 0 {
			aPair, aTop, aBias = p, top, bias
		}
	}))
	require.Equal(t, []int{3}, m.contexts)
	// a: truth (1, 0, −2, −6), predictions (2, 0, 3, 1): of the 6 pairs
	// (all ≥ 1 σ_e apart) right are (p1,p2), (p1,p4), (p3,p4).
	require.InDelta(t, 0.5, aPair, 1e-12)
	require.InDelta(t, -7.0/4, aTop, 1e-12)
	require.InDelta(t, 3 - -2.0, aBias, 1e-12) // the top-rated (predicted 3) has truth −2
	in, ev, err := l.context(d, 3)
	require.NoError(t, err)
	require.Equal(t, 3, ev.Len())
	require.Equal(t, []uint64{2}, ev.At(0).Seeds)
	require.True(t, in[0] && in[5] && in[10] && !in[1])
}

// TestRankLandscapeHandDerived: with equal seeds and an empty context the
// figures do not depend on the draws; a row is the mean over tasks.
func TestRankLandscapeHandDerived(t *testing.T) {
	l := handLandscape(t, true)
	cfg := defaultRankConfig()
	cfg.sizes, cfg.reps = []int{0}, 3
	rows, err := rankLandscape(context.Background(), l, []rankModel{{"stub", &stubModel{}}}, cfg)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, []string{rowMean, rowOracle, "stub"}, []string{rows[0].name, rows[1].name, rows[2].name})
	// Mean gain: a −6/5, b 10/5, c 5.1/5 (truth = seed 2 on both seeds).
	require.InDelta(t, 0.5, rows[0].pair.mean, 1e-12)
	require.InDelta(t, (-1.2+2+1.02)/3, rows[0].top.mean, 1e-12)
	// Oracle = truth: pairwise 1 on a and b; top 4 a 0, b 10.5/4, c 4.5/4.
	require.Equal(t, interval{mean: 1, lo: 1, hi: 1, tasks: 2}, rows[1].pair)
	require.InDelta(t, (0+2.625+1.125)/3, rows[1].top.mean, 1e-12)
	// Stub: pairwise a 1/3, b 8/9; top 4 a −2, b 2.5, c 1.05.
	require.InDelta(t, (1.0/3+8.0/9)/2, rows[2].pair.mean, 1e-12)
	require.Equal(t, 2, rows[2].pair.tasks)
	require.InDelta(t, (-2+2.5+1.05)/3, rows[2].top.mean, 1e-12)
	// Two tasks resampled 2000 times: the mean of both, of a twice or of b
	// twice (¼, ½, ¼): the 2.5% and 97.5% quantiles are the extremes.
	require.InDelta(t, 1.0/3, rows[2].pair.lo, 1e-12)
	require.InDelta(t, 8.0/9, rows[2].pair.hi, 1e-12)
	require.InDelta(t, -2, rows[2].top.lo, 1e-12)
	require.InDelta(t, 2.5, rows[2].top.hi, 1e-12)
}

func TestRankLandscapeDeterministic(t *testing.T) {
	l := handLandscape(t, false)
	cfg := defaultRankConfig()
	cfg.sizes, cfg.reps = []int{2, 6}, 4
	run := func(seed uint64) []rankRow {
		cfg.seed = seed
		rows, err := rankLandscape(context.Background(), l, []rankModel{{"stub", &stubModel{}}}, cfg)
		require.NoError(t, err)
		return rows
	}
	first := run(1)
	require.Len(t, first, 6)
	require.Equal(t, []int{2, 6, 2, 6, 2, 6}, []int{first[0].n, first[1].n, first[2].n, first[3].n, first[4].n, first[5].n})
	// %v prints NaN alike (the blind pick's bias), where == does not.
	require.Equal(t, fmt.Sprint(first), fmt.Sprint(run(1)))
	require.NotEqual(t, fmt.Sprint(first), fmt.Sprint(run(2)))

	// A draw is a permutation and a seed per cell; contexts are nested.
	d := l.draw(rand.New(rand.NewPCG(1, 0)))
	require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, d.order)
	for _, s := range d.seed {
		require.True(t, s == 0 || s == 1)
	}
	in2, _, err := l.context(d, 2)
	require.NoError(t, err)
	in6, _, err := l.context(d, 6)
	require.NoError(t, err)
	for i := range in2 {
		require.True(t, !in2[i] || in6[i])
	}
}

func TestRankLandscapeErrors(t *testing.T) {
	l := handLandscape(t, false)
	cfg := defaultRankConfig()
	cfg.sizes, cfg.reps = []int{15}, 1
	_, err := rankLandscape(context.Background(), l, nil, cfg)
	require.ErrorContains(t, err, "context of 15 cells out of 15")
	cfg.sizes, cfg.reps = []int{1}, 0
	_, err = rankLandscape(context.Background(), l, nil, cfg)
	require.ErrorContains(t, err, "0 repetitions")
	cfg.reps = 1
	_, err = rankLandscape(context.Background(), l, []rankModel{{"broken model", &stubModel{failOn: "b"}}}, cfg)
	require.ErrorIs(t, err, errStub)
	require.ErrorContains(t, err, "broken model: predict m{x=")
	require.ErrorContains(t, err, "on b: stub failure")
}

func TestBootstrapAndQuantile(t *testing.T) {
	require.Equal(t, 2.5, quantile([]float64{1, 2, 3, 4}, 0.5))
	require.Equal(t, 4.0, quantile([]float64{1, 2, 3, 4}, 1))
	iv := bootstrap([]float64{2, math.NaN(), 2, 2}, 100, rand.New(rand.NewPCG(1, 2)))
	require.Equal(t, interval{mean: 2, lo: 2, hi: 2, tasks: 3}, iv)
	iv = bootstrap([]float64{0, 1, 2, 3, 4, 5, 6, 7}, 2000, rand.New(rand.NewPCG(1, 2)))
	require.Equal(t, 3.5, iv.mean)
	// Standard error of the mean √(5.25/8) ≈ 0.81: the interval is about ±1.6.
	require.InDelta(t, 3.5-1.6, iv.lo, 0.25)
	require.InDelta(t, 3.5+1.6, iv.hi, 0.25)
	require.True(t, math.IsNaN(bootstrap([]float64{math.NaN()}, 10, rand.New(rand.NewPCG(1, 2))).mean))
}

func TestLandscapeTable(t *testing.T) {
	tab := landscapeTable([]rankRow{
		{name: "catalogue", n: 50, pair: interval{mean: 0.61234, lo: 0.5, hi: 0.7}, top: interval{mean: 1.234, lo: -0.5, hi: 2},
			bias: interval{mean: 2.346, lo: 1, hi: 3.5}},
		{name: rowMean, n: 50, pair: interval{mean: math.NaN(), lo: math.NaN(), hi: math.NaN()}, top: interval{mean: -0.7, lo: -1, hi: -0.4},
			bias: interval{mean: math.NaN(), lo: math.NaN(), hi: math.NaN()}},
	}, 4)
	require.Equal(t, "| predictor | context | pairwise accuracy | 95% interval | top-4 gain (σ_e) | 95% interval | bias on the top-rated (σ_e) | 95% interval |\n"+
		"|---|---:|---:|---|---:|---|---:|---|\n"+
		"| catalogue | 50 | 0.612 | [0.500, 0.700] | +1.23 | [-0.50, +2.00] | +2.35 | [+1.00, +3.50] |\n"+
		"| mean gain | 50 | — | — | -0.70 | [-1.00, -0.40] | — | — |\n", tab)
}

func TestPartFilter(t *testing.T) {
	keep, err := partFilter("")
	require.NoError(t, err)
	require.Nil(t, keep)
	keep, err = partFilter("val")
	require.NoError(t, err)
	require.True(t, keep("v2s1/val/ar-prose/00"))
	require.False(t, keep("v2s1/train/ar-prose/00"))
	_, err = partFilter("validation")
	require.ErrorContains(t, err, `-part "validation"`)
}

// TestRunLandscape runs the mode end to end on the hand-made landscape in
// a file store: the report file matches what is printed.
func TestRunLandscape(t *testing.T) {
	dir := t.TempDir()
	path := writeStore(t, filepath.Join(dir, "landscape.records"), handRecords(false))
	rc := defaultRankConfig()
	rc.sizes, rc.reps = []int{4}, 2
	var out strings.Builder
	require.NoError(t, runLandscape(context.Background(), landscapeOptions{store: path, out: dir, rank: rc}, &out))
	rep, err := os.ReadFile(filepath.Join(dir, "landscape-report.md"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out.String(), string(rep)))
	require.Contains(t, string(rep), "15 cells (task, proposal) measured on two seeds, on 3 tasks")
	for _, name := range []string{rowMean, rowOracle, "catalogue", "descriptors", "descriptors, tuned", "effects", "effects, tuned"} {
		require.Contains(t, string(rep), "| "+name+" | 4 |")
	}

	err = runLandscape(context.Background(), landscapeOptions{store: path, part: "val", out: dir, rank: rc}, &out)
	require.ErrorIs(t, err, errNoLandscape)
}

// writeStore writes rs to a new file store at path and returns path.
func writeStore(t *testing.T, path string, rs []records.Record) string {
	t.Helper()
	st, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	require.NoError(t, st.Append(context.Background(), rs...))
	require.NoError(t, st.Close())
	return path
}
