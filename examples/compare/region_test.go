package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// -suite v3-val and v3-test: the V2 training split and the V3 split's
// tasks, the split's tasks (and only they) evaluated; both valid flags,
// both named in the help.
func TestV3Suites(t *testing.T) {
	train := lab.SuiteV2(lab.DefaultSuiteSeed).Train
	for _, name := range []string{lab.V3ValName, lab.V3TestName} {
		t.Run(name, func(t *testing.T) {
			sp, ok := lab.SplitNamed(name)
			require.True(t, ok)
			require.Len(t, sp.Tasks, 48)
			specs, isTest := suiteTasks(name)
			require.Equal(t, append(append([]lab.TaskSpec(nil), train...), sp.Tasks...), specs)
			for _, s := range sp.Tasks {
				require.True(t, isTest(records.Task{ID: s.ID, Split: records.HeldOut}), s.ID)
				require.NotEmpty(t, lab.RegionOf(s.ID), s.ID)
			}
			for _, s := range train {
				require.False(t, isTest(records.Task{ID: s.ID, Split: records.Train}), s.ID)
			}
			_, err := parseFlags([]string{"-suite", name}, &bytes.Buffer{})
			require.NoError(t, err)
		})
	}
	require.NotEqual(t, options{suite: lab.V3ValName}.tasksDigest(), options{suite: lab.V3TestName}.tasksDigest())
	_, err := parseFlags([]string{"-suite", "v3"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "v3-val, v3-test")
	var help bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &help)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, help.String(), "v3-val (")
	require.Contains(t, help.String(), "v3-test (")
}

// Every cell carries its task; its stratum is the task's region for the
// V3 splits and the v2 part label of earlier reports otherwise.
func TestCellsOfCarryRegionsAndTasks(t *testing.T) {
	tests := []struct {
		suite, task, stratum string
	}{
		{lab.V3TestName, "v3-test/in-distribution/ar-prose/00", lab.RegionIn},
		{lab.V3TestName, "v3-test/compute-starved/mdm/01", lab.RegionStarved},
		{lab.V3TestName, "v3-test/compute-rich/mdm/01", lab.RegionRich},
		{lab.V3ValName, "v3-val/new-corpora/ar-code/00", lab.RegionCorpora},
		{"v2", "v2s1/test-in/ar-code/00", "/test-in/"},
		{"v2", "v2s1/test-out/ar-code/00", "/test-out/"},
		{"v2-val", "v2s1/val-out/mdm/03", "/val-out/"},
		{"v1", "held-out-prose", ""},
	}
	for _, tt := range tests {
		t.Run(tt.suite+":"+tt.task, func(t *testing.T) {
			rs := []Result{{Seed: 7, States: []StateResult{{ID: tt.task + "#0", Task: tt.task, Gains: []float64{1, -2}}}}}
			require.Equal(t, []evalstat.Cell{{Seed: 7, State: tt.task + "#0", Task: tt.task, Stratum: tt.stratum, Gains: []float64{1, -2}}},
				cellsOf(tt.suite, rs))
		})
	}
}

// v3Results are hand-built results of Base, SFT and LM2LM on a V3 split:
// two seeds; in each region two tasks of two states each. A task's gains
// are mostly its own level (tasks differ much, states of a task little),
// the case where resampling tasks widens the intervals.
func v3Results(suite string) []Result {
	level := map[string]float64{"base": -2, "sft": 0, "lm2lm": 1}
	var rs []Result
	for _, m := range []string{"base", "sft", "lm2lm"} {
		for seed := uint64(1); seed <= 2; seed++ {
			r := Result{Method: m, Seed: seed, Suite: suite}
			for ri, region := range lab.RegionNames {
				for k := range 2 {
					task := fmt.Sprintf("%s/%s/mdm/%02d", suite, region, k)
					for st := range 2 {
						g := level[m] + float64(ri) - 1.5 + 3*float64(2*k-1) + 0.1*float64(st) + 0.05*float64(seed)
						if m == "lm2lm" && region == lab.RegionRich {
							g -= 4 // worse than SFT there: the best baseline wins this region
						}
						r.States = append(r.States, StateResult{ID: fmt.Sprintf("%s#%d", task, st), Task: task, Gains: []float64{g, g + 0.5}})
					}
				}
			}
			rs = append(rs, r)
		}
	}
	return rs
}

