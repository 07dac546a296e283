package yamlenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/records"
)

// timed returns a record of task id by source, seed and device-seconds.
func timed(id string, src records.Source, seed uint64, secs float64, p records.Proposal) records.Record {
	r := records.Record{Task: records.Task{ID: id, Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1, SeedNoise: 0.1},
		Proposal: p, Source: src, Loss: 1, Seeds: []uint64{seed}, Cost: records.Cost{DeviceSeconds: secs}, Time: time.Unix(1, 0).UTC()}
	if src == records.Failed {
		r.Failure, r.Loss = "exit code 1", 0
	}
	return r
}

var none = records.Proposal{Mechanism: records.NoChange}

// TestDurationsPerRun: a run is estimated by the mean device-seconds of
// its tasks' feasible real and reference runs, else of every task's, else
// the timeout's bound, else not at all (hand-derived means).
func TestDurationsPerRun(t *testing.T) {
	lr := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}
	infeasible := timed("b", records.Real, 1, 50, lr)
	infeasible.Infeasible = "diverged"
	rs := []records.Record{
		timed("a", records.Reference, 1, 100, none), timed("a", records.Reference, 2, 300, none),
		timed("b", records.Real, 1, 500, lr), infeasible, timed("b", records.Failed, 2, 1000, lr),
		timed("c", records.Synthetic, 1, 9000, lr),
	}
	d := NewDurations(rs, 600)
	for _, tt := range []struct {
		tasks []string
		secs  float64
		basis Basis
	}{
		{[]string{"a"}, 200, Measured},                         // (100 + 300) / 2
		{[]string{"b"}, 500, Measured},                         // the infeasible and the failed run do not count
		{[]string{"a", "b"}, 300, Measured},                    // (100 + 300 + 500) / 3
		{[]string{"h"}, 300, MeasuredElsewhere},                // every task's runs
		{[]string{"c"}, 300, MeasuredElsewhere},                // a synthetic record is no run
		{nil, 300, MeasuredElsewhere},                          // no task named
		{[]string{"a", "h"}, 200, Measured},                    // h adds nothing
		{[]string{"h", "zz"}, 300, MeasuredElsewhere},          // neither measured
		{[]string{"b", "b"}, 500, Measured},                    // a task named twice counts twice: the same mean
		{[]string{"a", "a", "b"}, (800 + 500) / 5.0, Measured}, // (100+300)·2 + 500 over 5
	} {
		s, b := d.PerRun(tt.tasks...)
		require.InDelta(t, tt.secs, s, 1e-9, "%v", tt.tasks)
		require.Equal(t, tt.basis, b, "%v", tt.tasks)
	}
	s, b := NewDurations(nil, 600).PerRun("a")
	require.Equal(t, [2]any{600.0, TimeoutBound}, [2]any{s, b})
	s, b = NewDurations(rs[3:5], 0).PerRun("a") // only an infeasible and a failed run
	require.Equal(t, [2]any{0.0, Unknown}, [2]any{s, b})
}

// TestEstimateAdd: sums take the weaker basis; an unknown part makes the
// sum unknown.
func TestEstimateAdd(t *testing.T) {
	m := Estimate{DeviceHours: 1, Money: 2.5, Basis: Measured}
	e := Estimate{DeviceHours: 2, Money: 5, Basis: MeasuredElsewhere}
	require.Equal(t, Estimate{DeviceHours: 3, Money: 7.5, Basis: MeasuredElsewhere}, m.Add(e))
	require.Equal(t, Estimate{DeviceHours: 3, Money: 7.5, Basis: MeasuredElsewhere}, e.Add(m))
	require.Equal(t, m, Estimate{Basis: Nothing}.Add(m))
	require.Equal(t, Estimate{DeviceHours: 1.5, Money: 2.5, Basis: TimeoutBound}, m.Add(Estimate{DeviceHours: 0.5, Basis: TimeoutBound}))
	require.Equal(t, Estimate{Basis: Unknown}, m.Add(Estimate{Basis: Unknown}))
	require.False(t, m.Add(Estimate{Basis: Unknown}).Known())
}

