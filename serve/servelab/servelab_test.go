package servelab

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The service scores with the named setting's world model: the validated
// one by default, and under prior-local the trainer's reading of it, the
// calibration records a local correction on M_0.
func TestSettingWorld(t *testing.T) {
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	var m0 records.Evidence
	w, err := Config{}.world(l, m0)
	require.NoError(t, err)
	_, residual := w.(*rwm.Residual)
	require.False(t, residual, "validated reads no correction")
	w, err = Config{Setting: "prior-local"}.world(l, m0)
	require.NoError(t, err)
	_, residual = w.(*rwm.Residual)
	require.True(t, residual, "prior-local reads its calibrations as a local correction")
}

// An unknown setting is refused before anything runs.
func TestUnknownSetting(t *testing.T) {
	_, _, err := Components(context.Background(), Config{Train: 1, Test: 1, M0: 1, Parallel: 1, Setting: "bogus"}, records.NewMemStore(), io.Discard)
	require.ErrorIs(t, err, setting.ErrUnknown)
}
