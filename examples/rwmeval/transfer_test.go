package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// handSplit returns the hand landscape's tasks a and b as the ranked
// (unseen) landscape and task c as the context landscape.
func handSplit(t *testing.T, symmetric bool) (dst, src *landscape) {
	t.Helper()
	rs := handRecords(symmetric)
	dst, err := newLandscape(rs, func(id string) bool { return id != "c" })
	require.NoError(t, err)
	src, err = newLandscape(rs, func(id string) bool { return id == "c" })
	require.NoError(t, err)
	return dst, src
}

// TestScoreTransferHandDerived: the context is task c's five cells, and
// each ranked task's history its first cell (seed 2); the other four are
// scored against seed 1, as TestScoreContextHeldOut scores task a.
func TestScoreTransferHandDerived(t *testing.T) {
	dst, src := handSplit(t, false)
	one := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	d := transferDraw{
		src: landDraw{seed: one(5), order: []int{4, 3, 2, 1, 0}},
		dst: landDraw{seed: one(10), order: []int{0, 5, 1, 2, 3, 4, 6, 7, 8, 9}},
	}
	type got struct{ pair, top, bias float64 }
	res := map[[2]int]got{}
	m := &stubModel{}
	require.NoError(t, scoreTransfer(context.Background(), dst, src, d, 5, 1, 4, nil, []rankModel{{"stub", m}}, func(kind, task int, p, top, bias float64) {
		res[[2]int{kind, task}] = got{p, top, bias}
	}))
	// Each task's evidence: c's 5 cells and one of its own.
	require.Equal(t, []int{6}, m.contexts)
	const a, b = 0, 1
	const blind, oracle, stub = 0, 1, 2
	want := map[[2]int]got{
		// a without its first cell: truth (1, 0, −2, −6) on seed 1 (all 6
		// pairs ≥ 1 σ_e apart), seen (2, −1, −3, −6), predictions (2, 0, 3, 1).
		// The top-rated: seen 2 (truth 1), predicted 3 (truth −2).
		{blind, a}:  {0.5, -7.0 / 4, math.NaN()},
		{oracle, a}: {1, -7.0 / 4, 2 - 1},
		{stub, a}:   {0.5, -7.0 / 4, 3 - -2},
		// b without its first cell: truth (4, 1, −1, 6 clipped), seen
		// (3, 1.5, −0.5, 6), predictions (1, 2, 0, 5): of the 6 pairs only
		// (p2,p3) is wrong.
		// The top-rated: seen 6 (truth 6), predicted 5 (truth 6).
		{blind, b}:  {0.5, 10.0 / 4, math.NaN()},
		{oracle, b}: {1, 10.0 / 4, 6 - 6},
		{stub, b}:   {5.0 / 6, 10.0 / 4, 5 - 6},
	}
	require.Len(t, res, len(want))
	for k, w := range want {
		require.InDelta(t, w.pair, res[k].pair, 1e-12, "%v pair", k)
		require.InDelta(t, w.top, res[k].top, 1e-12, "%v top", k)
		if math.IsNaN(w.bias) {
			require.True(t, math.IsNaN(res[k].bias), "%v bias", k)
		} else {
			require.InDelta(t, w.bias, res[k].bias, 1e-12, "%v bias", k)
		}
	}

	// Noisy oracles: noise 0.5 and 2 with z = −1 on b's second cell only:
	// b's seen (3, 1.5, −0.5, 6) become (2.5, …) and (1, …): the second
	// orders p2 below p3 against the truth (4, 1, …): 5 of 6 pairs.
	d.z = make([]float64, 10)
	d.z[6] = -1
	res = map[[2]int]got{}
	require.NoError(t, scoreTransfer(context.Background(), dst, src, d, 5, 1, 4, []float64{0.5, 2}, []rankModel{{"stub", &stubModel{}}}, func(kind, task int, p, top, bias float64) {
		res[[2]int{kind, task}] = got{p, top, bias}
	}))
	require.Equal(t, 1.0, res[[2]int{2, b}].pair)
	require.InDelta(t, 5.0/6, res[[2]int{3, b}].pair, 1e-12)
	require.InDelta(t, 10.0/4, res[[2]int{3, b}].top, 1e-12)
	require.Equal(t, 1.0, res[[2]int{3, a}].pair)
	require.InDelta(t, 5.0/6, res[[2]int{4, b}].pair, 1e-12, "the stub comes after the noisy oracles")

	// The history is per task, in the draw's order.
	require.Equal(t, [][]int{{0, 1}, {5, 6}}, historyOf(dst, landDraw{order: []int{0, 5, 1, 2, 6}}, 2))
	require.Equal(t, [][]int{{1}, {6}}, historyOf(dst, landDraw{order: []int{1, 6, 0, 5}}, 1))
}

