package serve_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

type primerlOut struct {
	Steps []struct {
		Step   int `json:"step"`
		Groups []struct {
			Group   string `json:"group"`
			StateID string `json:"state_id"`
			Traces  []struct {
				Completion string             `json:"completion"`
				Reward     *float64           `json:"reward"`
				Advantage  *float64           `json:"advantage"`
				Metrics    map[string]float64 `json:"metrics"`
			} `json:"traces"`
		} `json:"groups"`
	} `json:"steps"`
	Calibrations []serve.CalibrationStatus `json:"calibrations"`
}

// primerlConfig returns the recipe's rl.toml (docs/frameworks/prime-rl.md)
// with the test's sizes and dataset.
func primerlConfig(t *testing.T, data string, steps, batch, group int) string {
	t.Helper()
	b, err := os.ReadFile("../docs/frameworks/prime-rl.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(b)
	require.NotNil(t, m, "prime-rl.md has the rl.toml")
	cfg := string(m[1])
	for key, val := range map[string]string{"max_steps": itoa(steps), "batch_size": itoa(batch), "group_size": itoa(group),
		"dataset": `"` + data + `"`} {
		re := regexp.MustCompile(`(?m)^` + key + ` = .*$`)
		require.True(t, re.MatchString(cfg), key)
		cfg = re.ReplaceAllString(cfg, key+" = "+val)
	}
	path := filepath.Join(t.TempDir(), "rl.toml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

const primerlG = 4

func TestPrimeRLSimulator(t *testing.T) {
	s, url := simService(t, servetest.Options{})
	data, rows := simDataset(t, url, simToken, 3)
	out := runSim(t, url, "primerl_sim.py", map[string]string{"LM2LM_SYNC_CALIBRATION": "1"},
		"--config", primerlConfig(t, data, 5, 3*primerlG, primerlG))
	var got primerlOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Steps, 5)

	_, twin, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	_, twinRows := simDataset(t, twin.URL, "", 3)
	require.Equal(t, rows, twinRows)
	for _, st := range got.Steps {
		twinAdvance(t, twin.URL, st.Step)
		var groups []serve.GroupCompletions
		for _, g := range st.Groups {
			sg := serve.GroupCompletions{StateID: g.StateID, Group: "primerl-" + g.Group}
			for _, tr := range g.Traces {
				sg.Completions = append(sg.Completions, tr.Completion)
			}
			require.Len(t, sg.Completions, primerlG)
			groups = append(groups, sg)
		}
		require.Len(t, groups, len(rows))
		want := twinScore(t, twin.URL, st.Step, groups)
		for i, g := range st.Groups {
			mean := 0.0
			for j, tr := range g.Traces {
				w := want[groups[i].Group][j]
				require.NotNil(t, w)
				require.NotNil(t, tr.Reward)
				require.Equal(t, *w, *tr.Reward, "step %d group %s trace %d", st.Step, g.Group, j)
				require.Zero(t, tr.Metrics["lm2lm_failed"])
				mean += *tr.Reward / primerlG
			}
			// The advantage prime-rl trains on is the service's: the group's
			// mean-centred reward (LM2LM's Dr.GRPO form).
			for _, tr := range g.Traces {
				require.InDelta(t, *tr.Reward-mean, *tr.Advantage, 1e-9)
			}
		}
	}
	require.Equal(t, 4, s.Info().Step)
	sameCalibrations(t, got.Calibrations, twinCalibrations(t, twin.URL))
	sameCalibrations(t, s.Calibrations().Calibrations, twinCalibrations(t, twin.URL))
}

func TestPrimeRLWorldModelFailure(t *testing.T) {
	s, url := simService(t, servetest.Options{PredictFail: errors.New("world model down")})
	data, rows := simDataset(t, url, simToken, 2)
	out := runSim(t, url, "primerl_sim.py", nil, "--config", primerlConfig(t, data, 1, 2*primerlG, primerlG))
	var got primerlOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Steps, 1)
	for _, g := range got.Steps[0].Groups {
		for _, tr := range g.Traces {
			// No reward, no credit: the placeholder is gone and nothing is learnt.
			require.Nil(t, tr.Reward)
			require.Equal(t, 0.0, *tr.Advantage)
			require.Equal(t, 1.0, tr.Metrics["lm2lm_failed"])
		}
	}
	require.Equal(t, len(rows), s.Info().Failed)
}
