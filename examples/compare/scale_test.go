package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/records"
)

// scaleTasks: training ar-prose σ_e 0.01, 0.03, 0.05 (floor 0.03), mdm 0.02
// (floor 0.02), all four: median 0.025 (the floor of other families).
func scaleTasks() []records.Task {
	task := func(id, fam string, split records.Split, sigma float64) records.Task {
		return records.Task{ID: id, Family: fam, Split: split, SeedNoise: sigma}
	}
	return []records.Task{
		task("tr/p0", "ar-prose", records.Train, 0.01), task("tr/p1", "ar-prose", records.Train, 0.05),
		task("tr/p2", "ar-prose", records.Train, 0.03), task("tr/m0", "mdm", records.Train, 0.02),
		task("te/p", "ar-prose", records.HeldOut, 0.015), task("te/m", "mdm", records.HeldOut, 0.04),
		task("te/s", "ssm", records.HeldOut, 0.005),
	}
}

// TestRescaleHand re-expresses gains by hand: g·σ_e/τ_e clipped at ±6,
// τ_e = max(σ_e, floor); a recorded infeasible run's −6 stays −6.
func TestRescaleHand(t *testing.T) {
	rs, err := newRobustScale(scaleTasks())
	require.NoError(t, err)
	require.Equal(t, ScaleInfo{Name: "robust", Floors: map[string]float64{"ar-prose": 0.03, "mdm": 0.02},
		OtherFamilies: 0.025, TrainTasks: 4, Clip: 6}, rs.info)
	in := []Result{{Method: "lm2lm", Seed: 1, States: []StateResult{
		// σ_e 0.015 under the floor 0.03 halves a gain: 4 → 2, −20 → −10 → −6;
		// the infeasible −6 stays.
		{ID: "te/p#0", Task: "te/p", Gains: []float64{4, -6, -20}, Infeasible: 1},
		// No infeasible run recorded: a measured −6 is halved like any gain.
		{ID: "te/p#1", Task: "te/p", Gains: []float64{-6, 1}},
		// σ_e 0.04 above mdm's floor: unchanged within the clip.
		{ID: "te/m#0", Task: "te/m", Gains: []float64{1.5, 9, -6}, Infeasible: 1},
		// ssm has no training task: the floor 0.025, factor 0.2.
		{ID: "te/s#0", Task: "te/s", Gains: []float64{10, -6, -6}, Infeasible: 2},
	}}}
	before := slices.Clone(in[0].States[0].Gains)
	out, err := rs.rescale(in)
	require.NoError(t, err)
	want := [][]float64{{2, -6, -6}, {-3, 0.5}, {1.5, 6, -6}, {2, -6, -6}}
	for i, w := range want {
		require.InDeltaSlice(t, w, out[0].States[i].Gains, 1e-12, "state %d", i)
		require.Equal(t, in[0].States[i].Infeasible, out[0].States[i].Infeasible)
	}
	require.Equal(t, before, in[0].States[0].Gains, "the results read from the run files are not modified")

	_, err = rs.rescale([]Result{{Method: "base", Seed: 2, States: []StateResult{{ID: "x#0", Task: "x", Gains: []float64{1}}}}})
	require.ErrorContains(t, err, "task x, which has no σ_e")
	_, err = newRobustScale(scaleTasks()[4:])
	require.ErrorContains(t, err, "floors of the training tasks")
}

