package serve_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// simDataset writes n dataset rows of the service at url to a JSON Lines
// file and returns its path and the rows.
func simDataset(t *testing.T, url, token string, n int) (string, []serve.DatasetRow) {
	t.Helper()
	code, b := post(t, url+"/v1/dataset", token, serve.StatesRequest{RequestID: "sim-ds", N: n})
	require.Equal(t, http.StatusOK, code, string(b))
	var rows []serve.DatasetRow
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r serve.DatasetRow
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		rows = append(rows, r)
	}
	path := filepath.Join(t.TempDir(), "train.jsonl")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path, rows
}

// runSim runs a simulator of adapters/python/sim with its arguments and
// environment against url and returns its output.
func runSim(t *testing.T, url, name string, env map[string]string, args ...string) string {
	t.Helper()
	path, err := filepath.Abs("../adapters/python/sim/" + name)
	require.NoError(t, err)
	if env == nil {
		env = map[string]string{}
	}
	e, _ := json.Marshal(env)
	argv, _ := json.Marshal(append([]string{path}, args...))
	script := fmt.Sprintf("import json, os, runpy, sys\nos.environ.update(json.loads(%q))\nsys.argv = json.loads(%q)\nrunpy.run_path(%q, run_name=\"__main__\")\n",
		e, argv, path)
	return runPython(t, url, simToken, script)
}

// simFlags returns the flags a simulator's argument parser declares.
func simFlags(t *testing.T, name string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../adapters/python/sim/" + name)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`a\("(--[A-Za-z0-9_.-]+)"`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	require.NotEmpty(t, out)
	return out
}

// recipeFlags returns the flags of a document's recipe: those of the
// command lines in its ```sh blocks.
func recipeFlags(t *testing.T, doc string) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/frameworks/" + doc)
	require.NoError(t, err)
	var out []string
	for _, blk := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		for _, m := range regexp.MustCompile(`(?m)(?:^|\s)(--[A-Za-z][A-Za-z0-9_.-]*)`).FindAllStringSubmatch(blk[1], -1) {
			out = append(out, m[1])
		}
	}
	require.NotEmpty(t, out, doc)
	return out
}

