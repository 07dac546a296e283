package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/prior"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func TestHelpSaysWhatItDoes(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.True(t, strings.HasPrefix(stderr.String(), "compare runs every method"), stderr.String())
	require.Contains(t, stderr.String(), "-methods")
}

func TestFlagsValidatedTogether(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-methods", "lm2lm,bogus"}, []string{`unknown method "bogus"`, "valid: base, sft, rft, rft-corpus, bestknown, bestknown-corpus, rerank, rerank-prior, choice, static, static-random, random, lm2lm, lm2lm-wmrl, static-wmrl, lm2lm-rerank, lm2lm-choice, real-gains"}},
		{[]string{"-methods", "lm2lm,lm2lm"}, []string{`"lm2lm" appears twice`}},
		{[]string{"-methods", ","}, []string{"-methods is empty"}},
		{[]string{"-profile", "huge", "-suite", "v3"}, []string{"valid: tiny, short, default, paper", "valid: v2, v2-val, v2-val2, v2-train, v3-val, v3-test, v1"}},
		{[]string{"-seeds", "0", "-parallel", "0", "-resamples", "10"}, []string{"-seeds 0", "-parallel 0", "-resamples 10"}},
		{[]string{"-progress", "fancy", "-probe", "-1"}, []string{"valid: auto, bar, lines", "-probe -1"}},
		{[]string{"extra"}, []string{"unexpected arguments"}},
		{[]string{"-setting", "chosen"}, []string{`-setting: setting: unknown name: setting "chosen"; valid: validated, library`}},
		{[]string{"-pessimism", "1.5"}, []string{"-pessimism 1.5; want in [0, 1]"}},
		{[]string{"-pessimism", "NaN"}, []string{"-pessimism NaN"}},
		{[]string{"-suite", "v3-val", "-methods", "rerank,rerank-prior", "-hold-out-family", "mdm"}, []string{"-hold-out-family mdm: rerank-prior's pretrained prior was fitted on a corpus that holds that family"}},
		{[]string{"-rerank-temperature", "-1"}, []string{"-rerank-temperature -1; want in (0, 100]"}},
		{[]string{"-methods", "lm2lm", "-rerank-temperature", "4"}, []string{"-rerank-temperature 4: no method of -methods reranks a trained policy"}},
	}
	for _, tt := range tests {
		_, err := parseFlags(tt.args, &bytes.Buffer{})
		require.ErrorIs(t, err, errUsage, tt.args)
		for _, w := range tt.want {
			require.ErrorContains(t, err, w)
		}
	}
	o, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, defaultMethods(), o.methods)
	require.Equal(t, 5, o.seeds)
	o, err = parseFlags([]string{"-methods", "lm2lm,lm2lm-rerank", "-rerank-temperature", "4"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "v2-default-rt4", filepath.Base(runDir(o)), "another candidates' temperature names its run directory")
	o, err = parseFlags([]string{"-methods", "lm2lm,lm2lm-rerank"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "v2-default", filepath.Base(runDir(o)), "the default does not")
	_, err = parseFlags([]string{"-setting", "nope"}, &bytes.Buffer{})
	require.ErrorIs(t, err, setting.ErrUnknown)
	// The levers of the setting are no flags: a setting is chosen whole.
	for _, f := range []string{"-policy-lr", "-description-buckets", "-descriptor-buckets", "-descriptor-spread", "-history-proposal-buckets",
		"-policy-hidden", "-policy-hidden-init-std", "-world-descriptors", "-eval-temperature", "-train-temperature", "-group", "-steps",
		"-calibration-schedule", "-calibration-per-task", "-held-out-task", "-history"} {
		_, err := parseFlags([]string{f, "1"}, &bytes.Buffer{})
		require.ErrorContains(t, err, "flag provided but not defined", f)
	}
	for _, f := range []string{"-world-tune", "-world-effects", "-policy-descriptor-inputs", "-policy-descriptor-linear", "-rerank-history", "-eval-predict-history"} {
		_, err := parseFlags([]string{f}, &bytes.Buffer{})
		require.ErrorContains(t, err, "flag provided but not defined", f)
	}
}

// tinyTasks is a few autoregressive tasks of suite v1: three for training,
// one held out.
func tinyTasks() []lab.TaskSpec {
	var train, held []lab.TaskSpec
	for _, s := range lab.SuiteV1() {
		if !strings.HasPrefix(s.Family, "ar-") {
			continue
		}
		if s.Split == records.Train && len(train) < 3 {
			train = append(train, s)
		} else if s.Split == records.HeldOut && len(held) < 1 {
			held = append(held, s)
		}
	}
	return append(train, held...)
}

// TestCompareEndToEnd runs five methods × two seeds on the real lab with
// the tiny profile, then again: the second invocation runs nothing, pays
// for nothing and prints the same table.
func TestCompareEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains about 150 tiny models; runs without -short")
	}
	o := options{methods: []string{"base", "sft", "bestknown", "static", "lm2lm"}, seeds: 2, firstSeed: 1, profile: "tiny", suite: "v1", probe: 2,
		out: cmp.Or(os.Getenv("LM2LM_COMPARE_OUT"), t.TempDir()), progress: "lines", parallel: 2, resamples: 200, specs: tinyTasks()}
	var first bytes.Buffer
	require.NoError(t, run(context.Background(), &first, o))
	t.Log(first.String())
	dir := runDir(o)
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	p := filepath.Join(dir, "compare-seeds1-2-base+sft+bestknown+static+lm2lm")
	for _, f := range []string{".md", ".json", "-methods.png", "-training.png", "-reliability.png", "-calibration.png"} {
		require.Contains(t, files, p+f)
	}
	for _, m := range o.methods {
		for _, s := range []string{"1", "2"} {
			require.FileExists(t, filepath.Join(dir, "runs", m+"-seed"+s+".json"))
		}
	}
	require.Contains(t, first.String(), "0 finished earlier, 10 to run")
	require.Contains(t, first.String(), "msg=progress")
	r, ok, err := readResult(dir, job{"lm2lm", 2}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, r.Steps, 16)
	require.Len(t, r.Calibrations, 1)
	require.Equal(t, 4, r.States[0].Infeasible+len(r.States[0].Gains)-r.States[0].Infeasible) // K = 4 proposals
	require.Equal(t, 8+4, r.Budget())                                                         // M_0 + one calibration of 4
	require.Len(t, r.Probes, 2)                                                               // at the calibration step 8 and after step 16
	st, ok, err := readResult(dir, job{"static", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 8, st.Budget(), "the static world model pays for M_0 only")
	require.Empty(t, st.Calibrations)
	require.Len(t, st.Probes, 2)
	require.Equal(t, 8, st.Probes[0].Step)
	require.Equal(t, 16, st.Probes[1].Step)
	require.Positive(t, st.Probes[0].Executed)
	require.Equal(t, st.Probes[0].Executed, len(st.Probes[0].Real))
	require.Equal(t, st.Probes[0].Executed+st.Probes[1].Executed, st.Runs.Probe.Fresh+st.Runs.Probe.Reused)
	bk, ok, err := readResult(dir, job{"bestknown", 2}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 8+4, bk.M0, "M'_0: M_0 and the calibration budget in random records")
	require.Equal(t, 8+4, bk.Budget())
	stat, err := os.Stat(filepath.Join(dir, "records.jsonl"))
	require.NoError(t, err)

	var second bytes.Buffer
	require.NoError(t, run(context.Background(), &second, o))
	require.Contains(t, second.String(), "10 finished earlier, 0 to run")
	require.Contains(t, second.String(), "this invocation: 0 real runs paid for (0 CPU s), 0 reused")
	require.Equal(t, table(first.String()), table(second.String()))
	again, err := os.Stat(filepath.Join(dir, "records.jsonl"))
	require.NoError(t, err)
	require.Equal(t, stat.Size(), again.Size(), "the second invocation recorded no run")

	checkRobustRereport(t, o, files) // the same runs on the robust scale, beside the raw files

	// Other results behind an existing table: refused, then replaced with -force.
	// (A changed result with its checksum recomputed: TestResultFilesAreCheckedOnRead
	// shows that one without is refused.)
	tamper(t, resultPath(dir, job{"base", 1}), `"gains_sigma":[`, `"gains_sigma":[4,`, true)
	err = run(context.Background(), &bytes.Buffer{}, o)
	require.ErrorContains(t, err, "would change")
	require.ErrorContains(t, err, "-force")
	o.force = true
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, o))
}

