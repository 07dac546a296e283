package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/labenv"
	"github.com/lm2lm/lm2lm/internal/labtest"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// TestMainJobEndToEnd runs the whole method on the real lab with the tiny
// profile: reference runs, M_0, training with one calibration, and the
// evaluation before and after, all with real CPU training runs. A second
// invocation on the same store reuses every run and reproduces the report.
func TestMainJobEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains about 200 tiny models; runs without -short")
	}
	dir := t.TempDir()
	o := options{profile: "tiny", calibration: "top-rated", store: filepath.Join(dir, "records.jsonl"),
		report: filepath.Join(dir, "report.json"), seed: 3, parallel: 2, evalHistory: 4, progress: "lines"}
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, o))
	t.Log(out.String())
	first, err := os.ReadFile(o.report)
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(first, &rep))
	require.Equal(t, 8, rep.M0)
	require.Len(t, rep.Steps, 16)
	require.Len(t, rep.Calibrations, 1)
	require.Equal(t, 4, rep.Calibrations[0].Executed)
	require.Equal(t, 4, rep.RealRuns["training"])
	require.NotNil(t, rep.Base.AvgK)
	require.NotNil(t, rep.Trained.AvgK)
	require.NotNil(t, rep.WinRate)
	require.Len(t, rep.Base.Family, 4)

	require.Equal(t, 8, rep.RealRuns["m0"])
	hist := rep.RealRuns["eval_histories"] + rep.Reused["eval_histories"]
	require.Positive(t, hist)
	require.Zero(t, hist%4, "4 records of each held-out task")
	require.Positive(t, rep.RealRuns["eval_untrained"])

	// Same seed, same store: every run is already recorded, so nothing is
	// paid for, every measurement is reused, and the results are identical.
	out.Reset()
	o.report = filepath.Join(dir, "again.json")
	require.NoError(t, run(context.Background(), &out, o))
	again, err := os.ReadFile(o.report)
	require.NoError(t, err)
	var rep2 Report
	require.NoError(t, json.Unmarshal(again, &rep2))
	for phase, n := range rep2.RealRuns {
		require.Zero(t, n, "phase %s paid again", phase)
	}
	require.Contains(t, out.String(), "paid now: 0 real runs (M_0 0, training 0, evaluation histories 0, evaluation before 0, evaluation after 0;")
	require.Contains(t, out.String(), "reused from "+o.store+": ")
	require.Equal(t, rep.RealRuns["m0"]+rep.Reused["m0"], rep2.Reused["m0"])
	require.Equal(t, rep.RealRuns["eval_untrained"]+rep.Reused["eval_untrained"], rep2.Reused["eval_untrained"])
	rep.RealRuns, rep.CPUSeconds, rep.Reused = nil, nil, nil
	rep2.RealRuns, rep2.CPUSeconds, rep2.Reused = nil, nil, nil
	require.Equal(t, rep, rep2)

	// The RFT baseline on the same store: no calibration runs, one
	// maximum-likelihood step per training step.
	out.Reset()
	o.baseline, o.report = "rft", filepath.Join(dir, "rft.json")
	require.NoError(t, run(context.Background(), &out, o))
	b, err := os.ReadFile(o.report)
	require.NoError(t, err)
	var rft Report
	require.NoError(t, json.Unmarshal(b, &rft))
	require.Equal(t, "rft", rft.Baseline)
	require.Zero(t, rft.RealRuns["training"])
	require.Len(t, rft.Steps, 16)
	require.Empty(t, rft.Calibrations)
}

func TestFlagsValidatedAllAtOnce(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-profile", "huge", "-calibration", "best", "-baseline", "dpo", "-suite", "v3",
		"-progress", "fancy", "-parallel", "0", "-eval-history", "-2",
		"-hold-out-family", "no-such-family", "-store", "", "-setting", "best"}, &stderr)
	require.ErrorIs(t, err, errUsage)
	for _, want := range []string{
		`-profile: setting: unknown name: profile "huge"; valid: tiny, short, default, paper`,
		`unknown -calibration "best"; valid: top-rated, random, static`,
		`unknown -baseline "dpo"; valid: sft, rft`,
		`unknown -suite "v3"; valid: v2, v1`,
		`unknown -progress "fancy"; valid: auto, bar, lines`,
		"-parallel 0; want ≥ 1", "-eval-history -2", "-store is empty",
		`-setting: setting: unknown name: setting "best"; valid: validated, library`,
	} {
		require.ErrorContains(t, err, want)
	}
	// A family is checked against the suite's families, which are listed.
	_, err = parseFlags([]string{"-profile", "tiny", "-hold-out-family", "no-such-family"}, &stderr)
	require.ErrorContains(t, err, `unknown -hold-out-family "no-such-family"; valid: `)
	_, err = parseFlags([]string{"-baseline", "sft", "-wmrl"}, &stderr)
	require.ErrorContains(t, err, "-wmrl with -baseline sft")
	_, err = parseFlags([]string{"-profile", "tiny", "extra"}, &stderr)
	require.ErrorIs(t, err, errUsage)

	// run validates too, before opening the store.
	dir := t.TempDir()
	o := options{profile: "huge", calibration: "top-rated", store: filepath.Join(dir, "r.jsonl"), parallel: 2}
	require.ErrorContains(t, run(context.Background(), &bytes.Buffer{}, o), `profile "huge"; valid: tiny`)
	require.NoFileExists(t, o.store)
}