// twinCalibrations waits while a calibration of the twin runs and
// returns them.
func twinCalibrations(t *testing.T, url string) []serve.CalibrationStatus {
	t.Helper()
	for {
		resp, err := http.Get(url + "/v1/calibrations")
		require.NoError(t, err)
		var out serve.AdvanceResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		resp.Body.Close()
		if !slices.ContainsFunc(out.Calibrations, func(c serve.CalibrationStatus) bool { return c.State == serve.CalRunning }) {
			return out.Calibrations
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// twinAdvance sets the twin's step and waits for its calibrations.
func twinAdvance(t *testing.T, url string, step int) {
	t.Helper()
	code, b := post(t, url+"/v1/advance", "", serve.AdvanceRequest{Step: step})
	require.Equal(t, http.StatusOK, code, string(b))
	twinCalibrations(t, url)
}

// twinScore scores whole groups on the twin at step and returns the
// rewards by group name and index.
func twinScore(t *testing.T, url string, step int, groups []serve.GroupCompletions) map[string][]*float64 {
	t.Helper()
	code, b := post(t, url+"/v1/score", "", serve.ScoreRequest{Step: ip(step), Groups: groups})
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.ScoreResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	out := map[string][]*float64{}
	for _, g := range sr.Groups {
		for _, smp := range g.Samples {
			out[g.Group] = append(out[g.Group], smp.Reward)
		}
	}
	return out
}

// sameCalibrations checks that the service's calibration points fell on
// the trainer's steps 2 and 4 and match the twin's.
func sameCalibrations(t *testing.T, got, twin []serve.CalibrationStatus) {
	t.Helper()
	require.Len(t, got, 2)
	require.Len(t, twin, 2)
	for i, c := range got {
		require.Equal(t, []int{2, 4}[i], c.Step)
		require.Equal(t, twin[i].Step, c.Step)
		require.Equal(t, twin[i].Runs, c.Runs)
		require.Equal(t, twin[i].State, c.State)
		require.NotEqual(t, serve.CalFailed, c.State)
	}
}

type openrlhfSample struct {
	Label      string   `json:"label"`
	Completion string   `json:"completion"`
	Index      *int     `json:"index"`
	Reward     *float64 `json:"reward"`
	Score      *float64 `json:"score"`
	Error      string   `json:"error"`
}

type openrlhfOut struct {
	Steps []struct {
		Step    int              `json:"step"`
		Kept    []openrlhfSample `json:"kept"`
		Dropped []openrlhfSample `json:"dropped"`
	} `json:"steps"`
	Calibrations []serve.CalibrationStatus `json:"calibrations"`
}

const openrlhfG = 4

func openrlhfArgs(data string, extra ...string) []string {
	reward, _ := filepath.Abs("../adapters/python/lm2lm_openrlhf.py")
	return append([]string{"--data.prompt_dataset", data, "--data.input_key", "prompt", "--data.label_key", "label",
		"--data.apply_chat_template", "--reward.remote_url", reward, "--rollout.batch_size", "3",
		"--rollout.n_samples_per_prompt", fmt.Sprint(openrlhfG), "--algo.advantage.estimator", "dr_grpo"}, extra...)
}

func TestOpenRLHFSimulator(t *testing.T) {
	s, url := simService(t, servetest.Options{})
	data, rows := simDataset(t, url, simToken, 3)
	out := runSim(t, url, "openrlhf_sim.py", map[string]string{"LM2LM_SYNC_CALIBRATION": "1"},
		openrlhfArgs(data, "--algo.dynamic_filtering_enable", "--sim.steps", "5", "--sim.flat_every", "3")...)
	var got openrlhfOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Steps, 5)

	// The twin: same configuration and seed, the same dataset request,
	// the same steps; every group sent whole.
	_, twin, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	_, twinRows := simDataset(t, twin.URL, "", 3)
	require.Equal(t, rows, twinRows)
	kept, dropped := 0, 0
	for _, st := range got.Steps {
		if st.Step > 0 {
			twinAdvance(t, twin.URL, st.Step)
		}
		all := append(append([]openrlhfSample{}, st.Kept...), st.Dropped...)
		require.Len(t, all, openrlhfG*len(rows), "step %d", st.Step)
		byLabel := map[string][]openrlhfSample{}
		for _, smp := range all {
			require.Empty(t, smp.Error)
			require.NotNil(t, smp.Index)
			byLabel[smp.Label] = append(byLabel[smp.Label], smp)
		}
		var groups []serve.GroupCompletions
		for _, r := range rows {
			g := byLabel[r.Label]
			require.Len(t, g, openrlhfG)
			sort.Slice(g, func(i, j int) bool { return *g[i].Index < *g[j].Index })
			sg := serve.GroupCompletions{StateID: r.StateID, Group: r.Label}
			for i, smp := range g {
				require.Equal(t, i, *smp.Index)
				sg.Completions = append(sg.Completions, smp.Completion)
			}
			groups = append(groups, sg)
			byLabel[r.Label] = g
		}
		want := twinScore(t, twin.URL, st.Step, groups)
		for _, smp := range all {
			w := want[smp.Label][*smp.Index]
			require.NotNil(t, w)
			require.NotNil(t, smp.Reward)
			require.Equal(t, *w, *smp.Reward, "step %d group %s sample %d", st.Step, smp.Label, *smp.Index)
		}
		// OpenRLHF's dynamic filtering keeps a prompt when its mean score
		// is inside (0, 1): exactly the groups the service keeps.
		for _, smp := range st.Kept {
			require.Equal(t, 0.5, *smp.Score)
		}
		for _, smp := range st.Dropped {
			require.Equal(t, 0.0, *smp.Score)
		}
		kept += len(st.Kept)
		dropped += len(st.Dropped)
	}
	require.Positive(t, kept)
	require.Equal(t, 5*openrlhfG, dropped) // the flat prompt of every step
	twinAdvance(t, twin.URL, 5)
	require.Equal(t, 5, s.Info().Step)
	sameCalibrations(t, got.Calibrations, twinCalibrations(t, twin.URL))
	sameCalibrations(t, s.Calibrations().Calibrations, twinCalibrations(t, twin.URL))
	t.Logf("kept %d samples, dropped %d", kept, dropped)
}

func TestOpenRLHFWorldModelFailure(t *testing.T) {
	for _, mode := range []string{"raise", "filter"} {
		t.Run(mode, func(t *testing.T) {
			s, url := simService(t, servetest.Options{PredictFail: errors.New("world model down")})
			data, rows := simDataset(t, url, simToken, 2)
			args := openrlhfArgs(data)
			if mode == "filter" {
				args = append(args, "--algo.dynamic_filtering_enable")
			}
			out := runSim(t, url, "openrlhf_sim.py", map[string]string{"LM2LM_FAILED": mode}, args...)
			var got openrlhfOut
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
			require.Len(t, got.Steps, 1)
			st := got.Steps[0]
			if mode == "raise" {
				// OpenRLHF logs the error and the sample has no reward: the
				// step cannot use it.
				require.Len(t, st.Kept, openrlhfG*len(rows))
				for _, smp := range st.Kept {
					require.Nil(t, smp.Reward)
					require.Contains(t, smp.Error, "failed")
				}
			} else {
				// Every group's mean score is -1: dynamic filtering drops it.
				require.Empty(t, st.Kept)
				require.Len(t, st.Dropped, openrlhfG*len(rows))
				for _, smp := range st.Dropped {
					require.Equal(t, -1.0, *smp.Score)
				}
			}
			require.Equal(t, len(rows), s.Info().Failed)
			require.Zero(t, s.Info().Scored)
		})
	}
}

func TestOpenRLHFRecipeFlags(t *testing.T) {
	flags := simFlags(t, "openrlhf_sim.py")
	for _, f := range recipeFlags(t, "openrlhf.md") {
		if strings.HasPrefix(f, "--runtime-env-json") || f == "--address" {
			continue // ray job submit's own flags
		}
		require.True(t, flags[f], "the recipe's %s is not a flag of the simulator", f)
	}
}
