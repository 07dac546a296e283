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
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/labsetup"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
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
		{[]string{"-methods", "lm2lm,bogus"}, []string{`unknown method "bogus"`, "valid: base, sft, rft, bestknown, rerank, static, static-random, random, lm2lm, lm2lm-wmrl, static-wmrl, lm2lm-rerank"}},
		{[]string{"-methods", "lm2lm,lm2lm"}, []string{`"lm2lm" appears twice`}},
		{[]string{"-methods", ","}, []string{"-methods is empty"}},
		{[]string{"-profile", "huge", "-suite", "v3"}, []string{"valid: tiny, short, default, paper", "valid: v1, v2"}},
		{[]string{"-seeds", "0", "-parallel", "0", "-resamples", "10"}, []string{"-seeds 0", "-parallel 0", "-resamples 10"}},
		{[]string{"-progress", "fancy", "-policy-lr", "-1", "-description-buckets", "-2"}, []string{"valid: auto, bar, lines", "-policy-lr -1", "-description-buckets -2"}},
		{[]string{"extra"}, []string{"unexpected arguments"}},
		{[]string{"-descriptor-buckets", "-1", "-world-descriptors", "1.5"}, []string{"-descriptor-buckets -1", "-world-descriptors 1.5"}},
		{[]string{"-pessimism", "1.5"}, []string{"-pessimism 1.5; want in [0, 1]"}},
		{[]string{"-pessimism", "NaN"}, []string{"-pessimism NaN"}},
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
		out: cmp.Or(os.Getenv("LM2LM_COMPARE_OUT"), t.TempDir()), progress: "lines", parallel: 2, resamples: 200, policyLR: 0.02, descBuckets: 64, specs: tinyTasks()}
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
	path := resultPath(dir, job{"base", 1})
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, bytes.Replace(b, []byte(`"gains_sigma": [`), []byte(`"gains_sigma": [40, `), 1), 0o644))
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
	require.NoError(t, writeResult(dir, j, Result{Version: resultVersion, Method: "lm2lm", Seed: 3}))
	fi, err := os.Stat(resultPath(dir, j))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	err = writeResult(dir, j, Result{Version: resultVersion, Method: "lm2lm", Seed: 3, M0: 7})
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
	r := Result{Version: resultVersion, Method: "rft", Seed: 1, Profile: "short", Suite: "v2-val", Tasks: tasksDigest("v2-val")}
	require.NoError(t, writeResult(dir, job{"rft", 1}, r))
	got, ok, err := readResult(dir, job{"rft", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r.Tasks, got.Tasks)
	require.Len(t, got.Tasks, 24)
	require.NotEqual(t, tasksDigest("v2"), tasksDigest("v2-val"))

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
	require.Equal(t, tasksDigest("v2-val"), labDigest(specs, cat))
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

func TestLeversHaveTheirOwnRunDirectory(t *testing.T) {
	// Results of the research-state levers never mix with the defaults'.
	o, err := parseFlags([]string{"-out", "out", "-suite", "v2-val", "-profile", "short"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out", "v2-val-short"), runDir(o))
	o.descriptorBuckets, o.worldDesc = 256, 0.5
	require.Equal(t, filepath.Join("out", "v2-val-short-d256-w0.5"), runDir(o))
	require.Contains(t, command(o), "-descriptor-buckets 256 -world-descriptors 0.5")
	o.pessimism, o.trigger = 0.25, true
	require.Equal(t, filepath.Join("out", "v2-val-short-d256-w0.5-p0.25-trigger"), runDir(o))
	require.Contains(t, command(o), "-world-descriptors 0.5 -pessimism 0.25 -trigger")
	o.descriptorBuckets, o.worldDesc, o.trigger = 0, 0, false
	require.Equal(t, filepath.Join("out", "v2-val-short-p0.25"), runDir(o))
	o.pessimism, o.trigger = 0, true
	require.Equal(t, filepath.Join("out", "v2-val-short-trigger"), runDir(o))
	o.trigger, o.worldTune = false, true
	require.Equal(t, filepath.Join("out", "v2-val-short-tune"), runDir(o))
	require.Contains(t, command(o), " -world-tune")
	o.worldDesc, o.pessimism = 0.5, 0.25
	require.Equal(t, filepath.Join("out", "v2-val-short-d0-w0.5-tune-p0.25"), runDir(o))
	require.Contains(t, command(o), "-world-descriptors 0.5 -world-tune -pessimism 0.25")
	o.histProposalBuckets = 64
	require.Equal(t, filepath.Join("out", "v2-val-short-d0-w0.5-h64-tune-p0.25"), runDir(o))
	require.Contains(t, command(o), "-world-descriptors 0.5 -history-proposal-buckets 64 -world-tune")
	_, err = parseFlags([]string{"-history-proposal-buckets", "-3"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-history-proposal-buckets -3")
}

func TestWorldTuneLever(t *testing.T) {
	// -world-tune wraps the same base config (catalogue priors and cards,
	// descriptor weight) in rwm.Tuned over the documented grid; off by
	// default, the plain embedded model.
	o, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.False(t, o.worldTune)
	w, err := newWorld(o, nil)
	require.NoError(t, err)
	plain, ok := w.(*rwm.Embedded)
	require.True(t, ok, "default world model %T", w)
	o, err = parseFlags([]string{"-world-tune", "-world-descriptors", "0.25"}, &bytes.Buffer{})
	require.NoError(t, err)
	w, err = newWorld(o, nil)
	require.NoError(t, err)
	tuned, ok := w.(*rwm.Tuned)
	require.True(t, ok, "-world-tune world model %T", w)
	base := plain.Config()
	base.DescriptorWeight = 0.25
	require.Equal(t, base, tuned.Base())
	want, err := rwm.NewTuned(base, nil)
	require.NoError(t, err)
	require.Equal(t, want.ID(), tuned.ID())
	require.NotEmpty(t, tuned.Base().Priors)
	require.NotEmpty(t, tuned.Base().Cards)
}

func TestWorldEffectsLever(t *testing.T) {
	// -world-effects gives the world model the lab's effects at
	// rwm.WithEffects's settings, in its own run directory.
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	o, err := parseFlags([]string{"-world-effects", "-world-descriptors", "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	w, err := newWorld(o, l)
	require.NoError(t, err)
	m, ok := w.(*rwm.Embedded)
	require.True(t, ok)
	base := rwm.DefaultEmbeddedConfig()
	base.DescriptorWeight = 1
	want := rwm.WithEffects(base, l.Effects())
	got := m.Config()
	require.Equal(t, l.Effects().ID(), got.Effects.ID())
	require.Equal(t, want.EffectSigmas, got.EffectSigmas)
	require.Equal(t, want.LossSigmas, got.LossSigmas)
	require.True(t, got.DescriptorStandardise)
	o.out, o.suite, o.profile = "out", "v2-val", "default"
	require.Equal(t, filepath.Join("out", "v2-val-default-d0-w1-fx"), runDir(o))
	require.Contains(t, command(o), "-world-descriptors 1 -world-effects")
	o.worldTune = true
	require.Equal(t, filepath.Join("out", "v2-val-default-d0-w1-fx-tune"), runDir(o))
	o.descriptorBuckets, o.descriptorSpread = 1024, 2
	require.Equal(t, filepath.Join("out", "v2-val-default-d1024-w1-s2-fx-tune"), runDir(o))
	require.Contains(t, command(o), "-descriptor-buckets 1024 -world-descriptors 1 -descriptor-spread 2 -world-effects -world-tune")
	_, err = parseFlags([]string{"-descriptor-spread", "2"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-descriptor-spread 2")
	o.evalTemp = 0.5
	require.Equal(t, filepath.Join("out", "v2-val-default-d1024-w1-s2-fx-tune-T0.5"), runDir(o))
	require.Contains(t, command(o), "-world-tune -eval-temperature 0.5")
	for _, bad := range []string{"0", "-1", "NaN", "101"} {
		_, err = parseFlags([]string{"-eval-temperature", bad}, &bytes.Buffer{})
		require.ErrorContains(t, err, "-eval-temperature", bad)
	}
	o2, err := parseFlags([]string{"-eval-temperature", "0.5"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 0.5, o2.temperature())
	// -eval-decode top: the policies' most probable distinct proposals,
	// in a run directory of its own.
	require.False(t, o2.top())
	o.decode = "top"
	require.Equal(t, filepath.Join("out", "v2-val-default-d1024-w1-s2-fx-tune-T0.5-top"), runDir(o))
	require.Contains(t, command(o), "-eval-temperature 0.5 -eval-decode top")
	o.predict = true
	require.Equal(t, filepath.Join("out", "v2-val-default-d1024-w1-s2-fx-tune-T0.5-top-pred"), runDir(o))
	require.Contains(t, command(o), "-eval-decode top -eval-predict")
	o.predict, o.predictHistory = false, true
	require.Equal(t, filepath.Join("out", "v2-val-default-d1024-w1-s2-fx-tune-T0.5-top-predh"), runDir(o))
	require.Contains(t, command(o), "-eval-decode top -eval-predict-history")
	o3, err := parseFlags([]string{"-eval-decode", "top"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, o3.top())
	_, err = parseFlags([]string{"-eval-decode", "beam"}, &bytes.Buffer{})
	require.ErrorContains(t, err, `-eval-decode "beam"`)
}

func TestPolicyHiddenLever(t *testing.T) {
	// -policy-hidden gives the policy a hidden layer (proposer.PolicyConfig
	// .Hidden) whose initial weights come from the job's seed alone, in its
	// own run directory; off by default, where the policy needs no rng.
	o, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Zero(t, o.policyHidden)
	plain, err := newPolicy(o, 1, nil)
	require.NoError(t, err)
	require.Zero(t, plain.Config().Hidden)

	o, err = parseFlags([]string{"-policy-hidden", "16", "-history-proposal-buckets", "64"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 16, o.policyHidden)
	o.out, o.suite, o.profile = "out", "v2-val", "default"
	require.Equal(t, filepath.Join("out", "v2-val-default-h64-hid16"), runDir(o))
	require.Contains(t, command(o), "-history-proposal-buckets 64 -policy-hidden 16")
	a, err := newPolicy(o, 3, nil)
	require.NoError(t, err)
	require.Equal(t, 16, a.Config().Hidden)
	require.Equal(t, o.policyLR, a.Config().Adam.LR)
	require.Greater(t, a.NumParams(), plain.NumParams())
	b, err := newPolicy(o, 3, nil)
	require.NoError(t, err)
	c, err := newPolicy(o, 4, nil)
	require.NoError(t, err)
	ca, err := a.MarshalBinary()
	require.NoError(t, err)
	cb, err := b.MarshalBinary()
	require.NoError(t, err)
	cc, err := c.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, ca, cb, "one seed, one initial policy")
	require.NotEqual(t, ca, cc, "another seed draws other hidden weights")
	for _, bad := range []string{"-1", "1025"} {
		_, err = parseFlags([]string{"-policy-hidden", bad}, &bytes.Buffer{})
		require.ErrorContains(t, err, "-policy-hidden "+bad)
	}

	// -policy-hidden-init-std scales the hidden layer's initial weights.
	o.policyHiddenStd = 1
	require.Equal(t, filepath.Join("out", "v2-val-default-h64-hid16u1"), runDir(o))
	require.Contains(t, command(o), "-policy-hidden 16 -policy-hidden-init-std 1")
	d, err := newPolicy(o, 3, nil)
	require.NoError(t, err)
	require.Equal(t, 1.0, d.Config().HiddenInitStd)
	// -policy-descriptor-inputs standardises the training tasks' varying
	// descriptors into the hidden layer's inputs.
	o.descriptorInputs = true
	require.Equal(t, filepath.Join("out", "v2-val-default-h64-hid16u1-di"), runDir(o))
	require.Contains(t, command(o), " -policy-descriptor-inputs")
	train := []records.Task{{Descriptors: map[string]float64{"width": 64, "depth": 1}}, {Descriptors: map[string]float64{"width": 256, "depth": 1}}}
	di, err := newPolicy(o, 3, train)
	require.NoError(t, err)
	require.Equal(t, proposer.StandardisedInputs(train), di.Config().DescriptorInputs)
	require.Len(t, di.Config().DescriptorInputs, 1, "depth is constant")
	// -policy-descriptor-linear: the same inputs, linear in every head,
	// with or without the hidden layer.
	o.descriptorLinear = true
	require.Equal(t, filepath.Join("out", "v2-val-default-h64-hid16u1-di-dl"), runDir(o))
	require.Contains(t, command(o), " -policy-descriptor-inputs -policy-descriptor-linear")
	dl, err := newPolicy(o, 3, train)
	require.NoError(t, err)
	require.True(t, dl.Config().DescriptorLinear)
	require.Equal(t, di.Config().DescriptorInputs, dl.Config().DescriptorInputs)
	require.Greater(t, dl.NumParams(), di.NumParams())
	lin, err := parseFlags([]string{"-policy-descriptor-linear"}, &bytes.Buffer{})
	require.NoError(t, err, "no hidden layer needed")
	lo, err := newPolicy(lin, 3, train)
	require.NoError(t, err)
	require.Zero(t, lo.Config().Hidden)
	require.Len(t, lo.Config().DescriptorInputs, 1)
	_, err = parseFlags([]string{"-policy-descriptor-inputs"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-policy-descriptor-inputs needs -policy-hidden")
	for _, args := range [][]string{{"-policy-hidden-init-std", "1"}, {"-policy-hidden", "8", "-policy-hidden-init-std", "-1"},
		{"-policy-hidden", "8", "-policy-hidden-init-std", "11"}} {
		_, err = parseFlags(args, &bytes.Buffer{})
		require.ErrorContains(t, err, "-policy-hidden-init-std", args)
	}
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
	o, err = parseFlags([]string{"-first-seed", "3", "-policy-lr", "0.05"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "go run ./examples/compare -profile default -suite v2 -seeds 5 -first-seed 3 -policy-lr 0.05", command(o))
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
	require.NotEqual(t, tasksDigest("v2-val"), tasksDigest("v2-val2"))
}

// lm2lm-rerank trains exactly as lm2lm (same seed, same steps, rewards and
// calibrations, same real-run budget) and differs only in how the
// evaluation proposals are chosen.
func TestLM2LMRerankTrainsAsLM2LM(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	o := options{methods: []string{"lm2lm", "lm2lm-rerank"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v1",
		out: t.TempDir(), progress: "lines", parallel: 2, resamples: 200, policyLR: 0.02, descBuckets: 64, specs: tinyTasks()}
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, o))
	dir := runDir(o)
	plain, ok, err := readResult(dir, job{"lm2lm", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	rr, ok, err := readResult(dir, job{"lm2lm-rerank", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, plain.Steps, rr.Steps)
	require.Equal(t, plain.Calibrations, rr.Calibrations)
	require.Equal(t, plain.Budget(), rr.Budget())
	require.Equal(t, 8+4, rr.Budget(), "M_0 + one calibration of 4: the rerank pays no real run")
	require.Len(t, rr.States, len(plain.States))
	require.NotEqual(t, plain.States, rr.States, "the rerank chose other proposals than the policy's own samples")
}

// -calibration-schedule replaces the profile's schedule for every method
// (the trainer's points and budgets, the M'₀ baselines' extra records),
// names its own run directory and is reproduced by the command line; bad
// schedules are refused before any run.
func TestCalibrationSchedule(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-calibration-schedule", "8:13,16:12,24:13,32:12,40:13,48:12,56:13,64:12"}, &bytes.Buffer{})
	require.NoError(t, err)
	p, err := o.prof()
	require.NoError(t, err)
	require.Equal(t, []int{8, 16, 24, 32, 40, 48, 56, 64}, p.schedule.Steps)
	require.Equal(t, 100, p.schedule.Total())
	cfg := trainerConfig(o, methods["lm2lm"], 1)
	require.NoError(t, cfg.Validate())
	require.Equal(t, p.schedule, cfg.Schedule)
	require.Equal(t, filepath.Join("out/compare", "v2-val-default-cal8x13_16x12_24x13_32x12_40x13_48x12_56x13_64x12"), runDir(o))
	require.Contains(t, command(o), " -calibration-schedule 8:13,16:12,24:13,32:12,40:13,48:12,56:13,64:12")
	// M'₀'s extra records follow the schedule's total: 100 + 100 + evaluation.
	require.Equal(t, expectedRuns(o, methods["rerank"], 1), expectedRuns(o, methods["lm2lm"], 1)-o.probe*probeGroup*9)
	for _, bad := range []string{"16:31,40", "16:0", "40:10,16:10", "12:10", "96:10", "0:5", "a:b"} {
		_, err := parseFlags([]string{"-calibration-schedule", bad}, &bytes.Buffer{})
		require.ErrorIs(t, err, errUsage, bad)
		require.ErrorContains(t, err, "-calibration-schedule", bad)
	}
	o, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	p, err = o.prof()
	require.NoError(t, err)
	require.Equal(t, calibrate.DefaultSchedule(), p.schedule)
}

// -rerank-history reaches the rerank methods' configuration, names its own
// run directory and is reproduced by the command line.
func TestRerankHistoryFlag(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-eval-temperature", "0.5", "-rerank-history"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, rerankConfig(o).History)
	require.Equal(t, filepath.Join("out/compare", "v2-val-default-T0.5-rh"), runDir(o))
	require.Contains(t, command(o), " -rerank-history")
	o, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, baseline.DefaultRerankConfig(), rerankConfig(o))
}

// -calibration-per-task reaches the trainer of every method, names its own
// run directory, is reproduced by the command line and refuses k < 0.
func TestCalibrationPerTaskFlag(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-calibration-per-task", "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	for _, name := range []string{"lm2lm", "random", "lm2lm-wmrl"} {
		cfg := trainerConfig(o, methods[name], 1)
		require.NoError(t, cfg.Validate())
		require.Equal(t, 1, cfg.PerTask, name)
	}
	require.Equal(t, filepath.Join("out/compare", "v2-val-default-pt1"), runDir(o))
	require.Contains(t, command(o), " -calibration-per-task 1")
	require.False(t, trainerConfig(o, methods["lm2lm"], 1).HeldOutTask)
	o, err = parseFlags([]string{"-suite", "v2-val", "-held-out-task"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, trainerConfig(o, methods["static"], 1).HeldOutTask)
	require.Equal(t, filepath.Join("out/compare", "v2-val-default-hot"), runDir(o))
	require.Contains(t, command(o), " -held-out-task")
	_, err = parseFlags([]string{"-calibration-per-task", "-1"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-calibration-per-task -1")
	o, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Zero(t, trainerConfig(o, methods["lm2lm"], 1).PerTask)
}

// The policy's learning rate, its description features, the test
// histories and the probe change what a result file holds: off their
// defaults each names its own run directory (a run with -policy-lr 0.01
// never reads back the results of 0.02) and is reproduced by the command
// line; at their defaults the directory is unchanged.
func TestTrainingAndEvaluationSettingsHaveTheirOwnRunDirectory(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-policy-lr", "0.02", "-description-buckets", "64", "-history", "8", "-probe", "4"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out/compare", "v2-val-default"), runDir(o))
	for _, c := range []struct {
		args     []string
		dir, arg string
	}{
		{[]string{"-policy-lr", "0.01"}, "v2-val-default-lr0.01", " -policy-lr 0.01"},
		{[]string{"-policy-lr", "0"}, "v2-val-default-lr0", " -policy-lr 0"},
		{[]string{"-description-buckets", "0"}, "v2-val-default-desc0", " -description-buckets 0"},
		{[]string{"-history", "0"}, "v2-val-default-hist0", " -history 0"},
		{[]string{"-probe", "0"}, "v2-val-default-probe0", " -probe 0"},
	} {
		o, err := parseFlags(append([]string{"-suite", "v2-val"}, c.args...), &bytes.Buffer{})
		require.NoError(t, err)
		require.Equal(t, filepath.Join("out/compare", c.dir), runDir(o), c.args)
		require.Contains(t, command(o), c.arg, c.args)
		require.Equal(t, 1, strings.Count(command(o), c.arg), c.args)
	}
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

// The setting chosen on validation, as the README's commands give it, is
// the one the main job runs by default (labsetup.ValidatedWorld,
// ValidatedPolicy and ValidatedTrainer): the two drivers cannot drift
// apart.
func TestChosenFlagsAreTheMainJobsValidatedSetting(t *testing.T) {
	o, err := parseFlags(strings.Fields("-descriptor-buckets 256 -world-descriptors 1 -policy-hidden 32 -world-effects -world-tune -eval-temperature 0.5 -train-temperature 2 -held-out-task -description-buckets 0"), &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, labsetup.ValidatedWorld, o.world())
	require.Equal(t, labsetup.ValidatedPolicy, o.policy())
	require.Equal(t, labsetup.ValidatedTrainer, o.trainer())
	o, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.NotEqual(t, labsetup.ValidatedWorld, o.world())
}

// -eval-predict keeps the trained world model's prediction of every
// measured evaluation proposal of a trained method (none for the others),
// and -eval-decode top changes the evaluation alone: the same training as
// sampling, other proposals.
func TestEvalPredictAndTopDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny models; runs without -short")
	}
	o := options{methods: []string{"sft", "lm2lm"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v1",
		out: t.TempDir(), progress: "lines", parallel: 2, resamples: 200, policyLR: 0.02, descBuckets: 64, specs: tinyTasks(),
		predict: true, decode: "top"}
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, o))
	dir := runDir(o)
	require.Contains(t, dir, "-top-pred", dir)
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
	plain.methods, plain.predict, plain.decode = []string{"lm2lm"}, false, ""
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, plain))
	p, ok, err := readResult(runDir(plain), job{"lm2lm", 1}, plain)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, p.Steps, r.Steps, "the same training")
	require.Equal(t, p.Budget(), r.Budget())
	for _, st := range p.States {
		require.Nil(t, st.Predicted)
	}
	var pg, rg [][]float64
	for i := range p.States {
		pg, rg = append(pg, p.States[i].Gains), append(rg, r.States[i].Gains)
	}
	require.NotEqual(t, pg, rg, "the top proposals are not the samples")

	// -eval-predict-history: the tuned world model, pinned on the final
	// evidence, reads each state's history too. The same runs and gains as
	// -eval-predict; other predictions where a state has a history (seed
	// 2 draws the one test state a history of two records).
	h := plain
	h.predictHistory, h.history, h.worldTune, h.firstSeed = true, 4, true, 2
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, h))
	f := h
	f.predictHistory, f.predict = false, true
	require.NoError(t, run(context.Background(), &bytes.Buffer{}, f))
	hr, ok, err := readResult(runDir(h), job{"lm2lm", 2}, h)
	require.NoError(t, err)
	require.True(t, ok)
	fr, ok, err := readResult(runDir(f), job{"lm2lm", 2}, f)
	require.NoError(t, err)
	require.True(t, ok)
	differ := 0
	for i, st := range hr.States {
		require.Len(t, st.Predicted, len(st.Gains), st.ID)
		require.Equal(t, fr.States[i].Gains, st.Gains, st.ID)
		if !slices.Equal(fr.States[i].Predicted, st.Predicted) {
			differ++
		}
	}
	require.Positive(t, differ, "the history changes some predictions")
}

// Predictions come from the trained methods' world models only: not the
// baselines', and not the real-gains diagnostic's (the lab: its
// "predictions" would be real runs).
func TestPredicts(t *testing.T) {
	var o options
	require.False(t, predicts(o, methods["lm2lm"]), "off by default")
	for _, flags := range []options{{predict: true}, {predictHistory: true}} {
		for name, want := range map[string]bool{"lm2lm": true, "static": true, "random": true, "lm2lm-wmrl": true,
			"lm2lm-rerank": true, "sft": false, "rerank": false, "base": false, "real-gains": false} {
			require.Equal(t, want, predicts(flags, methods[name]), name)
		}
	}
}

// -steps sets every trained method's step count, in a run directory of
// its own; it must be a multiple of 8 above the last calibration point.
func TestStepsFlag(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-steps", "288"}, &bytes.Buffer{})
	require.NoError(t, err)
	p, err := o.prof()
	require.NoError(t, err)
	require.Equal(t, 288, p.steps)
	require.Equal(t, profiles["default"].schedule, p.schedule)
	require.Equal(t, filepath.Join("out", "compare", "v2-val-default-steps288"), runDir(o))
	require.Contains(t, command(o), " -steps 288")
	o, err = parseFlags([]string{"-profile", "short"}, &bytes.Buffer{})
	require.NoError(t, err)
	p, err = o.prof()
	require.NoError(t, err)
	require.Equal(t, 24, p.steps, "0 = the profile's")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-steps", "100"}, "-steps 100: want a multiple of 8"},
		{[]string{"-steps", "-8"}, "-steps -8: want a multiple of 8"},
		{[]string{"-steps", "64"}, "-steps 64: the profile calibrates at steps [16 40 64]"},
		{[]string{"-steps", "32", "-calibration-schedule", "16:31,40:38"}, "-calibration-schedule \"16:31,40:38\": step 40"},
	} {
		_, err := parseFlags(c.args, &bytes.Buffer{})
		require.ErrorContains(t, err, c.want, c.args)
	}
	_, err = parseFlags([]string{"-steps", "32", "-calibration-schedule", "8:10,16:10"}, &bytes.Buffer{})
	require.NoError(t, err)
}

// -group sets the trained methods' G, in a run directory of its own.
func TestGroupFlag(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-group", "32"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out", "compare", "v2-val-default-g32"), runDir(o))
	require.Contains(t, command(o), " -group 32")
	require.Equal(t, 32, trainerConfig(o, methods["lm2lm"], 1).DAPO.GroupSize)
	o.group = 0
	require.Equal(t, lm2lm.DefaultConfig().DAPO.GroupSize, trainerConfig(o, methods["lm2lm"], 1).DAPO.GroupSize)
	for _, bad := range []string{"1", "257", "-3"} {
		_, err := parseFlags([]string{"-group", bad}, &bytes.Buffer{})
		require.ErrorContains(t, err, "-group "+bad, bad)
	}
}

// -train-temperature sets the policy's temperature for training, in a run
// directory of its own; evaluation still samples at -eval-temperature.
func TestTrainTemperatureFlag(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "v2-val", "-train-temperature", "2", "-eval-temperature", "0.5"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out", "compare", "v2-val-default-T0.5-tt2"), runDir(o))
	require.Contains(t, command(o), " -train-temperature 2")
	p, err := newPolicy(o, 1, nil)
	require.NoError(t, err)
	require.Equal(t, 2.0, p.Config().Temperature)
	o.trainTemp = 1
	require.Equal(t, filepath.Join("out", "compare", "v2-val-default-T0.5"), runDir(o), "1 is the default")
	for _, bad := range []string{"-1", "NaN", "101"} {
		_, err := parseFlags([]string{"-train-temperature", bad}, &bytes.Buffer{})
		require.ErrorContains(t, err, "-train-temperature", bad)
	}
}
