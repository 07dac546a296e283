package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
)

// buildReport on a store written by hand: every record counted under its
// stage (the M_0 pair found by redrawing M_0), money = device-hours ×
// price, gains in σ_e of the stored reference runs.
func TestBuildReportByHand(t *testing.T) {
	ctx := context.Background()
	cfg, err := envconfig.Load(config(t))
	require.NoError(t, err)
	cfg.PricePerDeviceHour = 2.5
	cards, err := cfg.Cards()
	require.NoError(t, err)
	store := records.NewMemStore()
	ts := cfg.TaskRecords()
	add := func(task records.Task, src records.Source, p records.Proposal, seed uint64, loss, devS float64, infeasible string) {
		task.RefLoss, task.SeedNoise = 1, 0.01
		r := records.Record{Task: task, Proposal: p, Source: src, Loss: loss, Gain: 1 - loss, Seeds: []uint64{seed},
			Infeasible: infeasible, Cost: records.Cost{DeviceSeconds: devS, WallSeconds: devS / 2}, Time: time.Unix(1, 0).UTC()}
		if infeasible != "" {
			r.Loss, r.Gain = 0, 0
		}
		require.NoError(t, store.Append(ctx, r))
	}
	none := records.Proposal{Mechanism: records.NoChange}
	// prose-a: seeds 1, 2, 3 (the default), losses 1.0, 1.2, 1.1: b_e 1.1,
	// σ_e 0.1. prose-b: seeds 1, 2: 2.0, 2.0 → σ_e floored at 0.01.
	// prose-held: seed 1 only of 3: left out.
	for i, l := range []float64{1.0, 1.2, 1.1} {
		add(ts[0], records.Reference, none, uint64(i+1), l, 3600, "")
	}
	add(ts[1], records.Reference, none, 1, 2.0, 1800, "")
	add(ts[1], records.Reference, none, 2, 2.0, 1800, "")
	add(ts[2], records.Reference, none, 1, 3.0, 360, "")
	train := []records.Task{ts[0], ts[1]}
	m0 := environment.DrawM0(cfg.M0.Seed, train, cards, cfg.M0.Size)
	var m0OnA *records.Proposal
	for _, d := range m0 {
		if d.Task.ID == "prose-a" && m0OnA == nil {
			m0OnA = &d.Proposal
		}
	}
	require.NotNil(t, m0OnA, "M_0's draw has a pair on prose-a")
	add(ts[0], records.Real, *m0OnA, 1, 0.9, 7200, "") // M_0: gain (1.1−0.9)/0.1 = +2
	other := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "0.5"}}
	add(ts[0], records.Real, other, 1, 1.3, 3600, "")      // calibration: −2
	add(ts[0], records.Real, other, 2, 0, 360, "diverged") // calibration, infeasible
	add(ts[2], records.Real, other, 1, 2.5, 1800, "")      // evaluation; its task has no b_e
	add(ts[0], records.Predicted, other, 1, 1.0, 0, "")    // not a run: not counted
	rep, err := buildReport(ctx, cfg, store)
	require.NoError(t, err)
	want := []StageCost{
		{Stage: "reference", Runs: 6, DeviceHours: 3 + 1 + 0.1},
		{Stage: "M_0", Runs: 1, DeviceHours: 2},
		{Stage: "calibration", Runs: 2, Infeasible: 1, DeviceHours: 1.1},
		{Stage: "evaluation", Runs: 1, DeviceHours: 0.5},
	}
	for i, w := range want {
		g := rep.Stages[i]
		require.Equal(t, w.Stage, g.Stage)
		require.Equal(t, w.Runs, g.Runs, w.Stage)
		require.Equal(t, w.Infeasible, g.Infeasible, w.Stage)
		require.InDelta(t, w.DeviceHours, g.DeviceHours, 1e-12, w.Stage)
		require.InDelta(t, w.DeviceHours/2, g.WallHours, 1e-12, w.Stage)
		require.InDelta(t, 2.5*w.DeviceHours, g.Money, 1e-12, w.Stage)
	}
	require.Equal(t, 10, rep.Total.Runs)
	require.InDelta(t, 2.5*7.7, rep.Total.Money, 1e-12)

	a := rep.Tasks[0]
	require.InDelta(t, 1.1, a.RefLoss, 1e-12)
	require.InDelta(t, 0.1, a.SeedNoise, 1e-12)
	require.Equal(t, 3, a.Real)
	require.Equal(t, 1, a.Infeasible)
	require.InDelta(t, 0.0, a.MeanGain, 1e-9) // (+2 − 2) / 2
	require.InDelta(t, 2.0, a.BestGain, 1e-9)
	require.Equal(t, m0OnA.Key(), a.Best)
	require.InDelta(t, 3+2+1+0.1, a.DeviceHours, 1e-12)
	require.Equal(t, 0.01, rep.Tasks[1].SeedNoise)
	require.Contains(t, rep.Tasks[2].LeftOut, "seed 2: no reference run in the store")
	require.True(t, math.IsNaN(rep.Tasks[2].MeanGain))
}