func byMethodOf(rs []Result) ([]string, map[string][]Result) {
	by := map[string][]Result{}
	var names []string
	for _, r := range rs {
		if _, ok := by[r.Method]; !ok {
			names = append(names, r.Method)
		}
		by[r.Method] = append(by[r.Method], r)
	}
	return names, by
}

// Every interval and paired difference the driver reports is evalstat's
// under the hierarchical bootstrap for those cells; the state-level ones
// beside them are evalstat's under StateLevel, from the same seeds, and
// narrower here (they hold the tasks fixed); per region, the summaries,
// the pairs with each region's best baseline and the pairs of the whole
// split are evalstat's on that region's cells.
func TestStatisticsAreHierarchical(t *testing.T) {
	const resamples = 300
	o := options{suite: lab.V3TestName, resamples: resamples}
	names, by := byMethodOf(v3Results(o.suite))
	st, err := statistics(o, names, by)
	require.NoError(t, err)
	hier, state := configs(resamples)
	require.Equal(t, evalstat.Hierarchical, hier.Scheme)
	require.Equal(t, evalstat.StateLevel, state.Scheme)
	require.Len(t, st.sums, 3)
	for i, m := range names {
		label := methods[m].label
		cells := cellsOf(o.suite, by[m])
		want, err := evalstat.Summarize(hier, label, cells, bootstrapRNG(resamples, m))
		require.NoError(t, err)
		require.Equal(t, want, st.sums[i], m)
		wantState, err := evalstat.Summarize(state, label, cells, bootstrapRNG(resamples, m))
		require.NoError(t, err)
		require.Equal(t, wantState, st.sumsState[i], m)
		require.InDelta(t, want.AvgK.Point, wantState.AvgK.Point, 1e-12, "the point estimates do not depend on the bootstrap")
		require.Greater(t, want.AvgK.High-want.AvgK.Low, wantState.AvgK.High-wantState.AvgK.Low,
			"%s: resampling tasks widens the interval when tasks differ", m)

		parts := st.parts[i]
		require.Len(t, parts, len(lab.RegionNames))
		for k, p := range parts {
			r := lab.RegionNames[k]
			require.Equal(t, r, p.Part)
			require.Equal(t, r, p.Summary.Region)
			in := evalstat.InRegion(cells, r)
			require.Len(t, in, 2*2*2, "2 seeds × 2 tasks × 2 states")
			ws, err := evalstat.Summarize(hier, label, in, bootstrapRNG(resamples, "part:"+label+r))
			require.NoError(t, err)
			ws.Region = r
			require.Equal(t, ws, p.Summary)
			ws, err = evalstat.Summarize(state, label, in, bootstrapRNG(resamples, "part:"+label+r))
			require.NoError(t, err)
			ws.Region = r
			require.Equal(t, ws, p.SummaryStateLevel)
			if methods[m].baseline {
				require.Nil(t, p.VsBest)
				require.Nil(t, p.VsBestStateLevel)
				continue
			}
			require.NotNil(t, p.VsBest)
			require.NotNil(t, p.VsBestStateLevel)
			require.Equal(t, r, p.VsBest.Region)
			require.Equal(t, methods["sft"].label, p.VsBest.Against, "SFT is the best baseline but Base in every region")
			// LM2LM − SFT: 1 everywhere but compute-rich, where it is 1 − 4.
			wantDiff := 1.0
			if r == lab.RegionRich {
				wantDiff = -3
			}
			require.InDelta(t, wantDiff, p.VsBest.Diff.Point, 1e-12, r)
			require.InDelta(t, wantDiff, p.VsBestStateLevel.Diff.Point, 1e-12, r)
		}
	}

	// Pairs: SFT and LM2LM against Base, LM2LM against SFT (the best baseline).
	require.Len(t, st.pairs, 3)
	require.Len(t, st.pairsState, 3)
	require.Len(t, st.regionPairs, 3*len(lab.RegionNames))
	against := [][2]string{{"sft", "base"}, {"lm2lm", "base"}, {"lm2lm", "sft"}}
	for i, pa := range against {
		m, a := pa[0], pa[1]
		cm, ca := cellsOf(o.suite, by[m]), cellsOf(o.suite, by[a])
		want, err := evalstat.Compare(hier, methods[m].label, cm, methods[a].label, ca, bootstrapRNG(resamples, m+"\x00"+a))
		require.NoError(t, err)
		require.Equal(t, want, st.pairs[i])
		wantState, err := evalstat.Compare(state, methods[m].label, cm, methods[a].label, ca, bootstrapRNG(resamples, m+"\x00"+a))
		require.NoError(t, err)
		require.Equal(t, wantState, st.pairsState[i])
		wantRegions, err := evalstat.CompareRegions(hier, methods[m].label, cm, methods[a].label, ca, bootstrapRNG(resamples, "region:"+m+"\x00"+a))
		require.NoError(t, err)
		got := st.regionPairs[i*len(lab.RegionNames) : (i+1)*len(lab.RegionNames)]
		require.Equal(t, wantRegions, got)
		for k, p := range got {
			require.Equal(t, lab.RegionNames[k], p.Region)
			require.Equal(t, 2*2*2, p.Pairs)
		}
	}
	// LM2LM − Base: 3 in every region but compute-rich, where it is 3 − 4;
	// over the split (equal states per region) (3 + 3 − 1 + 3) / 4 = 2.
	require.InDelta(t, 2, st.pairs[1].Diff.Point, 1e-12)
	for k, want := range []float64{3, 3, -1, 3} {
		require.InDelta(t, want, st.regionPairs[len(lab.RegionNames)+k].Diff.Point, 1e-12, lab.RegionNames[k])
	}
}