// TestRankTransferHandDerived: with equal seeds, no history and any
// context the figures do not depend on the draws (the stub ignores its
// context): a row is the mean over the ranked tasks a and b.
func TestRankTransferHandDerived(t *testing.T) {
	dst, src := handSplit(t, true)
	cfg := defaultRankConfig()
	cfg.sizes, cfg.reps = []int{0, 5}, 3
	m := &stubModel{}
	rows, err := rankTransfer(context.Background(), dst, src, []rankModel{{"stub", m}}, cfg, 0, nil)
	require.NoError(t, err)
	require.Len(t, rows, 6)
	require.Equal(t, []int{0, 5, 0, 5, 0, 5}, m.contexts)
	for _, r := range rows[4:] {
		require.Equal(t, "stub", r.name)
		// TestRankLandscapeHandDerived's stub figures on a and b.
		require.InDelta(t, (1.0/3+8.0/9)/2, r.pair.mean, 1e-12)
		require.InDelta(t, (-2+2.5)/2, r.top.mean, 1e-12)
	}
	require.InDelta(t, (-1.2+2)/2, rows[0].top.mean, 1e-12)
	require.Equal(t, interval{mean: 1, lo: 1, hi: 1, tasks: 2}, rows[2].pair)

	// Noisy oracles: the least noise keeps the oracle's order, the most
	// loses it; rows are named by their noise.
	m = &stubModel{}
	rows, err = rankTransfer(context.Background(), dst, src, []rankModel{{"stub", m}}, cfg, 0, []float64{1e-9, 1e6})
	require.NoError(t, err)
	require.Len(t, rows, 10)
	require.Equal(t, "oracle + noise 1e-09 σ_e", rows[4].name)
	require.Equal(t, "oracle + noise 1e+06 σ_e", rows[6].name)
	require.Equal(t, 1.0, rows[4].pair.mean)
	require.Less(t, rows[6].pair.mean, 0.9)
	require.InDelta(t, (1.0/3+8.0/9)/2, rows[8].pair.mean, 1e-12)

	again, err := rankTransfer(context.Background(), dst, src, []rankModel{{"stub", &stubModel{}}}, cfg, 2, nil)
	require.NoError(t, err)
	cfg.seed = 2
	other, err := rankTransfer(context.Background(), dst, src, []rankModel{{"stub", &stubModel{}}}, cfg, 2, nil)
	require.NoError(t, err)
	cfg.seed = 1
	same, err := rankTransfer(context.Background(), dst, src, []rankModel{{"stub", &stubModel{}}}, cfg, 2, nil)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(again), fmt.Sprint(same)) // NaN biases of the blind pick
	require.NotEqual(t, again[4], other[4], "the history's draw follows the seed")
}

func TestRankTransferErrors(t *testing.T) {
	dst, src := handSplit(t, false)
	cfg := defaultRankConfig()
	cfg.sizes, cfg.reps = []int{6}, 1
	_, err := rankTransfer(context.Background(), dst, src, nil, cfg, 0, nil)
	require.ErrorContains(t, err, "context of 6 source cells out of 5")
	cfg.sizes = []int{5}
	_, err = rankTransfer(context.Background(), dst, src, nil, cfg, -1, nil)
	require.ErrorContains(t, err, "history of -1 cells")
	_, err = rankTransfer(context.Background(), dst, src, nil, cfg, 0, []float64{1, 0})
	require.ErrorContains(t, err, "oracle noise 0 σ_e")
	_, err = rankTransfer(context.Background(), dst, dst, nil, cfg, 0, nil)
	require.ErrorContains(t, err, "task a is in both landscapes")
	_, err = rankTransfer(context.Background(), dst, src, []rankModel{{"broken model", &stubModel{failOn: "b"}}}, cfg, 1, nil)
	require.ErrorIs(t, err, errStub)
	// A task with no cell beyond its history is skipped: no figures.
	rows, err := rankTransfer(context.Background(), dst, src, []rankModel{{"stub", &stubModel{}}}, cfg, 5, nil)
	require.NoError(t, err)
	require.True(t, math.IsNaN(rows[2].pair.mean))
}