// The verbs then report: M_0 and the evaluation's runs land in their
// stages, the evaluation is kept and tabled, the charts and tables are
// written, and report pays for nothing.
func TestReportAfterTheVerbs(t *testing.T) {
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		return oaitest.Text(`{"mechanism": "lr-scale", "params": {"factor": "4"}}`)
	})
	p := config(t)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "price_per_device_hour: 3\nevaluate:\n  k: 2\n  states_per_task: 2\n  proposer: {base_url: %q, model: org/trained-v1}\n", srv.URL())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	ctx := context.Background()
	var out, errb bytes.Buffer
	for _, verb := range []string{"m0", "evaluate"} {
		require.NoError(t, run(ctx, []string{"-config", p, "-progress", "lines", verb}, noEnv, &out, &errb), errb.String())
	}
	dir := filepath.Join(filepath.Dir(p), "lm2lm-out")
	ref, real := storeCounts(t, filepath.Join(dir, "records.jsonl"))
	out.Reset()
	require.NoError(t, run(ctx, []string{"-config", p, "report"}, noEnv, &out, &errb), errb.String())
	r2, real2 := storeCounts(t, filepath.Join(dir, "records.jsonl"))
	require.Equal(t, [2]int{ref, real}, [2]int{r2, real2}, "report runs nothing")
	var rep Report
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	runs := map[string]int{}
	for _, s := range rep.Stages {
		runs[s.Stage] = s.Runs
		require.InDelta(t, 3*s.DeviceHours, s.Money, 1e-12)
	}
	// 3 + 2 + 3 reference seeds (prose-held's included), M_0's 6 draws,
	// one change on the held-out task.
	require.Equal(t, map[string]int{"reference": 8, "M_0": 6, "calibration": 0, "evaluation": 1}, runs)
	require.Len(t, rep.Evaluations, 1)
	require.Equal(t, "org/trained-v1", rep.Evaluations[0].Model)
	require.FileExists(t, filepath.Join(dir, "evaluations", "org_trained-v1-seed1.json"))
	for _, f := range []string{"report.md", "report-costs.png", "report-evaluations.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Positive(t, st.Size(), f)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| M_0 | 6 | 0 |")
	require.Contains(t, string(md), "| org/trained-v1 | 1 | 2 |")
	require.Contains(t, string(md), "![real runs paid, by stage](report-costs.png)")
	require.Contains(t, string(md), "![held-out evaluations](report-evaluations.png)")
	require.Regexp(t, `\| \d+% \[\d+, \d+\] \| \d+% \[\d+, \d+\] \|`, string(md), "rates unsigned, in per cent")
	require.Contains(t, out.String(), "Real runs paid, by stage")
}

// A kept evaluation that is not an evaluation's JSON stops the report with
// an error naming the file; no evaluation at all is no table.
func TestReadEvaluations(t *testing.T) {
	out := t.TempDir()
	evs, err := readEvaluations(out)
	require.NoError(t, err)
	require.Empty(t, evs)
	dir := filepath.Join(out, "evaluations")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b-seed1.json"), []byte(`{"model": "b", "seed": 1, "k": 4}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a-seed2.json"), []byte(`{"model": "a", "seed": 2, "k": 4}`), 0o644))
	evs, err = readEvaluations(out)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, []string{evs[0].Model, evs[1].Model}, "in file-name order")
	bad := filepath.Join(dir, "c-seed1.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"model": "c", "k": `), 0o644))
	_, err = readEvaluations(out)
	require.ErrorContains(t, err, bad)
}