func TestHelpSaysWhatTheProgramDoes(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.True(t, strings.HasPrefix(stderr.String(), "lm2lm runs the full LM2LM method"), stderr.String())
	require.Contains(t, stderr.String(), "-profile")
}

func TestReportNamedAndNeverOverwritten(t *testing.T) {
	o, err := parseFlags([]string{"-profile", "short", "-calibration", "static", "-wmrl", "-seed", "7"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out", "lm2lm", "v2-short-static+wmrl-seed7.json"), o.reportPath())
	o.baseline, o.wmrl, o.holdOut, o.evalHistory = "rft", false, "arith", 4
	require.Equal(t, filepath.Join("out", "lm2lm", "v2-short-rft-holdout-arith-hist4-seed7.json"), o.reportPath())
	o.setting = "library"
	require.Equal(t, filepath.Join("out", "lm2lm", "v2-short-rft-library-holdout-arith-hist4-seed7.json"), o.reportPath())
	o.evalHistory = 8 // the profile's: no name part
	require.Equal(t, filepath.Join("out", "lm2lm", "v2-short-rft-library-holdout-arith-seed7.json"), o.reportPath())
	o.report = "none"
	require.Empty(t, o.reportPath())

	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	require.NoError(t, writeFile(path, []byte("first"), false))
	// An existing report is refused before any run, and by the writer.
	_, err = parseFlags([]string{"-profile", "tiny", "-report", path}, &bytes.Buffer{})
	require.ErrorContains(t, err, "report "+path+" exists")
	require.ErrorIs(t, writeFile(path, []byte("second"), false), fs.ErrExist)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "first", string(b))
	// -force replaces it.
	_, err = parseFlags([]string{"-profile", "tiny", "-report", path, "-force"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.NoError(t, writeFile(path, []byte("second"), true))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "second", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")
}

// A task whose reference run diverges has no b_e or σ_e: the main job
// leaves it out and names it, on its writer and in the report, instead of
// failing (as it did on a generated suite with one over-hot reference).
func TestReferencesLeaveOutDivergedTasks(t *testing.T) {
	good := lab.SuiteV2(1).Train[1]
	hot := labtest.DivergingTwin(good)
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{good, hot}
	env, err := labenv.Open(cfg, records.NewMemStore())
	require.NoError(t, err)
	var out bytes.Buffer
	j := &mainJob{o: options{progress: "lines"}, w: &out, env: env, lab: env.Lab()}
	_, err = environment.Prepare(context.Background(), env, environment.Options{Parallel: 1, Progress: j.progress, OnStage: j.onStage})
	require.NoError(t, err)
	require.Len(t, j.train, 1)
	require.Equal(t, good.ID, j.train[0].ID)
	require.Equal(t, []string{hot.ID}, j.rep.TasksLeftOut)
	require.Contains(t, out.String(), "task "+hot.ID+" left out: ")
}

// The default setting is the validated one: the effects world model over
// descriptors, tuned; the policy with descriptor features, a 32-unit
// hidden layer drawn from the seed, LR 0.02 and no description features,
// trained at temperature 2 on rewards judged as for an unseen task
// (lm2lm.Config.HeldOutTask), evaluated at temperature 0.5. -setting
// library is every library default. The report records the setting by
// name and content.
func TestSettings(t *testing.T) {
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	models := func(args ...string) (*mainJob, options) {
		o, err := parseFlags(args, &bytes.Buffer{})
		require.NoError(t, err)
		j := &mainJob{o: o, lab: l, cat: lab.Catalogue(), rep: Report{}}
		require.NoError(t, j.parseFlags())
		require.NoError(t, j.newModels(context.Background()))
		return j, o
	}
	j, _ := models()
	c := j.pol.Config()
	require.Equal(t, []any{32, 256, 0, 0.02, 2.0}, []any{c.Hidden, c.DescriptorBuckets, c.DescriptionBuckets, c.Adam.LR, c.Temperature})
	require.Equal(t, 0.5, j.set.Policy.EvalTemperature)
	require.True(t, j.trainerConfig().HeldOutTask)
	require.Contains(t, j.world.ID(), "rwm.Tuned/")
	require.Equal(t, "validated", j.rep.Setting)
	require.Equal(t, setting.Validated(), j.rep.SettingConfig)
	b, err := json.Marshal(j.rep)
	require.NoError(t, err)
	require.Contains(t, string(b), `"setting":"validated","setting_config":{"name":"validated","world":{"descriptors":1,"effects":true,"tune":true},`)
	again, _ := models()
	a, err := j.pol.MarshalBinary()
	require.NoError(t, err)
	b, err = again.pol.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, a, b, "the hidden layer's draws come from the seed")

	j, _ = models("-setting", "library")
	c = j.pol.Config()
	require.Equal(t, proposer.DefaultPolicyConfig(), c)
	require.Equal(t, 1.0, j.set.Policy.EvalTemperature)
	require.False(t, j.trainerConfig().HeldOutTask)
	require.NotContains(t, j.world.ID(), "rwm.Tuned/")
	require.Equal(t, "library", j.rep.Setting)
	require.Equal(t, setting.Library(), j.rep.SettingConfig)

	_, err = parseFlags([]string{"-setting", "chosen"}, &bytes.Buffer{})
	require.ErrorIs(t, err, setting.ErrUnknown)
	require.ErrorContains(t, err, "valid: validated, library")
	_, err = parseFlags([]string{"-policy-lr", "0.01"}, &bytes.Buffer{})
	require.Error(t, err, "the setting's levers are no flags")
}