// planConfig is an environment of two training tasks and a held-out one
// over one card of two choices, priced at 2 per device-hour.
func planConfig(t *testing.T) envconfig.Config {
	p := filepath.Join(t.TempDir(), "env.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`version: 1
price_per_device_hour: 2
training: {command: [/bin/true], timeout: 10m}
reference: {seeds: [1, 2]}
tasks:
  - {id: a, family: f}
  - {id: b, family: f}
  - {id: h, family: f, split: held-out, seeds: [1]}
catalogue:
  cards:
    - {mechanism: lr-scale, description: scale the lr, params: [{name: factor, kind: float, choices: ["2", "3"]}]}
m0: {size: 3, seed: 1}
calibration: {steps: [4, 8], budgets: [2, 3]}
`), 0o644))
	c, err := envconfig.Load(p)
	require.NoError(t, err)
	return c
}

// TestPlanner plans every stage over a store that holds some runs: the
// counts are what the stages would do with each run (hand-derived from
// the store), and the estimate sums the runs to pay.
func TestPlanner(t *testing.T) {
	ctx := context.Background()
	cfg := planConfig(t)
	store := records.NewMemStore()
	require.NoError(t, store.Append(ctx, timed("a", records.Reference, 1, 100, none), timed("b", records.Failed, 1, 40, none)))
	p, err := NewPlanner(ctx, cfg, store)
	require.NoError(t, err)

	ref, ready, err := p.References(ctx)
	require.NoError(t, err)
	// a seed 1 stored, a seed 2 to pay; b seed 1 failed before, b seed 2 to
	// pay; h seed 1 to pay.
	require.Equal(t, [4]int{5, 3, 1, 1}, [4]int{len(ref.Runs), ref.ToPay, ref.Reused, ref.FailedBefore})
	require.Equal(t, []PlannedRun{{"a", "none{}", 1, Reused}, {"a", "none{}", 2, ToPay}, {"b", "none{}", 1, FailedBefore},
		{"b", "none{}", 2, ToPay}, {"h", "none{}", 1, ToPay}}, ref.Runs)
	require.Contains(t, ref.Note, "1 runs failed before")
	// 3 runs: a's at a's 100 s, b's and h's at the store's mean 100 s (the
	// failed run does not count): 300 s at 2 per hour.
	require.InDelta(t, 300.0/3600, ref.Estimate.DeviceHours, 1e-12)
	require.InDelta(t, 2*300.0/3600, ref.Estimate.Money, 1e-12)
	require.Equal(t, MeasuredElsewhere, ref.Estimate.Basis)
	// b is left out by its failure; a and h are assumed to get theirs.
	require.Len(t, ready, 2)
	require.Equal(t, [2]string{"a", "h"}, [2]string{ready[0].ID, ready[1].ID})
	require.Equal(t, cfg.Reference.MinSeedNoise, ready[0].SeedNoise)

	// M_0 over a alone: its card has two choices, so the draw of 3 gives 2.
	draws := environment.DrawM0(1, ready[:1], p.cards, 3)
	require.Len(t, draws, 2)
	require.NoError(t, store.Append(ctx, timed("a", records.Real, 1, 200, draws[0].Proposal),
		timed("a", records.Real, 2, 200, draws[1].Proposal))) // seed 2: not the seed M_0 runs with
	p, err = NewPlanner(ctx, cfg, store)
	require.NoError(t, err)
	m0, err := p.M0(ctx, ready)
	require.NoError(t, err)
	require.Equal(t, [3]int{2, 1, 1}, [3]int{len(m0.Runs), m0.ToPay, m0.Reused})
	require.Equal(t, PlannedRun{"a", draws[1].Proposal.Key(), 1, ToPay}, m0.Runs[1])
	// a's runs now: 100, 200, 200.
	require.InDelta(t, 500.0/3/3600, m0.Estimate.DeviceHours, 1e-12)
	require.Equal(t, Measured, m0.Estimate.Basis)

	// A change asked for twice is paid once; one outside the catalogue is
	// never run.
	lr3 := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "3"}}
	odd := records.Proposal{Mechanism: "dropout", Params: map[string]string{"p": "0.1"}}
	h := ready[1]
	ch, err := p.Changes(ctx, "evaluation", []string{"evaluate"}, []records.TaskChange{{Task: h, Proposal: lr3}, {Task: h, Proposal: lr3}, {Task: h, Proposal: odd}})
	require.NoError(t, err)
	require.Equal(t, [4]int{3, 1, 1, 1}, [4]int{len(ch.Runs), ch.ToPay, ch.Reused, ch.NotBuilt})
	require.Equal(t, MeasuredElsewhere, ch.Estimate.Basis) // h has no run of its own

	cal := p.Calibration(ready[:1])
	require.Equal(t, [2]int{5, 5}, [2]int{cal.AtMost, cal.ToPay}) // budgets 2 + 3
	require.InDelta(t, 5*500.0/3/3600, cal.Estimate.DeviceHours, 1e-12)

	// A store with no run: the estimate is training.timeout's bound.
	p, err = NewPlanner(ctx, cfg, records.NewMemStore())
	require.NoError(t, err)
	ref, _, err = p.References(ctx)
	require.NoError(t, err)
	require.Equal(t, TimeoutBound, ref.Estimate.Basis)
	require.InDelta(t, 5*10.0/60, ref.Estimate.DeviceHours, 1e-12) // 5 runs of at most 10 minutes
	require.InDelta(t, 2*5*10.0/60, ref.Estimate.Money, 1e-12)
}
