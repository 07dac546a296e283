package serve_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

type slimeOut struct {
	Rollouts []struct {
		RolloutID int    `json:"rollout_id"`
		Error     string `json:"error"`
		Removed   int    `json:"removed"`
		Groups    []struct {
			GroupIndex int    `json:"group_index"`
			Label      string `json:"label"`
			Why        string `json:"why"`
			Samples    []struct {
				Response     string   `json:"response"`
				Reward       *float64 `json:"reward"`
				RemoveSample bool     `json:"remove_sample"`
				LM2LM        struct {
					Step          int      `json:"step"`
					Reward        *float64 `json:"reward"`
					Kept          bool     `json:"kept"`
					FailureReason string   `json:"failure_reason"`
				} `json:"lm2lm"`
			} `json:"samples"`
		} `json:"groups"`
	} `json:"rollouts"`
	Calibrations []serve.CalibrationStatus `json:"calibrations"`
}

const slimeG = 4

func slimeArgs(data string, extra ...string) []string {
	return append([]string{"--prompt-data", data, "--input-key", "text", "--label-key", "label",
		"--custom-rm-path", "lm2lm_slime.rm", "--group-rm", "--rollout-function-path", "lm2lm_slime.generate_rollout",
		"--rollout-batch-size", "3", "--n-samples-per-prompt", fmt.Sprint(slimeG), "--advantage-estimator", "grpo",
		"--disable-grpo-std-normalization"}, extra...)
}

func TestSlimeSimulator(t *testing.T) {
	s, url := simService(t, servetest.Options{})
	data, rows := simDataset(t, url, simToken, 4)
	out := runSim(t, url, "slime_sim.py", map[string]string{"LM2LM_SYNC_CALIBRATION": "1"},
		slimeArgs(data, "--num-rollout", "5", "--dynamic-sampling-filter-path", "lm2lm_slime.keep",
			"--over-sampling-batch-size", "2", "--sim.flat_every", "3")...)
	var got slimeOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Rollouts, 5)

	_, twin, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	_, twinRows := simDataset(t, twin.URL, "", 4)
	require.Equal(t, rows, twinRows)
	kept, why := 0, map[string]int{}
	for _, ro := range got.Rollouts {
		require.Empty(t, ro.Error)
		twinAdvance(t, twin.URL, ro.RolloutID)
		var groups []serve.GroupCompletions
		for _, g := range ro.Groups {
			sg := serve.GroupCompletions{StateID: g.Label, Group: fmt.Sprintf("%s/%d", g.Label, g.GroupIndex)}
			for _, smp := range g.Samples {
				sg.Completions = append(sg.Completions, smp.Response)
			}
			require.Len(t, sg.Completions, slimeG)
			groups = append(groups, sg)
		}
		want := twinScore(t, twin.URL, ro.RolloutID, groups)
		nkept := 0
		for i, g := range ro.Groups {
			for j, smp := range g.Samples {
				w := want[groups[i].Group][j]
				require.NotNil(t, w)
				require.NotNil(t, smp.Reward)
				require.Equal(t, *w, *smp.Reward, "rollout %d group %s sample %d", ro.RolloutID, groups[i].Group, j)
				require.Equal(t, ro.RolloutID, smp.LM2LM.Step)
				require.False(t, smp.RemoveSample)
				// slime's filter drops a group exactly when the service drops it.
				if g.Why == "kept" || g.Why == "filtered" || g.Why == "surplus" {
					require.Equal(t, g.Why != "filtered", smp.LM2LM.Kept, "rollout %d group %s", ro.RolloutID, groups[i].Group)
				}
			}
			why[g.Why]++
			if g.Why == "kept" {
				nkept++
			}
		}
		require.Equal(t, 3, nkept)
		kept += nkept
	}
	require.Equal(t, 15, kept)
	require.Positive(t, why["filtered"])
	require.Equal(t, 4, s.Info().Step)
	t.Logf("groups: %v", why)
	sameCalibrations(t, got.Calibrations, twinCalibrations(t, twin.URL))
	sameCalibrations(t, s.Calibrations().Calibrations, twinCalibrations(t, twin.URL))
}

func TestSlimeWorldModelFailure(t *testing.T) {
	s, url := simService(t, servetest.Options{PredictFail: errors.New("world model down")})
	data, _ := simDataset(t, url, simToken, 3)
	out := runSim(t, url, "slime_sim.py", nil, slimeArgs(data)...)
	var got slimeOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Rollouts, 1)
	ro := got.Rollouts[0]
	require.Empty(t, ro.Error)
	// Every sample is out of the loss (slime's remove_sample), its
	// placeholder never learnt; the service's answer says why.
	require.Equal(t, 3*slimeG, ro.Removed)
	for _, g := range ro.Groups {
		for _, smp := range g.Samples {
			require.True(t, smp.RemoveSample)
			require.Nil(t, smp.LM2LM.Reward)
			require.NotEmpty(t, smp.LM2LM.FailureReason)
		}
	}
	require.Equal(t, 3, s.Info().Failed)
}

func TestSlimeRecipeFlags(t *testing.T) {
	flags := simFlags(t, "slime_sim.py")
	for _, f := range recipeFlags(t, "slime.md") {
		if f == "--address" || f == "--runtime-env-json" {
			continue // ray job submit's own flags
		}
		require.True(t, flags[f], "the recipe's %s is not a flag of the simulator", f)
	}
}
