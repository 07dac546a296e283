package lm2lm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/records"
)

// unmeasuredTask is a training task no real run measures.
var unmeasuredTask = records.Task{ID: "u", Family: "f", Split: records.Train, Metric: records.BitsPerByte,
	RefLoss: 3, SeedNoise: 0.5, Budget: 200}

// unmeasuredConfig: six steps, a rollout each, eight states, calibrations
// of four runs at steps 1, 3 and 5, rewards judged as for unseen tasks.
func unmeasuredConfig() Config {
	cfg := loopConfig()
	cfg.Steps, cfg.RolloutEvery, cfg.States, cfg.DAPO.Quota = 6, 1, 8, 3
	cfg.Schedule = calibrate.Schedule{Steps: []int{1, 3, 5}, Budgets: []int{4, 4, 4}}
	cfg.HeldOutTask = true
	return cfg
}

func newUnmeasuredLoop(t *testing.T, cfg Config) *Loop {
	l, err := NewLoop(cfg, []records.Task{coreTask}, loopEvidence(t), nil, WithUnmeasured(unmeasuredTask))
	require.NoError(t, err)
	return l
}

// The states of an unmeasured task are drawn and rewarded as the training
// task's, judged on M whole, and calibration never asks a run of it; the
// checkpoint keeps its pool records.
func TestLoopUnmeasured(t *testing.T) {
	l := newUnmeasuredLoop(t, unmeasuredConfig())
	require.Equal(t, []records.Task{unmeasuredTask}, l.Unmeasured())
	require.Equal(t, []records.Task{coreTask}, l.Tasks())
	states := map[string]int{}
	asked, runs := map[string]int{}, 0
	for guard := 0; guard < 1000; guard++ {
		rd := l.Ready()
		if rd.Need == NeedNothing {
			break
		}
		switch rd.Need {
		case NeedSamples:
			for _, j := range rd.Propose {
				states[j.State.Task.ID]++
			}
		case NeedPredictions:
			for _, j := range rd.Predict {
				asked[j.Query.Task.ID]++
				if j.Query.Task.ID == unmeasuredTask.ID {
					require.Empty(t, j.PinTask, "nothing of the task to leave out")
					require.Equal(t, l.Evidence().Fingerprint(), j.Query.Evidence.Fingerprint(), "judged on M whole")
				} else {
					require.Equal(t, coreTask.ID, j.PinTask)
				}
			}
		case NeedRuns:
			for _, j := range rd.Execute {
				require.Equal(t, coreTask.ID, j.Change.Task.ID, "no run of an unmeasured task")
				runs++
			}
		}
		_, _, err := l.Advance(answerer(rd))
		if !errors.Is(err, ErrNoSignal) {
			require.NoError(t, err)
		}
	}
	require.Equal(t, NeedNothing, l.Ready().Need)
	require.Positive(t, states[unmeasuredTask.ID])
	require.Positive(t, states[coreTask.ID])
	require.Equal(t, 6*8, states[unmeasuredTask.ID]+states[coreTask.ID])
	require.Positive(t, asked[unmeasuredTask.ID])
	require.Positive(t, runs)
	require.Positive(t, l.Pool().Count(unmeasuredTask.ID), "its predicted samples join the pool")

	// Its pool records travel in the checkpoint; a loop without the task
	// refuses them.
	cp, err := l.MarshalBinary()
	require.NoError(t, err)
	r := newUnmeasuredLoop(t, unmeasuredConfig())
	require.NoError(t, r.UnmarshalBinary(cp))
	require.Equal(t, l.Pool().Records(unmeasuredTask.ID), r.Pool().Records(unmeasuredTask.ID))
	plain, err := NewLoop(unmeasuredConfig(), []records.Task{coreTask}, loopEvidence(t), nil)
	require.NoError(t, err)
	require.ErrorIs(t, plain.UnmarshalBinary(cp), ErrCheckpoint)

	// The same seed draws the same run.
	_, a := drive(t, newUnmeasuredLoop(t, unmeasuredConfig()))
	_, b := drive(t, newUnmeasuredLoop(t, unmeasuredConfig()))
	require.Equal(t, a, b)
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
		name string
		cfg  Config
		ev   records.Evidence
		opt  LoopOption
		want string
	}{
		{"wmrl", withWMRL, ev, WithUnmeasured(unmeasuredTask), "WMRL"},
		{"a training task", loopConfig(), ev, WithUnmeasured(coreTask), `"t" is a training task or given twice`},
		{"twice", loopConfig(), ev, WithUnmeasured(unmeasuredTask, unmeasuredTask), `"u" is a training task or given twice`},
		{"invalid", loopConfig(), ev, WithUnmeasured(bad), "seed noise"},
		{"in M_0", loopConfig(), inM, WithUnmeasured(unmeasuredTask), `M_0 holds a record of unmeasured task "u"`},
	} {
		_, err := NewLoop(c.cfg, []records.Task{coreTask}, c.ev, nil, c.opt)
		require.ErrorIs(t, err, ErrConfig, c.name)
		require.ErrorContains(t, err, c.want, c.name)
	}
	// None is none.
	_, err = NewLoop(loopConfig(), []records.Task{coreTask}, ev, nil, WithUnmeasured())
	require.NoError(t, err)
}
