package loop

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/records"
)

// unmeasuredTask is a training task no real run measures.
var unmeasuredTask = records.Task{ID: "u", Family: "f", Split: records.Train, Metric: records.BitsPerByte,
	RefLoss: 3, SeedNoise: 0.5, Budget: 200}

// unmeasuredConfig: calibrations of four runs at steps 2, 4 and 6,
// rewards judged as for unseen tasks.
func unmeasuredConfig() Config {
	cfg := loopConfig()
	cfg.Quota, cfg.Candidates = 3, 8
	cfg.Schedule = calibrate.Schedule{Steps: []int{2, 4, 6}, Budgets: []int{4, 4, 4}}
	cfg.HeldOutTask = true
	return cfg
}

func newUnmeasuredLoop(t *testing.T, cfg Config) *Loop {
	l, err := New(cfg, Setup{Tasks: []records.Task{coreTask}, Unmeasured: []records.Task{unmeasuredTask}, Evidence: loopEvidence(t)})
	require.NoError(t, err)
	return l
}

// The states of an unmeasured task are drawn and rewarded as the training
// task's, judged on M whole, and calibration never asks a run of it; the
// checkpoint keeps its pool records.
func TestLoopUnmeasured(t *testing.T) {
	l := newUnmeasuredLoop(t, unmeasuredConfig())
	d := &driver{l: l, n: 8}
	states := map[string]int{}
	asked, runs := map[string]int{}, 0
	for range 4 {
		for _, s := range l.Draw(8) {
			states[s.Task.ID]++
			g := Group{State: s, Samples: fourSamples()}
			for _, j := range l.Ready(g).Predict {
				asked[j.Query.Task.ID]++
				if j.Query.Task.ID == unmeasuredTask.ID {
					require.Empty(t, j.PinTask, "nothing of the task to leave out")
					require.Equal(t, l.Status().Evidence.Fingerprint(), j.Query.Evidence.Fingerprint(), "judged on M whole")
				} else {
					require.Equal(t, coreTask.ID, j.PinTask)
				}
			}
		}
		d.rollout(t)
		for _, line := range d.log {
			require.NotContains(t, line, `ID:u `, "no run of an unmeasured task")
		}
		runs = l.Status().Runs
	}
	require.Positive(t, states[unmeasuredTask.ID])
	require.Positive(t, states[coreTask.ID])
	require.Equal(t, 4*8, states[unmeasuredTask.ID]+states[coreTask.ID])
	require.Positive(t, asked[unmeasuredTask.ID])
	require.Positive(t, runs)
	for i := 0; i < l.Status().Evidence.Len(); i++ {
		require.Equal(t, coreTask.ID, l.Status().Evidence.At(i).Task.ID, "no record of an unmeasured task in M")
	}
	require.Positive(t, l.Status().Pool.Count(unmeasuredTask.ID), "its predicted samples join the pool")

	// Its pool records travel in the checkpoint; a loop without the task
	// refuses them.
	cp, err := l.Checkpoint(nil)
	require.NoError(t, err)
	r := newUnmeasuredLoop(t, unmeasuredConfig())
	require.NoError(t, r.Restore(cp, nil))
	require.Equal(t, l.Status().Pool.Records(unmeasuredTask.ID), r.Status().Pool.Records(unmeasuredTask.ID))
	plain := newTestLoop(t, unmeasuredConfig())
	require.ErrorIs(t, plain.Restore(cp, nil), ErrCheckpoint)
}

func TestLoopUnmeasuredRefused(t *testing.T) {
	ev := loopEvidence(t)
	w := DefaultWMRLConfig()
	withWMRL := loopConfig()
	withWMRL.WMRL = &w
	bad := unmeasuredTask
	bad.SeedNoise = 0
	inM, err := records.NewEvidence(append(ev.Records(), records.Record{Task: unmeasuredTask, Proposal: prop("a"),
		Gain: 0.1, Loss: 2.9, Source: records.Real})...)
	require.NoError(t, err)
	for _, c := range []struct {
		name       string
		cfg        Config
		ev         records.Evidence
		unmeasured []records.Task
		want       string
	}{
		{"wmrl", withWMRL, ev, []records.Task{unmeasuredTask}, "WMRL"},
		{"a training task", loopConfig(), ev, []records.Task{coreTask}, `"t" is a training task or given twice`},
		{"twice", loopConfig(), ev, []records.Task{unmeasuredTask, unmeasuredTask}, `"u" is a training task or given twice`},
		{"invalid", loopConfig(), ev, []records.Task{bad}, "seed noise"},
		{"in M_0", loopConfig(), inM, []records.Task{unmeasuredTask}, `M_0 holds a record of unmeasured task "u"`},
	} {
		_, err := New(c.cfg, Setup{Tasks: []records.Task{coreTask}, Unmeasured: c.unmeasured, Evidence: c.ev})
		require.ErrorIs(t, err, ErrConfig, c.name)
		require.ErrorContains(t, err, c.want, c.name)
	}
	// None is none.
	_, err = New(loopConfig(), Setup{Tasks: []records.Task{coreTask}, Evidence: ev})
	require.NoError(t, err)
}
