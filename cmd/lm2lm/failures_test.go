package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// brokenScript is a training script in Python that crashes (exit 1, a
// traceback on stderr) on every proposal of the mechanism named in the
// file "broken" beside it, and on the reference run of the task and seed
// named in "broken-ref"; otherwise its loss is 1 + 0.01·seed, +0.1 under a
// change.
const brokenScript = `import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
def read(name):
    try:
        return open(os.path.join(here, name)).read().strip()
    except FileNotFoundError:
        return ""
job = json.load(open(sys.argv[1]))
mech = job["proposal"]["mechanism"]
print("training", job["task"]["id"], mech, "seed", job["seed"], flush=True)
if mech != "none" and mech == read("broken"):
    print("Traceback (most recent call last):", file=sys.stderr)
    print("ValueError: cannot apply " + mech, file=sys.stderr)
    sys.exit(1)
if mech == "none" and read("broken-ref") == "%s %d" % (job["task"]["id"], job["seed"]):
    print("FileNotFoundError: corpus.tx", file=sys.stderr)
    sys.exit(1)
loss = 1 + 0.01 * job["seed"] + (0.1 if mech != "none" else 0)
json.dump({"loss": loss}, open(sys.argv[2], "w"))
`

// brokenEnv writes the script and an env.yaml over it and returns the
// config's path.
func brokenEnv(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "train.py"), []byte(brokenScript), 0o644))
	cfg := fmt.Sprintf(`version: 1
price_per_device_hour: 2
training:
  command: [/usr/bin/python3, ./train.py]
  version: %q
executor: {slots: 2}
reference: {seeds: [1, 2], min_seed_noise: 0.01}
tasks:
  - {id: a, family: f}
  - {id: b, family: f}
  - {id: held, family: f, split: held-out}
catalogue:
  cards:
    - {mechanism: lr-scale, description: scale the learning rate, params: [{name: factor, kind: float, choices: ["2", "3", "4"]}]}
    - {mechanism: width, description: scale the width, params: [{name: mult, kind: float, choices: ["2", "0.5"]}]}
m0: {size: 10, seed: 1}
`, version)
	p := filepath.Join(dir, "env.yaml")
	require.NoError(t, os.WriteFile(p, []byte(cfg), 0o600))
	return p
}

// lm2lmRun runs one invocation and returns its stdout, stderr and error.
func lm2lmRun(t *testing.T, cfg string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"-config", cfg, "-progress", "lines"}, args...), noEnv, &out, &errb)
	return out.String(), errb.String(), err
}