// table is the Markdown table of a run's output.
func table(out string) string {
	i := strings.Index(out, "\n`go run ./examples/compare")
	j := strings.Index(out, "written: ")
	if i < 0 || j < i {
		return ""
	}
	return out[i:j]
}

func TestResultFilesAreNeverReplaced(t *testing.T) {
	dir := t.TempDir()
	j := job{"lm2lm", 3}
	require.NoError(t, writeResult(dir, j, Result{Method: "lm2lm", Seed: 3}))
	fi, err := os.Stat(resultPath(dir, j))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	err = writeResult(dir, j, Result{Method: "lm2lm", Seed: 3, M0: 7})
	require.True(t, errors.Is(err, os.ErrExist), err)
	o := options{profile: "tiny", suite: "v1"}
	_, _, err = readResult(dir, j, o)
	require.ErrorContains(t, err, "move it away")
	_, ok, err := readResult(dir, job{"base", 1}, o)
	require.NoError(t, err)
	require.False(t, ok)
}

// A result measured on other tasks (the generator changed since) is never
// read back as this suite's.
func TestResultOfOtherTasksIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := options{profile: "short", suite: "v2-val"}
	r := testResult(o, "rft", 1)
	require.NoError(t, writeResult(dir, job{"rft", 1}, r))
	got, ok, err := readResult(dir, job{"rft", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r.Tasks, got.Tasks)
	require.Len(t, got.Tasks, 24)
	require.NotEqual(t, options{suite: "v2"}.tasksDigest(), options{suite: "v2-val"}.tasksDigest())
	// A held-out family is another set of tasks: its results live apart.
	require.NotEqual(t, options{suite: "v3-val"}.tasksDigest(), options{suite: "v3-val", holdOut: "mdm"}.tasksDigest())

	r.Seed, r.Tasks = 2, "0123456789abcdef01234567"
	require.NoError(t, writeResult(dir, job{"rft", 2}, r))
	_, ok, err = readResult(dir, job{"rft", 2}, o)
	require.ErrorContains(t, err, "measured on other tasks of suite v2-val or another catalogue")
	require.False(t, ok)
}