func TestRunLandscapeTransfer(t *testing.T) {
	dir := t.TempDir()
	path := writeStore(t, filepath.Join(dir, "landscape.records"), handRecords(false))
	var moved []records.Record
	for _, r := range handRecords(false) {
		r.Task.ID = "other-" + r.Task.ID
		moved = append(moved, r)
	}
	other := writeStore(t, filepath.Join(dir, "other.records"), moved)

	rc := defaultRankConfig()
	rc.sizes, rc.reps = []int{4}, 2
	var out strings.Builder
	o := landscapeOptions{store: path, out: dir, rank: rc, context: other, hist: 1, models: []string{"fx-tuned", "fx-G0"}, noise: []float64{1}}
	require.NoError(t, runLandscape(context.Background(), o, &out))
	rep, err := os.ReadFile(filepath.Join(dir, "transfer-report.md"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out.String(), string(rep)))
	require.Contains(t, string(rep), "(3 tasks) on a context of "+other+" (15 cells on 3 other tasks)")
	require.Contains(t, string(rep), "per task ranked, 1 of its own cells")
	for _, name := range []string{rowMean, rowOracle, "oracle + noise 1 σ_e", "effects, tuned", "effects, tuned, no loss term"} {
		require.Contains(t, string(rep), "| "+name+" | 4 |")
	}

	o.context = path
	require.ErrorContains(t, runLandscape(context.Background(), o, &out), "in both landscapes")
	for _, edit := range []func(*landscapeOptions){
		func(o *landscapeOptions) { o.contextPart = "train" },
		func(o *landscapeOptions) { o.hist = 1 },
		func(o *landscapeOptions) { o.noise = []float64{2} },
	} {
		same := landscapeOptions{store: path, out: dir, rank: rc}
		edit(&same)
		require.ErrorContains(t, runLandscape(context.Background(), same, &out), "need -context-landscape")
	}
	o.context, o.contextPart = other, "val"
	require.ErrorIs(t, runLandscape(context.Background(), o, &out), errNoLandscape)
	o.contextPart, o.models = "", []string{"fx-tuned", "nope"}
	err = runLandscape(context.Background(), o, &out)
	require.ErrorContains(t, err, `unknown world model "nope"`)
	require.ErrorContains(t, err, "fx-np")
}

// intervalModel predicts a gain of 1 with q10 0 and q90 3, or no interval.
type intervalModel struct{ interval bool }

func (m intervalModel) Predict(context.Context, rwm.Query) (rwm.Prediction, error) {
	return rwm.Prediction{Gain: 1, Low: 0, High: 3, HasInterval: m.interval, Valid: true}, nil
}

// quantileRank ranks by q90 (z = Z90) or q10 (z = −Z90) of the inner
// prediction; without an interval it keeps the mean.
func TestQuantileRank(t *testing.T) {
	ctx := context.Background()
	p, err := quantileRank{intervalModel{true}, Z90}.Predict(ctx, rwm.Query{})
	require.NoError(t, err)
	require.InDelta(t, 3, p.Gain, 1e-12)
	require.NoError(t, p.Validate())
	p, err = quantileRank{intervalModel{true}, -Z90}.Predict(ctx, rwm.Query{})
	require.NoError(t, err)
	require.InDelta(t, 0, p.Gain, 1e-12)
	p, err = quantileRank{intervalModel{true}, Z90 / 2}.Predict(ctx, rwm.Query{})
	require.NoError(t, err)
	require.InDelta(t, 2, p.Gain, 1e-12)
	p, err = quantileRank{intervalModel{false}, Z90}.Predict(ctx, rwm.Query{})
	require.NoError(t, err)
	require.Equal(t, 1.0, p.Gain)
}

// proposalMean predicts the context's mean gain (σ_e units, clipped,
// infeasible −6) of the same proposal on any task, scaled to the queried
// task's σ_e; 0 without a record of it.
func TestProposalMean(t *testing.T) {
	ctx := context.Background()
	var rs []records.Record // seed 1 and 2 of p0 on a: 3, 2; on b: 0.5, 0; on c: 1, 1
	for _, r := range handRecords(false) {
		if r.Source == records.Real {
			rs = append(rs, r)
		}
	}
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	q := rwm.Query{Task: records.Task{ID: "new", SeedNoise: 2}, Proposal: handProposal(0), Evidence: ev}
	p, err := proposalMean{}.Predict(ctx, q)
	require.NoError(t, err)
	require.True(t, p.Valid)
	require.InDelta(t, (3+2+0.5+0+1+1)/6.0*2, p.Gain, 1e-12)
	// p4: a infeasible twice (−6), b 9 and 8 clipped to 6, c 0.9 twice.
	q.Proposal = handProposal(4)
	p, err = proposalMean{}.Predict(ctx, q)
	require.NoError(t, err)
	require.InDelta(t, (-6-6+6+6+0.9+0.9)/6*2, p.Gain, 1e-12)
	q.Proposal = handProposal(9)
	p, err = proposalMean{}.Predict(ctx, q)
	require.NoError(t, err)
	require.Equal(t, rwm.Prediction{Valid: true}, p)
}