func TestScaleFlag(t *testing.T) {
	_, err := parseFlags([]string{"-scale", "log"}, &bytes.Buffer{})
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, `unknown -scale "log"; valid: raw, robust`)
	o, err := parseFlags([]string{"-methods", "base,lm2lm", "-scale", "robust"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "go run ./examples/compare -profile default -suite v2 -seeds 5 -methods base,lm2lm -scale robust", command(o))
	require.Equal(t, "compare-seeds1-5-base+lm2lm-robust", prefix(o))
	raw, err := parseFlags([]string{"-methods", "base,lm2lm"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "raw", raw.scale)
	require.Equal(t, runDir(raw), runDir(o), "the scale is a report-time transform of the same runs")
	require.Equal(t, "compare-seeds1-5-base+lm2lm", prefix(raw))
}

// The robust report's Markdown and JSON state the scale, the floors and
// the clip; the raw report's JSON has no scale field (raw files as before).
func TestRobustReportStatesTheScale(t *testing.T) {
	rs, err := newRobustScale(scaleTasks())
	require.NoError(t, err)
	res := []Result{
		{Method: "base", Seed: 1, States: []StateResult{{ID: "te/p#0", Task: "te/p", Gains: []float64{-40, 1}}, {ID: "te/m#0", Task: "te/m", Gains: []float64{0.5}}}},
		{Method: "lm2lm", Seed: 1, States: []StateResult{{ID: "te/p#0", Task: "te/p", Gains: []float64{3, 1}}, {ID: "te/m#0", Task: "te/m", Gains: []float64{2.5}}}},
	}
	robust, err := rs.rescale(res)
	require.NoError(t, err)
	dir := t.TempDir()
	o := options{methods: []string{"base", "lm2lm"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v1", resamples: 100, scale: "robust"}
	var w bytes.Buffer
	require.NoError(t, report(&w, o, dir, robust, &rs.info))
	md, err := os.ReadFile(filepath.Join(dir, "compare-seeds1-1-base+lm2lm-robust.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "on the robust scale: each gain g (in σ_e units) is g·σ_e/τ_e with τ_e = max(σ_e, the σ floor of the task's family), clipped at ±6; "+
		"floors = each family's median σ_e over the 4 training tasks (ar-prose 0.03, mdm 0.02; other families 0.025)")
	require.Contains(t, string(md), "| > 2τ_e |")
	// Base: (−6 + 0.5)/2 = −2.75 and 0.5 → Avg@1 −1.125; LM2LM: (1.5 + 0.5)/2 = 1 and 2.5 → 1.75.
	require.Contains(t, string(md), "| Base (untrained) | 1 | 2 | -1.12 ")
	require.Contains(t, string(md), "| LM2LM | 1 | 2 | +1.75 ")
	var c Comparison
	b, err := os.ReadFile(filepath.Join(dir, "compare-seeds1-1-base+lm2lm-robust.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &c))
	require.Equal(t, &rs.info, c.Scale)
	require.InDelta(t, 1.75, c.Methods[1].Summary.AvgK.Point, 1e-12)
	require.FileExists(t, filepath.Join(dir, "compare-seeds1-1-base+lm2lm-robust-methods.png"))

	o.scale = "raw"
	require.NoError(t, report(&bytes.Buffer{}, o, dir, res, nil))
	b, err = os.ReadFile(filepath.Join(dir, "compare-seeds1-1-base+lm2lm.json"))
	require.NoError(t, err)
	require.NotContains(t, string(b), `"scale"`)
	md, err = os.ReadFile(filepath.Join(dir, "compare-seeds1-1-base+lm2lm.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| Base (untrained) | 1 | 2 | -9.50 ") // ((−40 + 1)/2 + 0.5)/2
	require.Contains(t, string(md), "| > 2σ_e |")
}

// checkRobustRereport re-reports the end-to-end test's run directory on
// the robust scale: nothing runs, no record is written, the raw files stay,
// and every method's Avg@K is the mean over states of the gains of its
// result files transformed by hand with the σ_e of the store's reference
// runs.
func checkRobustRereport(t *testing.T, o options, files []string) {
	dir := runDir(o)
	rawFiles := map[string][]byte{}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "compare-") {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			rawFiles[f] = b
		}
	}
	require.NotEmpty(t, rawFiles)
	storePath := filepath.Join(dir, "records.jsonl")
	before, err := os.ReadFile(storePath)
	require.NoError(t, err)
	o.scale = "robust"
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, o))
	t.Log(out.String())
	require.Contains(t, out.String(), "10 finished earlier, 0 to run")
	require.Contains(t, out.String(), "this invocation: 0 real runs paid for (0 CPU s), 0 reused")
	after, err := os.ReadFile(storePath)
	require.NoError(t, err)
	require.Equal(t, before, after, "a re-report writes no record")
	for name, b := range rawFiles {
		now, err := os.ReadFile(name)
		require.NoError(t, err)
		require.Equal(t, b, now, "%s is not replaced", name)
	}
	var c Comparison
	b, err := os.ReadFile(filepath.Join(dir, prefix(o)+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &c))
	require.NotNil(t, c.Scale)

	tasks := referenceTasks(t, storePath)
	floors, other := handFloors(tasks)
	require.Equal(t, floors, c.Scale.Floors)
	require.Equal(t, other, c.Scale.OtherFamilies)
	md, err := os.ReadFile(filepath.Join(dir, prefix(o)+".md"))
	require.NoError(t, err)
	for i, m := range o.methods {
		var sum float64
		n := 0
		for s := range o.seeds {
			r, ok, err := readResult(dir, job{m, o.firstSeed + uint64(s)}, o)
			require.NoError(t, err)
			require.True(t, ok)
			for _, st := range r.States {
				task := tasks[st.Task]
				floor, ok := floors[task.Family]
				if !ok {
					floor = other
				}
				tau, inf, avg := max(task.SeedNoise, floor), st.Infeasible, 0.0
				for _, g := range st.Gains {
					x := min(max(g*task.SeedNoise/tau, -6), 6)
					if g == -6 && inf > 0 {
						x, inf = -6, inf-1
					}
					avg += x / float64(len(st.Gains))
				}
				sum += avg
				n++
			}
		}
		require.Equal(t, m, c.Methods[i].Method)
		require.InDelta(t, sum/float64(n), c.Methods[i].Summary.AvgK.Point, 1e-9, m)
		require.Contains(t, string(md), fmt.Sprintf("| %s | %d | %d | %+.2f ", methods[m].label, o.seeds, n, sum/float64(n)), m)
	}
}

// referenceTasks reads every task's family and σ_e from the reference
// runs in the store (read-only).
func referenceTasks(t *testing.T, path string) map[string]records.Task {
	cfg := records.DefaultFileConfig()
	cfg.ReadOnly = true
	st, err := records.OpenFile(path, cfg)
	require.NoError(t, err)
	defer st.Close()
	recs, err := st.Scan(context.Background(), records.Filter{Source: records.Reference})
	require.NoError(t, err)
	out := map[string]records.Task{}
	for _, r := range recs {
		out[r.Task.ID] = r.Task
	}
	return out
}

// handFloors is each family's median σ_e over the training tasks, and the
// median over all of them.
func handFloors(tasks map[string]records.Task) (map[string]float64, float64) {
	med := func(x []float64) float64 {
		sort.Float64s(x)
		if len(x)%2 == 1 {
			return x[len(x)/2]
		}
		return (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	by := map[string][]float64{}
	var all []float64
	for _, t := range tasks {
		if t.Split == records.Train {
			by[t.Family] = append(by[t.Family], t.SeedNoise)
			all = append(all, t.SeedNoise)
		}
	}
	floors := map[string]float64{}
	for f, x := range by {
		floors[f] = med(x)
	}
	return floors, med(all)
}

// cells keeps each measured proposal's prediction beside its gain, in the
// same order, when the evaluation had a world model; an unmeasured sample
// contributes neither.
func TestCellsKeepPredictions(t *testing.T) {
	task := records.Task{ID: "v2s1/val/ar-prose/00"}
	ev := lm2lm.EvalReport{States: []lm2lm.StateEval{{State: records.State{Task: task}, Samples: []lm2lm.SampleEval{
		{Measured: true, Feasible: true, Gain: 1.5, Predicted: 0.7},
		{Measured: false, Gain: math.NaN(), Predicted: 2},
		{Measured: true, Feasible: false, Gain: -6, Predicted: -6},
	}}, {State: records.State{Task: task}, Samples: []lm2lm.SampleEval{
		{Measured: true, Feasible: true, Gain: 0.2, Predicted: math.NaN()},
	}}}}
	got, unmeasured := cells(ev)
	require.Equal(t, []StateResult{
		{ID: task.ID + "#0", Task: task.ID, Gains: []float64{1.5, -6}, Infeasible: 1, Predicted: []float64{0.7, -6}},
		{ID: task.ID + "#1", Task: task.ID, Gains: []float64{0.2}},
	}, got)
	require.Zero(t, unmeasured, "no invalid sample, no failure listed")
}

// The world model's pairwise accuracy on the evaluation proposals, worked
// by hand: state a has pairs (3, 0) and (3, 1.5) ordered right by the
// predictions and (0, 1.5) wrong; state b's gains are closer than 1 σ_e;
// state c's pair ties in prediction (½); state d has no predictions.
// (2 + ½) / 4 = 0.625.
func TestEvalPairwise(t *testing.T) {
	rs := []Result{
		{States: []StateResult{
			{ID: "a", Gains: []float64{3, 0, 1.5}, Predicted: []float64{2, 1, 0}},
			{ID: "b", Gains: []float64{1, 1.5}, Predicted: []float64{0, 5}},
		}},
		{States: []StateResult{
			{ID: "c", Gains: []float64{-6, 2}, Predicted: []float64{4, 4}},
			{ID: "d", Gains: []float64{5, -5}},
		}},
	}
	acc, pairs := evalPairwise(rs)
	require.NotNil(t, acc)
	require.Equal(t, 0.625, *acc)
	require.Equal(t, 4, pairs)
	acc, pairs = evalPairwise(rs[1:2][:0])
	require.Nil(t, acc)
	require.Zero(t, pairs)
	acc, _ = evalPairwise([]Result{{States: []StateResult{{Gains: []float64{5, -5}}}}})
	require.Nil(t, acc, "no predictions")

	c := Comparison{Methods: []MethodSummary{{Summary: evalstat.Summary{Method: "LM2LM"}, EvalPairwise: new(0.625), EvalPairs: 4}}}
	require.Contains(t, markdown(c), "| LM2LM | 0.625 | 4 |")
	c.Methods[0].EvalPairwise = nil
	require.NotContains(t, markdown(c), "pairwise accuracy on the evaluation proposals")
}
