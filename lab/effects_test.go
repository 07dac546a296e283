package lab_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/records"
)

func TestEffects(t *testing.T) {
	l := tinyLab(t, records.NewMemStore())
	task, err := l.Task(context.Background(), "tiny-ar")
	require.NoError(t, err)
	eff := l.Effects()
	prop := func(mech string, kv ...string) records.Proposal {
		p := records.Proposal{Mechanism: mech, Params: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Params[kv[i]] = kv[i+1]
		}
		return p
	}
	// No change: the task's own descriptors.
	got, err := eff.Effect(task, records.Proposal{Mechanism: records.NoChange})
	require.NoError(t, err)
	require.Equal(t, task.Descriptors, got)
	// Halving the learning rate moves log10_lr by −log10 2 and nothing else.
	got, err = eff.Effect(task, prop("lr-scale", "factor", "0.5"))
	require.NoError(t, err)
	for name, v := range task.Descriptors {
		if name == lab.DescLog10LR {
			require.InDelta(t, v-math.Log10(2), got[name], 1e-12)
			continue
		}
		require.Equal(t, v, got[name], name)
	}
	// Doubling the width (32 → 64) changes the width, the parameter count
	// and tokens per parameter; the learning rate stays.
	got, err = eff.Effect(task, prop("width", "factor", "2"))
	require.NoError(t, err)
	require.Equal(t, 64.0, got[lab.DescWidth])
	require.Greater(t, got[lab.DescLog10Params], task.Descriptors[lab.DescLog10Params])
	require.Less(t, got[lab.DescTokensPerParam], task.Descriptors[lab.DescTokensPerParam])
	require.Equal(t, task.Descriptors[lab.DescLog10LR], got[lab.DescLog10LR])
	// Errors as Build's: infeasible proposals and unknown tasks.
	_, err = eff.Effect(task, prop("lr-scale", "factor", "1e9"))
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, cards.ErrOutOfRange)
	_, err = eff.Effect(records.Task{ID: "nope"}, prop("lr-scale", "factor", "2"))
	require.ErrorIs(t, err, lab.ErrUnknownTask)
	// The ID names the catalogue and the computation, not the lab's task
	// list: a lab of other tasks computes the same effects of the tasks
	// both hold.
	require.Equal(t, eff.ID(), tinyLab(t, records.NewMemStore()).Effects().ID())
	other, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	require.Equal(t, eff.ID(), other.Effects().ID())
	require.True(t, strings.HasPrefix(eff.ID(), "lab.Effects/"), eff.ID())
}