// The digest covers the action space too: a result measured with other
// cards (e.g. absolute size choices) is refused like one of other tasks.
func TestLabDigestCoversTheCatalogue(t *testing.T) {
	specs, _ := suiteTasks("v2-val")
	cat := lab.Catalogue()
	require.Equal(t, options{suite: "v2-val"}.tasksDigest(), labDigest(specs, cat))
	old := lab.Catalogue()
	for i := range old {
		if old[i].Mechanism == "width" {
			old[i].Params = []records.ParamSpec{{Name: "hidden", Kind: "int", Choices: []string{"256", "64", "192"}, Min: 8, Max: 512}}
		}
	}
	require.NotEqual(t, labDigest(specs, cat), labDigest(specs, old))
	require.NotEqual(t, labDigest(specs, cat), labDigest(specs[1:], cat))
	require.Equal(t, labDigest(specs, cat), labDigest(specs, lab.Catalogue()), "deterministic")
}

func TestTrainerLevers(t *testing.T) {
	// -pessimism reaches the trained methods' reward config; -trigger times
	// the calibrating methods (MinPairs capped at the short profile's 8-run
	// budgets, the default profile keeps 16) and leaves the static ones on
	// no calibration; both off by default.
	o, err := parseFlags([]string{"-profile", "short", "-pessimism", "0.5", "-trigger"}, &bytes.Buffer{})
	require.NoError(t, err)
	for _, name := range []string{"lm2lm", "random", "lm2lm-wmrl", "static", "static-wmrl"} {
		cfg := trainerConfig(o, methods[name], 3)
		require.NoError(t, cfg.Validate(), name)
		require.Equal(t, 0.5, cfg.Reward.Pessimism, name)
		if methods[name].calibration == lm2lm.Static {
			require.Nil(t, cfg.Trigger, name)
			continue
		}
		require.NotNil(t, cfg.Trigger, name)
		require.Equal(t, 8, cfg.Trigger.Rule.MinPairs, name)
		require.Equal(t, 8, cfg.Trigger.Rule.MinInterval, name)
		require.Zero(t, cfg.Trigger.Horizon, name)
	}
	o.profile = "default"
	require.Equal(t, 16, trainerConfig(o, methods["lm2lm"], 1).Trigger.Rule.MinPairs)
	o, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	cfg := trainerConfig(o, methods["lm2lm"], 1)
	require.Zero(t, cfg.Reward.Pessimism)
	require.Nil(t, cfg.Trigger)
}