// The report of a V3 split: the header line names the hierarchical
// bootstrap, the tables have a column group per region, and the JSON
// holds the hierarchical figures, the state-level ones beside them and
// the per-region summaries and pairs. A v2 report keeps its two parts.
func TestReportPerRegion(t *testing.T) {
	tests := []struct {
		suite   string
		results []Result
		headers []string
		regions bool
	}{
		{lab.V3ValName, v3Results(lab.V3ValName), []string{
			"| method | in-distribution: Avg@K | > 2σ_e | compute-starved: Avg@K | > 2σ_e | compute-rich: Avg@K | > 2σ_e | new-corpora: Avg@K | > 2σ_e |\n|---|---|---|---|---|---|---|---|---|\n",
			"| method | in-distribution: Δ vs best baseline there | P(better) | compute-starved: Δ vs best baseline there | P(better) | " +
				"compute-rich: Δ vs best baseline there | P(better) | new-corpora: Δ vs best baseline there | P(better) |\n",
			"| method | vs | in-distribution: Δ | P(better) | compute-starved: Δ | P(better) | compute-rich: Δ | P(better) | new-corpora: Δ | P(better) |\n" +
				"|---|---|---|---|---|---|---|---|---|---|\n",
			"| LM2LM | SFT on M₀ | +1.00 [",
		}, true},
		{"v2", v2Results(), []string{
			"| method | in distribution: Avg@K | > 2σ_e | out of distribution: Avg@K | > 2σ_e |\n|---|---|---|---|---|\n",
			"| method | in distribution: Δ vs best baseline there | P(better) | out of distribution: Δ vs best baseline there | P(better) |\n",
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.suite, func(t *testing.T) {
			o := options{methods: []string{"base", "sft", "lm2lm"}, seeds: 2, firstSeed: 1, profile: "tiny", suite: tt.suite, resamples: 200}
			dir := t.TempDir()
			var w bytes.Buffer
			require.NoError(t, report(&w, o, dir, tt.results, nil))
			md, err := os.ReadFile(filepath.Join(dir, "compare-seeds1-2-base+sft+lm2lm.md"))
			require.NoError(t, err)
			first, _, _ := strings.Cut(string(md), "\n")
			require.Contains(t, first, "95% intervals in brackets from the hierarchical bootstrap (seeds, then tasks within each region, then states")
			require.Contains(t, first, "state-level intervals of earlier reports beside them, as *_state_level")
			for _, h := range tt.headers {
				require.Contains(t, string(md), h)
			}
			require.Equal(t, tt.regions, strings.Contains(string(md), "| method | vs |"))
			_, err = os.Stat(filepath.Join(dir, "compare-seeds1-2-base+sft+lm2lm-regions.png"))
			if tt.regions {
				require.NoError(t, err, "the V3 splits draw the regions chart")
				require.Contains(t, w.String(), "-regions.png")
			} else {
				require.ErrorIs(t, err, fs.ErrNotExist, "lab v2's parts are not regions")
			}
			require.Contains(t, w.String(), first, "the printed table is the Markdown's")

			b, err := os.ReadFile(filepath.Join(dir, "compare-seeds1-2-base+sft+lm2lm.json"))
			require.NoError(t, err)
			var raw map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(b, &raw))
			require.JSONEq(t, `"hierarchical"`, string(raw["interval_scheme"]))
			require.Contains(t, raw, "pairs_state_level")
			_, hasRegionPairs := raw["region_pairs"]
			require.Equal(t, tt.regions, hasRegionPairs)
			require.Contains(t, string(raw["methods"]), `"summary_state_level"`)
			require.Contains(t, string(raw["methods"]), `"vs_best_baseline_state_level"`)

			var c Comparison
			require.NoError(t, json.Unmarshal(b, &c))
			names, by := byMethodOf(tt.results)
			st, err := statistics(o, names, by)
			require.NoError(t, err)
			require.Equal(t, st.pairs, c.Pairs)
			require.Equal(t, st.pairsState, c.PairsStateLevel)
			require.Equal(t, st.regionPairs, c.RegionPairs)
			for i := range names {
				require.Equal(t, st.sums[i], c.Methods[i].Summary)
				require.Equal(t, st.sumsState[i], c.Methods[i].SummaryStateLevel)
				require.NotEqual(t, c.Methods[i].Summary.AvgK, c.Methods[i].SummaryStateLevel.AvgK, "two bootstraps, two intervals")
				require.Len(t, c.Methods[i].Parts, len(st.parts[i]))
				for k, p := range c.Methods[i].Parts {
					require.Equal(t, st.parts[i][k].Part, p.Part)
					require.Equal(t, st.parts[i][k].Summary, p.Summary)
					require.Equal(t, st.parts[i][k].SummaryStateLevel, p.SummaryStateLevel)
					require.Equal(t, st.parts[i][k].VsBest, p.VsBest)
				}
			}
			if tt.regions {
				require.Equal(t, lab.RegionCorpora, c.Methods[2].Parts[3].Part)
				require.Equal(t, lab.RegionCorpora, c.Methods[2].Parts[3].Summary.Region)
			} else {
				require.Equal(t, "in", c.Methods[0].Parts[0].Part)
				require.Empty(t, c.Methods[0].Parts[0].Summary.Region, "v2 parts are not regions")
			}
		})
	}
}