// storeRecords returns every record of the config's store.
func storeRecords(t *testing.T, cfg string) []records.Record {
	t.Helper()
	s, err := records.OpenFile(filepath.Join(filepath.Dir(cfg), "lm2lm-out", "records.jsonl"), records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	defer s.Close()
	rs, err := s.Scan(context.Background(), records.Filter{})
	require.NoError(t, err)
	return rs
}

// TestFailedRunsAreKeptCountedAndNotPaidTwice: M_0 over 2 training tasks ×
// 5 catalogue changes draws all 10 pairs; the 4 width ones crash. m0 keeps
// each failure in the store with its log, prints the traceback, counts
// them and their cost, and exits non-zero; run again it pays nothing and
// still fails; report counts them; after the fix, forget -failed and m0
// pay exactly the 4 again and succeed.
func TestFailedRunsAreKeptCountedAndNotPaidTwice(t *testing.T) {
	cfg := brokenEnv(t, "")
	dir := filepath.Dir(cfg)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken"), []byte("width"), 0o644))

	out, errs, err := lm2lmRun(t, cfg, "m0")
	require.ErrorIs(t, err, errShort)
	require.Contains(t, err.Error(), "M_0: short of runs: 4 runs gave no outcome")
	require.Contains(t, out, "M_0: 6 records (0 infeasible, 4 failed): 10 runs paid now, 0 reused")
	require.Equal(t, 4, strings.Count(errs, "FAILED "), errs)
	require.Contains(t, errs, "(paid now): builder: run failed: exit code 1")
	require.Contains(t, errs, "  | ValueError: cannot apply width")
	require.Contains(t, errs, "  log: "+filepath.Join(dir, "lm2lm-out", "logs", "a")+"/width-")

	var failed []records.Record
	for _, r := range storeRecords(t, cfg) {
		if r.Source == records.Failed {
			failed = append(failed, r)
		}
	}
	require.Len(t, failed, 4)
	for _, r := range failed {
		require.Equal(t, "width", r.Proposal.Mechanism)
		require.Equal(t, "builder: run failed: exit code 1", r.Failure)
		require.Contains(t, r.Log, "ValueError: cannot apply width")
		require.Positive(t, r.Cost.DeviceSeconds, "a failed run's cost is kept")
		whole, err := os.ReadFile(r.LogFile)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(whole), "training "+r.Task.ID+" width seed 1\n"), "%q", whole)
		require.Contains(t, string(whole), "ValueError: cannot apply width")
	}
	var m0 M0Report
	b, err := os.ReadFile(filepath.Join(dir, "lm2lm-out", "m0.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m0))
	require.Equal(t, [3]int{6, 4, 10}, [3]int{m0.Records, m0.Failed, m0.PaidNow})
	require.Len(t, m0.Failures, 4)

	// Again: nothing is paid, the failures are named again.
	out, errs, err = lm2lmRun(t, cfg, "m0")
	require.ErrorIs(t, err, errShort)
	require.Contains(t, out, "M_0: 6 records (0 infeasible, 4 failed): 0 runs paid now, 10 reused")
	require.Equal(t, 4, strings.Count(errs, "(failed before, not paid again)"), errs)
	require.Len(t, storeRecords(t, cfg), 6+6+4, "3×2 reference runs, 6 records, 4 failures: nothing added")

	// The report counts the failed runs and their cost under M_0.
	out, _, err = lm2lmRun(t, cfg, "report")
	require.NoError(t, err)
	var rep Report
	b, err = os.ReadFile(filepath.Join(dir, "lm2lm-out", "report.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, "M_0", rep.Stages[1].Stage)
	require.Equal(t, [2]int{10, 4}, [2]int{rep.Stages[1].Runs, rep.Stages[1].Failed})
	require.Equal(t, 4, rep.Total.Failed)
	var want float64
	for _, r := range storeRecords(t, cfg) {
		want += r.Cost.DeviceSeconds / 3600
	}
	require.InDelta(t, want, rep.Total.DeviceHours, 1e-12, "every run's cost, the failed ones' too")

	// The fix, then the way out.
	require.NoError(t, os.Remove(filepath.Join(dir, "broken")))
	out, _, err = lm2lmRun(t, cfg, "forget", "-failed")
	require.NoError(t, err)
	require.Contains(t, out, "forget: 4 runs taken out of ")
	require.Contains(t, out, "12 left")
	out, errs, err = lm2lmRun(t, cfg, "m0")
	require.NoError(t, err, errs)
	require.Contains(t, out, "M_0: 10 records (0 infeasible, 0 failed): 4 runs paid now, 6 reused")
	gone, err := records.OpenFile(filepath.Join(dir, "lm2lm-out", "records.forgotten.jsonl"), records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	defer gone.Close()
	require.Equal(t, 4, gone.Len(), "forgotten, not lost")
}

// TestFailedReferenceRun: a reference run that crashes leaves its task
// out with the failure and the script's message, the other tasks are
// measured, and the verb exits non-zero; m0 stops there too, before
// paying for M_0.
func TestFailedReferenceRun(t *testing.T) {
	cfg := brokenEnv(t, "")
	dir := filepath.Dir(cfg)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken-ref"), []byte("b 2"), 0o644))
	out, errs, err := lm2lmRun(t, cfg, "reference")
	require.ErrorIs(t, err, errShort)
	require.Contains(t, out, "b                        train    left out: reference run failed (seed 2: run failed: builder: run failed: exit code 1)")
	require.Contains(t, out, "a                        train    b_e 1.015")
	require.Contains(t, errs, "FAILED b none{} seed 2 (paid now)")
	require.Contains(t, errs, "  | FileNotFoundError: corpus.tx")

	out, _, err = lm2lmRun(t, cfg, "m0")
	require.ErrorIs(t, err, errShort)
	require.Contains(t, out, "reference: 0 runs paid now, 6 reused")
	require.NotContains(t, out, "M_0:")
}

// TestVersionRunsAgain: under a new training.version every run is paid
// again; the old version's runs stay in the store, and forget -version
// takes them out.
func TestVersionRunsAgain(t *testing.T) {
	cfg := brokenEnv(t, "")
	out, _, err := lm2lmRun(t, cfg, "reference")
	require.NoError(t, err)
	require.Contains(t, out, "reference: 6 runs paid now, 0 reused")
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfg, bytes.Replace(b, []byte(`version: ""`), []byte(`version: "v2"`), 1), 0o600))
	out, _, err = lm2lmRun(t, cfg, "reference")
	require.NoError(t, err)
	require.Contains(t, out, "reference: 6 runs paid now, 0 reused")
	out, _, err = lm2lmRun(t, cfg, "reference")
	require.NoError(t, err)
	require.Contains(t, out, "reference: 0 runs paid now, 6 reused")
	require.Len(t, storeRecords(t, cfg), 12)

	out, _, err = lm2lmRun(t, cfg, "forget", "-version=")
	require.NoError(t, err)
	require.Contains(t, out, "forget: 6 runs taken out")
	for _, r := range storeRecords(t, cfg) {
		require.Equal(t, "v2", r.Version)
	}
	_, _, err = lm2lmRun(t, cfg, "forget")
	require.True(t, errors.Is(err, errUsage), "forget with no selection forgets nothing: %v", err)
}