func TestCommandReproducesTheFlags(t *testing.T) {
	o, err := parseFlags([]string{"-profile", "short", "-seeds", "2", "-probe", "2", "-methods", "base,lm2lm"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "go run ./examples/compare -profile short -suite v2 -seeds 2 -methods base,lm2lm -probe 2", command(o))
	require.Equal(t, "compare-seeds1-2-base+lm2lm", prefix(o))
	o, err = parseFlags([]string{"-first-seed", "3", "-setting", "library"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "go run ./examples/compare -profile default -suite v2 -seeds 5 -first-seed 3 -setting library", command(o))
	require.Equal(t, "compare-seeds3-7", prefix(o))
}

// Each part of the split (in and out of distribution) gets its own
// summary, in first, and its own table in the Markdown.
func TestPartSummaries(t *testing.T) {
	cells := []evalstat.Cell{
		{Seed: 1, State: "a#0", Stratum: "/test-out/", Gains: []float64{-4, -2}},
		{Seed: 1, State: "b#0", Stratum: "/test-in/", Gains: []float64{1, 3}},
		{Seed: 1, State: "c#0", Stratum: "/test-in/", Gains: []float64{2, 4}},
		{Seed: 2, State: "a#0", Stratum: "/test-out/", Gains: []float64{-1, 0}},
	}
	cfg := evalstat.DefaultConfig()
	cfg.Resamples = 200
	parts, err := partSummaries(cfg, "LM2LM", cells)
	require.NoError(t, err)
	require.Len(t, parts, 2)
	require.Equal(t, "in", parts[0].Part)
	require.Equal(t, "out", parts[1].Part)
	require.InDelta(t, 2.5, parts[0].Summary.AvgK.Point, 1e-12)   // (2 + 3) / 2
	require.InDelta(t, -1.75, parts[1].Summary.AvgK.Point, 1e-12) // (−3 − 0.5) / 2
	require.InDelta(t, 0.5, parts[0].Summary.Above.Point, 1e-12)  // 3 and 4 of 1, 3, 2, 4 above 2σ_e
	one, err := partSummaries(cfg, "LM2LM", cells[1:3])
	require.NoError(t, err)
	require.Nil(t, one, "a split of one part has no part table")

	md := markdown(Comparison{Methods: []MethodSummary{{Summary: evalstat.Summary{Method: "LM2LM"}, Parts: parts}}})
	require.Contains(t, md, "| method | in distribution: Avg@K | > 2σ_e | out of distribution: Avg@K | > 2σ_e |")
	require.Regexp(t, `\| LM2LM \| \+2\.50 \[[-+0-9.]+, [-+0-9.]+\] \| 50\.0% \| -1\.75 \[[-+0-9.]+, [-+0-9.]+\] \| 0\.0% \|`, md)
}

// On each part a trained method is paired with the baseline that is best
// there, which can differ by part: here RFT in distribution, SFT out of it.
func TestPartPairsWithBestBaseline(t *testing.T) {
	cell := func(seed uint64, state, stratum string, g float64) evalstat.Cell {
		return evalstat.Cell{Seed: seed, State: state, Stratum: stratum, Gains: []float64{g, g}}
	}
	in, out := "v2s1/test-in/", "v2s1/test-out/"
	cells := map[string][]evalstat.Cell{
		"base":  {cell(1, "a#0", in, -3), cell(1, "b#0", in, -3), cell(1, "x#0", out, -3), cell(1, "y#0", out, -3)},
		"sft":   {cell(1, "a#0", in, 0), cell(1, "b#0", in, 0), cell(1, "x#0", out, 1), cell(1, "y#0", out, 1)},
		"rft":   {cell(1, "a#0", in, 1), cell(1, "b#0", in, 2), cell(1, "x#0", out, -2), cell(1, "y#0", out, 0)},
		"lm2lm": {cell(1, "a#0", in, 3), cell(1, "b#0", in, 2), cell(1, "x#0", out, 0), cell(1, "y#0", out, 0)},
	}
	names := []string{"base", "sft", "rft", "lm2lm"}
	cfg := evalstat.DefaultConfig()
	cfg.Resamples = 200
	parts := make([][]PartSummary, len(names))
	for i, m := range names {
		ps, err := partSummaries(cfg, methods[m].label, cells[m])
		require.NoError(t, err)
		parts[i] = ps
	}
	require.NoError(t, pairPartsWithBest(cfg, names, parts))
	for i, m := range names[:3] {
		for _, p := range parts[i] {
			require.Nil(t, p.VsBest, "%s is a baseline", m)
		}
	}
	vsIn, vsOut := parts[3][0].VsBest, parts[3][1].VsBest
	// In: RFT 1.5 beats SFT 0; LM2LM − RFT = ((3−1) + (2−2))/2 = 1, better on 1 of 2 states, a tie on the other.
	require.Equal(t, methods["rft"].label, vsIn.Against)
	require.InDelta(t, 1, vsIn.Diff.Point, 1e-12)
	require.InDelta(t, 0.75, vsIn.PImprove.Point, 1e-12)
	// Out: SFT 1 beats RFT −1; LM2LM − SFT = −1 on both states.
	require.Equal(t, methods["sft"].label, vsOut.Against)
	require.InDelta(t, -1, vsOut.Diff.Point, 1e-12)
	require.InDelta(t, 0, vsOut.PImprove.Point, 1e-12)

	md := markdown(Comparison{Methods: []MethodSummary{{Summary: evalstat.Summary{Method: "LM2LM"}, Parts: parts[3]}}})
	require.Contains(t, md, "| method | in distribution: Δ vs best baseline there | P(better) | out of distribution: Δ vs best baseline there | P(better) |")
	require.Regexp(t, `\| LM2LM \| \+1\.00 \[[-+0-9.]+, [-+0-9.]+\] vs RFT on M₀'s gains \| 0\.75 \[[0-9.]+, [0-9.]+\] \| -1\.00 \[-1\.00, -1\.00\] vs SFT on M₀ \| 0\.00 \[0\.00, 0\.00\] \|`, md)
}

func TestTrainSuiteIsInSample(t *testing.T) {
	// -suite v2-train evaluates on the training split itself (a
	// diagnostic): exactly the training tasks, each both trained on and
	// evaluated.
	specs, isTest := suiteTasks("v2-train")
	want := lab.SuiteV2(lab.DefaultSuiteSeed).Train
	require.Equal(t, want, specs)
	require.True(t, isTest(records.Task{ID: want[0].ID, Split: records.Train}))
	require.False(t, isTest(records.Task{ID: "v2s1/val/ar-prose/00", Split: records.HeldOut}))
	_, err := parseFlags([]string{"-suite", "v2-train"}, &bytes.Buffer{})
	require.NoError(t, err)
	_, err = parseFlags([]string{"-suite", "v3"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "v2-train")
}

func TestSecondValidationSplit(t *testing.T) {
	// -suite v2-val2: the default training split and the validation tasks
	// of suite seed 2, none of which is a task of v2-val.
	specs, isTest := suiteTasks("v2-val2")
	train := lab.SuiteV2(lab.DefaultSuiteSeed).Train
	val2 := lab.SuiteV2(SecondValSeed).Val()
	require.Equal(t, append(append([]lab.TaskSpec(nil), train...), val2...), specs)
	first, _ := suiteTasks("v2-val")
	ids := map[string]bool{}
	for _, s := range first {
		ids[s.ID] = true
	}
	for _, s := range val2 {
		require.False(t, ids[s.ID], "%s is a task of v2-val too", s.ID)
		require.True(t, isTest(records.Task{ID: s.ID}), s.ID)
	}
	require.False(t, isTest(records.Task{ID: train[0].ID}))
	require.NotEqual(t, options{suite: "v2-val"}.tasksDigest(), options{suite: "v2-val2"}.tasksDigest())
}

// lm2lm-rerank trains exactly as lm2lm (same seed, same steps, rewards and
// calibrations, same real-run budget) and differs only in how the
// evaluation proposals are chosen.
func TestLM2LMRerankTrainsAsLM2LM(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	o, rs := tinyRun(t, options{}, "lm2lm", "lm2lm-rerank")
	plain, rr := rs["lm2lm"], rs["lm2lm-rerank"]
	require.Equal(t, plain.Steps, rr.Steps)
	require.Equal(t, plain.Calibrations, rr.Calibrations)
	require.Equal(t, plain.Budget(), rr.Budget())
	require.Equal(t, 8+4, rr.Budget(), "M_0 + one calibration of 4: the rerank pays no real run")
	require.Len(t, rr.States, len(plain.States))
	require.NotEqual(t, plain.States, rr.States, "the rerank chose other proposals than the policy's own samples")

	// -rerank-temperature changes the rerank's candidates alone: LM2LM's
	// own evaluation and both trainings stay as they were.
	o, rs = tinyRun(t, options{rerankTemp: 4}, "lm2lm", "lm2lm-rerank")
	hot, same := rs["lm2lm-rerank"], rs["lm2lm"]
	require.Equal(t, plain.States, same.States)
	require.Equal(t, rr.Steps, hot.Steps)
	require.Equal(t, rr.Budget(), hot.Budget())
	require.NotEqual(t, rr.States, hot.States, "candidates drawn at temperature 4 rerank to other proposals")
	require.Equal(t, 4.0, hot.RerankTemperature)
	require.Equal(t, float64(defaultRerankTemp), rr.RerankTemperature)
	require.Zero(t, same.RerankTemperature)
	// A result drawn at another temperature is refused, not read as this one's.
	hotDir := runDir(o)
	o.rerankTemp = 3
	_, ok, err := readResult(hotDir, job{"lm2lm-rerank", 1}, o)
	require.False(t, ok)
	require.ErrorContains(t, err, "drew its candidates at temperature 4, -rerank-temperature gives 3")
}

// The real-gains diagnostic's world model predicts a proposal's real gain
// exactly: the record lm2lm.RunReal returns, paid for once through the
// job's counter and read back afterwards; an infeasible run is an invalid
// prediction. It is never among the default methods.
func TestRealGainsPredictsTheRealRun(t *testing.T) {
	ctx := context.Background()
	o, err := parseFlags([]string{"-profile", "tiny", "-suite", "v1", "-parallel", "1", "-methods", "real-gains"}, &bytes.Buffer{})
	require.NoError(t, err)
	o.specs = tinyTasks()
	e, err := newEnv(ctx, &bytes.Buffer{}, o, filepath.Join(t.TempDir(), "records.jsonl"))
	require.NoError(t, err)
	defer e.store.Close()
	cnt := &counter{next: e.pool}
	w := realGains{b: e.lab, ex: cnt}
	task, p := e.train[0], records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}
	got, err := w.Predict(ctx, rwm.Query{Task: task, Proposal: p})
	require.NoError(t, err)
	require.Equal(t, Runs{Fresh: 1}, Runs{Fresh: cnt.take().Fresh})
	rec, ran, err := lm2lm.RunReal(ctx, e.lab, cnt, task, p)
	require.NoError(t, err)
	require.False(t, ran, "the same (task, proposal) is read back, not paid again")
	require.True(t, got.Valid)
	require.Equal(t, rec.Gain, got.Gain)
	require.NotZero(t, got.Gain)
	again, err := w.Predict(ctx, rwm.Query{Task: task, Proposal: p})
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Zero(t, cnt.take().Fresh)
	// An out-of-range width cannot be built: invalid, with the reason.
	bad := records.Proposal{Mechanism: "width", Params: map[string]string{"factor": "1024"}}
	inf, err := w.Predict(ctx, rwm.Query{Task: task, Proposal: bad})
	require.NoError(t, err)
	require.False(t, inf.Valid)
	require.Contains(t, inf.Reason, "infeasible")
	require.Contains(t, o.methods, "real-gains")
	require.NotContains(t, defaultMethods(), "real-gains")
	require.Contains(t, command(o), " -methods real-gains")
}

// -eval-predict keeps the trained world model's prediction of every
// measured evaluation proposal of a trained method (none for the others)
// and changes nothing else: the same training and the same gains.
func TestEvalPredict(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	o := options{methods: []string{"sft", "lm2lm"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v1",
		out: t.TempDir(), progress: "lines", parallel: 2, resamples: 200, specs: tinyTasks(), predict: true}
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, o))
	dir := runDir(o)
	require.Contains(t, dir, "-pred", dir)
	r, ok, err := readResult(dir, job{"lm2lm", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.NotEmpty(t, r.States)
	for _, st := range r.States {
		require.Len(t, st.Predicted, len(st.Gains), st.ID)
		for _, p := range st.Predicted {
			require.False(t, math.IsNaN(p) || math.IsInf(p, 0), st.ID)
		}
	}
	sft, ok, err := readResult(dir, job{"sft", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	for _, st := range sft.States {
		require.Nil(t, st.Predicted, "SFT has no world model")
	}
	plain := o
	plain.methods, plain.predict = []string{"lm2lm"}, false
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, plain))
	p, ok, err := readResult(runDir(plain), job{"lm2lm", 1}, plain)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, p.Steps, r.Steps, "the same training")
	require.Equal(t, p.Budget(), r.Budget())
	for i, st := range p.States {
		require.Nil(t, st.Predicted)
		require.Equal(t, r.States[i].Gains, st.Gains, st.ID)
	}
}

// Predictions come from the trained methods' world models only: not the
// baselines', and not the real-gains diagnostic's (the lab: its
// "predictions" would be real runs).
func TestPredicts(t *testing.T) {
	var o options
	require.False(t, predicts(o, methods["lm2lm"]), "off by default")
	for _, flags := range []options{{predict: true}} {
		for name, want := range map[string]bool{"lm2lm": true, "static": true, "random": true, "lm2lm-wmrl": true,
			"lm2lm-rerank": true, "sft": false, "rerank": false, "base": false, "real-gains": false} {
			require.Equal(t, want, predicts(flags, methods[name]), name)
		}
	}
}

// rerank-prior reranks as the rerank does, with the pretrained prior in its
// world model: the same budget, the prior's digest recorded, other
// proposals.
func TestRerankPriorEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	_, rs := tinyRun(t, options{}, "rerank", "rerank-prior")
	plain, withPrior := rs["rerank"], rs["rerank-prior"]
	p, err := prior.V2()
	require.NoError(t, err)
	require.Equal(t, p.Digest(), withPrior.Prior)
	require.Empty(t, plain.Prior)
	require.Equal(t, plain.Budget(), withPrior.Budget())
	require.NotEqual(t, plain.States, withPrior.States, "the prior's world model picks other proposals")
}

// choice is the rerank's world model choosing over the whole catalogue:
// the same M'₀ and budget, no candidate temperature, other proposals.
func TestChoiceEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	_, rs := tinyRun(t, options{}, "rerank", "choice")
	rr, ch := rs["rerank"], rs["choice"]
	require.Equal(t, rr.M0, ch.M0)
	require.Equal(t, rr.Budget(), ch.Budget())
	require.Zero(t, ch.RerankTemperature)
	require.NotEqual(t, rr.States, ch.States, "the catalogue holds proposals the policy's samples miss")
}

