package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve/servetest"
)

// TestTabularTrainerLearns runs adapters/python/lm2lm_tabular.py, the
// framework-free trainer of docs/service.md, against the real service:
// scoring per sample, calibrations at steps 2 and 4 in the background, and
// the mean reward of its last five steps above that of its first five.
func TestTabularTrainerLearns(t *testing.T) {
	s, url := simService(t, servetest.Options{})
	out := runPython(t, url, simToken, "import json, lm2lm_tabular; print(json.dumps(lm2lm_tabular.train()))")
	var curve []float64
	require.NoError(t, json.Unmarshal([]byte(out), &curve), out)
	require.Len(t, curve, 30)
	mean := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(curve[:5]), mean(curve[25:])
	t.Logf("mean reward: first five steps %+.3f, last five %+.3f", first, last)
	require.Greater(t, last, first+0.5, "the policy learns through the service")
	in := s.Info()
	require.Equal(t, 29, in.Step)
	require.Equal(t, 2, in.Calibrations, "both calibration points applied at the trainer's steps")
	require.Equal(t, 30*8, in.Scored)
}
