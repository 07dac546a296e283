package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/examples/compare/internal/probe"
	"github.com/lm2lm/lm2lm/lab/setting"
)

// testResult is a result of method and seed as o would write it, with two
// test states of hand-picked gains.
func testResult(o options, method string, seed uint64) Result {
	set, _ := o.chosen()
	prof, _ := o.prof()
	return Result{Method: method, Seed: seed, Profile: o.profile, Suite: o.suite, Setting: set, ProfileConfig: prof,
		Tasks: options{suite: o.suite}.tasksDigest(), M0: 8,
		States: []StateResult{
			{ID: "v2s1/val/ar-code/00#0", Task: "v2s1/val/ar-code/00", Gains: []float64{0.5, -1.25, 2, -6}, Infeasible: 1},
			{ID: "v2s1/val-out/ar-code/00#0", Task: "v2s1/val-out/ar-code/00", Gains: []float64{0.25, 0.75, -0.5, 1}},
		},
		Calibrations: []CalibrationResult{{Step: 8, Executed: 2, Predicted: []float64{0.1, 0.2}, Real: []float64{0.3, -0.4}}}}
}

// tamper rewrites the result of the file at path by replacing old with
// new in its JSON, and, with reseal, recomputes the checksum, as someone
// who knows the format would.
func tamper(t *testing.T, path, old, new string, reseal bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var f resultFile
	require.NoError(t, json.Unmarshal(b, &f))
	var body bytes.Buffer
	require.NoError(t, json.Compact(&body, f.Result))
	require.Contains(t, body.String(), old)
	changed := strings.Replace(body.String(), old, new, 1)
	f.Result = json.RawMessage(changed)
	if reseal {
		sum := sha256.Sum256([]byte(changed))
		f.SHA256 = hex.EncodeToString(sum[:])
	}
	out, err := json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, out, 0o644))
}

// Result files are checksummed and decoded strictly: a changed digit, a
// null gain (which a plain decoder reads as 0), a gain of 1e308 (which
// overflowed the statistics to +Inf and failed the comparison's JSON
// naming no file), an unknown field, or a result of another seed, setting
// or profile is an error naming the file, never a silently different
// table.
func TestResultFilesAreCheckedOnRead(t *testing.T) {
	o := options{profile: "tiny", suite: "v2-val"}
	j := job{"lm2lm", 2}
	cases := []struct {
		name, old, new string
		reseal         bool
		want           string
	}{
		{"one digit", `"gains_sigma":[0.5,`, `"gains_sigma":[0.6,`, false, "checksum mismatch"},
		{"null gain", `"gains_sigma":[0.5,`, `"gains_sigma":[null,`, true, "result.states[0].gains_sigma[0] is null"},
		{"null count", `"m0_records":8`, `"m0_records":null`, true, "result.m0_records is null"},
		{"huge gain", `"gains_sigma":[0.5,`, `"gains_sigma":[1e308,`, true, "result.states[0].gains_sigma[0] = 1e308: not a finite number within ±1e+09"},
		{"overflow", `"real_reward":[0.3,`, `"real_reward":[1e999,`, true, "result.calibrations[0].real_reward[0] = 1e999"},
		{"unknown field", `"m0_records":8`, `"m0_records":8,"bonus":1`, true, `unknown field "bonus"`},
		{"other seed", `"seed":2`, `"seed":3`, true, "holds lm2lm seed 3"},
		{"other setting", `"held_out_task":true`, `"held_out_task":false`, true, "was measured under the setting"},
		{"other profile", `"eval_states":1`, `"eval_states":4`, true, "was measured under the profile"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		require.NoError(t, writeResult(dir, j, testResult(o, j.method, j.seed)), c.name)
		got, ok, err := readResult(dir, j, o)
		require.NoError(t, err, c.name)
		require.True(t, ok)
		require.Equal(t, testResult(o, j.method, j.seed), got, "%s: a result reads back as written", c.name)
		path := resultPath(dir, j)
		tamper(t, path, c.old, c.new, c.reseal)
		_, ok, err = readResult(dir, j, o)
		require.False(t, ok, c.name)
		require.ErrorContains(t, err, path, c.name)
		require.ErrorContains(t, err, c.want, c.name)
	}
}

// The envelope is strict too, and the older, unchecksummed files are
// refused with their version named.
func TestResultEnvelopeIsStrict(t *testing.T) {
	o := options{profile: "tiny", suite: "v2-val"}
	j := job{"base", 1}
	dir := t.TempDir()
	path := resultPath(dir, j)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	good, err := encodeResult(testResult(o, j.method, j.seed))
	require.NoError(t, err)
	for name, c := range map[string]struct{ data, want string }{
		"version 2":      {`{"version": 2, "method": "base", "seed": 1}`, "a result of version 2, without checksum or setting"},
		"other format":   {strings.Replace(string(good), resultFormat, "lm2lm-compare-result/9", 1), `format "lm2lm-compare-result/9"`},
		"extra envelope": {strings.Replace(string(good), `"format"`, `"note": "x", "format"`, 1), `unknown field "note"`},
		"trailing data":  {string(good) + "{}", "data after the JSON value"},
		"not JSON":       {"gains", "bad result file"},
	} {
		require.NoError(t, os.WriteFile(path, []byte(c.data), 0o644))
		_, ok, err := readResult(dir, j, o)
		require.False(t, ok, name)
		require.ErrorContains(t, err, path, name)
		require.ErrorContains(t, err, c.want, name)
		require.ErrorContains(t, err, "move it away", name)
	}
}

// A comparison over a tampered result file fails naming the file and the
// field before any statistic is computed; over intact files it reports.
func TestComparisonRefusesATamperedResult(t *testing.T) {
	o := options{methods: []string{"base"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v2-val", out: t.TempDir(),
		progress: "lines", parallel: 1, resamples: 200}
	dir := runDir(o)
	require.NoError(t, writeResult(dir, job{"base", 1}, testResult(o, "base", 1)))
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, o))
	require.Contains(t, out.String(), "1 finished earlier, 0 to run")
	tamper(t, resultPath(dir, job{"base", 1}), `"gains_sigma":[0.5,`, `"gains_sigma":[1e308,`, true)
	o.force = true
	err := run(t.Context(), &bytes.Buffer{}, o)
	require.ErrorContains(t, err, resultPath(dir, job{"base", 1}))
	require.ErrorContains(t, err, "gains_sigma[0] = 1e308")
	require.NotContains(t, err.Error(), "unsupported value")
}