// tinyRun runs methods on the tiny v1 tasks, seed 1, and returns the
// options and each method's result as read back from its file.
func tinyRun(t *testing.T, o options, methods ...string) (options, map[string]Result) {
	t.Helper()
	o.methods, o.seeds, o.firstSeed, o.profile, o.suite = methods, 1, 1, "tiny", "v1"
	o.out, o.progress, o.parallel, o.resamples, o.specs = t.TempDir(), "lines", 2, 200, tinyTasks()
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, o))
	out := map[string]Result{}
	for _, m := range methods {
		r, ok, err := readResult(runDir(o), job{m, 1}, o)
		require.NoError(t, err)
		require.True(t, ok, m)
		out[m] = r
	}
	return o, out
}

// Under the prior-local setting LM2LM trains on the world model with the
// lab's prior and reads its calibration records as a local correction: at
// the first calibration, no earlier calibration record exists, so the
// locality measurement's "other" class (another task and another mechanism
// than any calibrated record) stays where it was, to the bit; every
// calibration moves its own pairs.
func TestPriorLocalEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	_, rs := tinyRun(t, options{setting: "prior-local", probe: 4}, "lm2lm")
	r := rs["lm2lm"]
	require.True(t, r.Setting.World.Prior && r.Setting.World.Local, "%+v", r.Setting.World)
	require.NotEmpty(t, r.Locality)
	for i, l := range r.Locality {
		for _, c := range l.Classes {
			switch {
			case c.Class == "other" && i == 0:
				require.Positive(t, c.Pairs, "no unrelated pair was probed")
				require.NotNil(t, c.MeanAbsShift)
				require.Zero(t, *c.MeanAbsShift, "step %d", l.Step)
			case c.Class == "calibrated":
				require.NotNil(t, c.MeanAbsShift)
				require.Positive(t, *c.MeanAbsShift, "step %d: the calibration did not move its own pairs", l.Step)
			}
		}
	}
}