// v2Results are hand-built results of Base, SFT and LM2LM on lab v2's
// test split: two seeds, two tasks in and two out of distribution.
func v2Results() []Result {
	level := map[string]float64{"base": -2, "sft": 0, "lm2lm": 1}
	var rs []Result
	for _, m := range []string{"base", "sft", "lm2lm"} {
		for seed := uint64(1); seed <= 2; seed++ {
			r := Result{Method: m, Seed: seed, Suite: "v2"}
			for _, part := range []string{"test-in", "test-out"} {
				for k := range 2 {
					task := fmt.Sprintf("v2s1/%s/mdm/%02d", part, k)
					g := level[m] + 3*float64(2*k-1) + 0.1*float64(seed)
					r.States = append(r.States, StateResult{ID: task + "#0", Task: task, Gains: []float64{g, g + 1}})
				}
			}
			rs = append(rs, r)
		}
	}
	return rs
}

// -eval-states replaces the profile's evaluation states: the profile the
// jobs run and record has them, the run directory and the command name
// them, and the profile's own value is no lever.
func TestEvalStatesFlag(t *testing.T) {
	o, err := parseFlags([]string{"-suite", lab.V3ValName, "-eval-states", "4", "-seeds", "6"}, &bytes.Buffer{})
	require.NoError(t, err)
	p, err := o.prof()
	require.NoError(t, err)
	require.Equal(t, 4, p.EvalStates)
	require.Equal(t, filepath.Join("out/compare", "v3-val-default-es4"), runDir(o))
	require.Equal(t, "go run ./examples/compare -profile default -suite v3-val -seeds 6 -eval-states 4", command(o))
	require.Equal(t, 45*4*4+100+100, expectedRuns(o, methods["bestknown"], 45), "45 tasks × 4 states × K 4, and M'_0: M_0 100 and the calibration budget 100")

	o, err = parseFlags([]string{"-eval-states", "8"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out/compare", "v2-default"), runDir(o), "the profile's own value changes nothing")
	_, err = parseFlags([]string{"-eval-states", "-1"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-eval-states -1")
}

// The report sizes each pair against the best baseline: the variance
// components of its per-state differences, the measured half-width and
// the predicted ones; here LM2LM − SFT, whose differences vary only by
// region.
func TestReportPower(t *testing.T) {
	o := options{methods: []string{"base", "sft", "lm2lm"}, seeds: 2, firstSeed: 1, profile: "tiny", suite: lab.V3ValName, resamples: 200}
	rs := v3Results(lab.V3ValName)
	names, by := byMethodOf(rs)
	st, err := statistics(o, names, by)
	require.NoError(t, err)
	require.Len(t, st.power, 1)
	pw := st.power[0]
	require.Equal(t, methods["lm2lm"].label, pw.Method)
	require.Equal(t, methods["sft"].label, pw.Against)
	d, err := evalstat.Differences(cellsOf(o.suite, by["lm2lm"]), cellsOf(o.suite, by["sft"]))
	require.NoError(t, err)
	want, err := evalstat.VarianceComponents(d)
	require.NoError(t, err)
	require.Equal(t, want, pw.Components)
	require.Equal(t, 8, pw.Components.Tasks)
	require.Equal(t, 4, pw.Components.Regions)
	// LM2LM − SFT is 1 on every state but compute-rich's, −3: no spread
	// within a region, so every component and the predicted width are 0.
	require.InDelta(t, 0, pw.Components.State+pw.Components.Task+pw.Components.Seed+pw.Components.SeedTask, 1e-12)
	require.InDelta(t, 0, pw.Predicted, 1e-9)
	require.Len(t, pw.Designs, len(powerSeeds)*len(powerStates))
	require.Equal(t, (st.pairs[2].Diff.High-st.pairs[2].Diff.Low)/2, pw.Measured)

	var b strings.Builder
	powerTable(&b, st.power)
	require.Contains(t, b.String(), "Power of LM2LM − SFT on M₀ (per-state differences, 2 seeds × 8 tasks in 4 regions, 2.0 states per task)")
	require.Contains(t, b.String(), "| seeds | 1 states | 2 states | 4 states | 8 states |\n|---|---|---|---|---|\n| 3 | ±0.00 |")

	one := options{methods: o.methods, seeds: 1, firstSeed: 1, profile: "tiny", suite: lab.V3ValName, resamples: 200}
	var seed1 []Result
	for _, r := range rs {
		if r.Seed == 1 {
			seed1 = append(seed1, r)
		}
	}
	names, by = byMethodOf(seed1)
	st, err = statistics(one, names, by)
	require.NoError(t, err)
	require.Empty(t, st.power, "one seed sizes nothing")
}

// The world model's judgement per region, by hand: within-state pairs
// with real gains ≥ 1 σ_e apart, and the bias on each state's top-rated
// proposal with both gains clipped to ±6.
func TestEvalPredictionParts(t *testing.T) {
	in, rich := "v3-val/in-distribution/mdm/00", "v3-val/compute-rich/mdm/00"
	rs := []Result{
		{Seed: 1, States: []StateResult{
			// top-rated: the first (2 vs real 1, bias +1); pairs: (1,3) wrong, (1,−2) right, (3,−2) right.
			{ID: in + "#0", Task: in, Gains: []float64{1, 3, -2}, Predicted: []float64{2, 1, 0}},
			// top-rated: the first, clipped 6 vs −6: bias +12; the one pair wrong.
			{ID: rich + "#0", Task: rich, Gains: []float64{-100, 2}, Predicted: []float64{10, 1}},
		}},
		{Seed: 2, States: []StateResult{
			// bias 5 − 0; its pair is 0.5 σ_e apart and does not count.
			{ID: in + "#0", Task: in, Gains: []float64{0, 0.5}, Predicted: []float64{5, 1}},
			{ID: rich + "#0", Task: rich, Gains: []float64{1, 2}}, // no predictions: left out
		}},
	}
	got := evalPredictionParts(lab.V3ValName, rs)
	require.Len(t, got, 2)
	require.Equal(t, lab.RegionIn, got[0].Part)
	require.InDelta(t, 2.0/3, *got[0].Pairwise, 1e-12)
	require.Equal(t, 3, got[0].Pairs)
	require.InDelta(t, 3.0, got[0].TopBias, 1e-12)
	require.Equal(t, 2, got[0].TopStates)
	require.Equal(t, lab.RegionRich, got[1].Part)
	require.InDelta(t, 0.0, *got[1].Pairwise, 1e-12)
	require.Equal(t, 1, got[1].Pairs)
	require.InDelta(t, 12.0, got[1].TopBias, 1e-12)
	require.Equal(t, 1, got[1].TopStates)
	require.Nil(t, evalPredictionParts(lab.V3ValName, []Result{{States: []StateResult{{Task: in, Gains: []float64{1}}}}}))

	var b strings.Builder
	evalPartsTable(&b, []MethodSummary{{Summary: evalstat.Summary{Method: "LM2LM"}, EvalParts: got}})
	require.Contains(t, b.String(), "| LM2LM | 0.667 | +3.00 | 0.000 | +12.00 |")
	require.Contains(t, b.String(), "in-distribution: pairwise accuracy | bias on the top-rated")
}

// -hold-out-family: the family's training tasks leave training, and the
// evaluation is the family's tasks of the suite's test split only.
func TestHoldOutFamily(t *testing.T) {
	o := options{suite: lab.V3ValName, holdOut: "mdm"}
	specs, isTest, err := o.tasks()
	require.NoError(t, err)
	sp, _ := lab.SplitNamed(lab.V3ValName)
	train, test := 0, 0
	for _, s := range specs {
		task := records.Task{ID: s.ID, Family: s.Family, Split: s.Split}
		if s.Family == "mdm" {
			require.NotEqual(t, records.Train, s.Split, s.ID)
		} else if s.Split == records.Train {
			train++
		}
		if isTest(task) {
			test++
			require.Equal(t, "mdm", s.Family)
			require.True(t, sp.Contains(s.ID), "only the split's tasks: %s", s.ID)
		}
	}
	require.Equal(t, 48, train, "the other three families' 16 training tasks each")
	require.Equal(t, 12, test)
	o.holdOut = "no-such-family"
	_, _, err = o.tasks()
	require.ErrorIs(t, err, lab.ErrUnknownFamily)
	require.Error(t, o.validate())
}

// newEnv takes the test tasks from environment.Prepare's split, training
// tasks first: the suite's order holds because every suite's test tasks
// are all training tasks (v2-train) or all held out.
func TestTestTasksAreOneSideOfTheSplit(t *testing.T) {
	for _, suite := range suiteNames() {
		specs, isTest, err := options{suite: suite}.tasks()
		require.NoError(t, err)
		train, held := 0, 0
		for _, s := range specs {
			if !isTest(records.Task{ID: s.ID, Family: s.Family, Split: s.Split}) {
				continue
			}
			if s.Split == records.Train {
				train++
			} else {
				held++
			}
		}
		require.Positive(t, train+held, suite)
		require.True(t, train == 0 || held == 0, "%s: %d training and %d held-out test tasks", suite, train, held)
	}
}