// -setting names the run directory and the command line off the
// validated default; the other kept options too.
func TestSettingHasItsOwnRunDirectory(t *testing.T) {
	o, err := parseFlags([]string{"-out", "out", "-suite", "v2-val", "-profile", "short"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, filepath.Join("out", "v2-val-short"), runDir(o))
	for _, c := range []struct {
		args     []string
		dir, arg string
	}{
		{[]string{"-setting", "library"}, "v2-val-short-library", " -setting library"},
		{[]string{"-setting", "validated"}, "v2-val-short", ""},
		{[]string{"-pessimism", "0.25", "-trigger"}, "v2-val-short-p0.25-trigger", " -pessimism 0.25 -trigger"},
		{[]string{"-setting", "library", "-eval-predict"}, "v2-val-short-library-pred", " -setting library -eval-predict"},
		{[]string{"-probe", "0"}, "v2-val-short-probe0", " -probe 0"},
	} {
		o, err := parseFlags(append([]string{"-out", "out", "-suite", "v2-val", "-profile", "short"}, c.args...), &bytes.Buffer{})
		require.NoError(t, err)
		require.Equal(t, filepath.Join("out", c.dir), runDir(o), c.args)
		require.Equal(t, "go run ./examples/compare -profile short -suite v2-val -seeds 5"+c.arg, command(o), c.args)
	}
}

// Every method runs the setting as the main job does: the same world
// model, the same untrained policy for a seed, the same trainer parts and
// the same profile (the one table of lab/setting).
func TestMethodsRunTheSetting(t *testing.T) {
	for _, name := range setting.Names() {
		o, err := parseFlags([]string{"-setting", name, "-profile", "short"}, &bytes.Buffer{})
		require.NoError(t, err)
		set, _ := setting.Lookup(name)
		pol, err := newPolicy(o, 3)
		require.NoError(t, err)
		want, err := set.NewPolicy(3)
		require.NoError(t, err)
		a, _ := pol.MarshalBinary()
		b, _ := want.MarshalBinary()
		require.Equal(t, b, a, name)
		prof, _ := setting.LookupProfile("short")
		for _, m := range []string{"lm2lm", "static", "lm2lm-wmrl"} {
			cfg := trainerConfig(o, methods[m], 3)
			require.NoError(t, cfg.Validate(), m)
			require.Equal(t, set.Trainer.HeldOutTask, cfg.HeldOutTask, m)
			require.Equal(t, []int{prof.Steps, prof.States, prof.Quota}, []int{cfg.Steps, cfg.States, cfg.DAPO.Quota}, m)
			require.Equal(t, prof.Schedule, cfg.Schedule, m)
			require.Equal(t, methods[m].calibration, cfg.Calibration, m)
			if methods[m].wmrl {
				require.Equal(t, setting.LabWMRL(), *cfg.WMRL, m)
			}
		}
		require.Equal(t, lm2lm.Static, trainerConfig(o, methods["static"], 1).Calibration)
	}
	// The evaluation of every profile: compare and the main job read the
	// same number of states per held-out task (it was 4 here, 8 there).
	o, err := parseFlags([]string{"-profile", "default"}, &bytes.Buffer{})
	require.NoError(t, err)
	p, _ := o.prof()
	require.Equal(t, 8, p.EvalStates)
	require.Equal(t, 8, p.EvalHistory)
}

// FuzzDecodeResult: whatever the bytes, decodeResult never panics, and a
// result it accepts holds only bounded numbers and round-trips through
// encodeResult unchanged.
func FuzzDecodeResult(f *testing.F) {
	o := options{profile: "tiny", suite: "v2-val"}
	good, err := encodeResult(testResult(o, "lm2lm", 1))
	require.NoError(f, err)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"version": 2, "method": "base", "seed": 1}`))
	f.Add([]byte(`{"format":"lm2lm-compare-result/3","sha256":"","result":{"gains_sigma":[null]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeResult(data)
		if err != nil {
			return
		}
		for _, s := range r.States {
			for _, g := range s.Gains {
				if !(g >= -maxMagnitude && g <= maxMagnitude) {
					t.Fatalf("accepted gain %g", g)
				}
			}
		}
		again, err := encodeResult(r)
		if err != nil {
			t.Fatalf("re-encoding an accepted result: %v", err)
		}
		back, err := decodeResult(again)
		if err != nil {
			t.Fatalf("re-reading an accepted result: %v", err)
		}
		if jsonText(back) != jsonText(r) {
			t.Fatalf("round trip changed the result")
		}
	})
}

