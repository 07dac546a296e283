package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
		report: filepath.Join(dir, "report.json"), seed: 3, parallel: 2, evalHistory: 4}
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

func TestUnknownFlags(t *testing.T) {
	var out bytes.Buffer
	require.ErrorContains(t, run(context.Background(), &out, options{profile: "huge"}), "unknown -profile")
	require.ErrorContains(t, run(context.Background(), &out, options{profile: "tiny", calibration: "best"}), "unknown -calibration")
	dir := t.TempDir()
	o := options{profile: "tiny", calibration: "static", store: filepath.Join(dir, "r.jsonl"), holdOut: "no-such-family"}
	require.ErrorContains(t, run(context.Background(), &out, o), "no-such-family")
}