// A locality measurement with a class of no pair (no mean shift) and a
// calibration without a gap reads back as written: the nulls the
// measurement writes are the ones the reader allows.
func TestResultWithEmptyLocalityClassReadsBack(t *testing.T) {
	o := options{profile: "tiny", suite: "v2-val"}
	j := job{"lm2lm", 2}
	r := testResult(o, j.method, j.seed)
	shift := 1.5
	r.Locality = []probe.Locality{{Step: 4, Classes: []probe.LocalityClass{{Class: "calibrated", Pairs: 2, MeanAbsShift: &shift}, {Class: "same mechanism"}}}}
	dir := t.TempDir()
	require.NoError(t, writeResult(dir, j, r))
	got, ok, err := readResult(dir, j, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r, got)
	require.Nil(t, got.Locality[0].Classes[1].MeanAbsShift)
	require.Nil(t, got.Locality[0].GapBefore)
}

// A reranked result without the candidates' temperature was drawn at the
// evaluation temperature by an earlier version: it is refused, saying so.
func TestRerankResultOfEarlierVersionRefused(t *testing.T) {
	o := options{profile: "tiny", suite: "v2-val"}
	j := job{"lm2lm-rerank", 1}
	r := testResult(o, j.method, j.seed)
	dir := t.TempDir()
	require.NoError(t, writeResult(dir, j, r))
	_, ok, err := readResult(dir, j, o)
	require.False(t, ok)
	require.ErrorContains(t, err, "drew its candidates at the evaluation temperature (a result of an earlier version), -rerank-temperature gives 2")
	r.RerankTemperature = defaultRerankTemp
	require.NoError(t, os.Remove(resultPath(dir, j)))
	require.NoError(t, writeResult(dir, j, r))
	got, ok, err := readResult(dir, j, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, r, got)
}
