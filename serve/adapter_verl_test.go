package serve_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/bearer"
	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// verlRecipe returns the key=value overrides of the launch recipe in
// docs/frameworks/verl.md (the block that runs verl.trainer.main_ppo).
func verlRecipe(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/frameworks/verl.md")
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, "python3 -m verl.trainer.main_ppo")
	require.GreaterOrEqual(t, i, 0, "the recipe's main_ppo command is missing")
	end := strings.Index(doc[i:], "```")
	require.Greater(t, end, 0)
	var out []string
	for _, f := range strings.Fields(strings.ReplaceAll(doc[i:i+end], "\\\n", " ")) {
		if strings.Contains(f, "=") {
			out = append(out, f)
		}
	}
	require.NotEmpty(t, out)
	return out
}

type verlSimSample struct {
	SessionID   int            `json:"session_id"`
	Completion  string         `json:"completion"`
	RewardScore *float64       `json:"reward_score"`
	Extra       map[string]any `json:"reward_extra_info"`
	Error       string         `json:"error"`
}

type verlSimGroup struct {
	UID         string          `json:"uid"`
	StateID     string          `json:"state_id"`
	Status      string          `json:"status"`
	DAPOEvicted bool            `json:"dapo_evicted"`
	Samples     []verlSimSample `json:"samples"`
}

type verlSimOut struct {
	StatesRequest serve.StatesRequest `json:"states_request"`
	Steps         []struct {
		Step   int            `json:"step"`
		Groups []verlSimGroup `json:"groups"`
	} `json:"steps"`
	Calibrations []serve.CalibrationStatus `json:"calibrations"`
	Config       map[string]any            `json:"config"`
}

// runVerlSim runs adapters/python/sim/verl_sim.py with the recipe's
// overrides and then extra ones (later ones win, as in Hydra), the
// simulated policy writing servetest's completions.
func runVerlSim(t *testing.T, url string, extra ...string) verlSimOut {
	t.Helper()
	sim, err := filepath.Abs("../adapters/python/sim/verl_sim.py")
	require.NoError(t, err)
	comps := filepath.Join(t.TempDir(), "completions.json")
	b, _ := json.Marshal(servetest.Completions(0, 8))
	require.NoError(t, os.WriteFile(comps, b, 0o600))
	args := append([]string{"verl_sim.py", "--completions", comps, "--flat-every", "3"}, verlRecipe(t)...)
	// The recipe's rollout_data_dir is relative: keep its logs out of the tree.
	args = append(args, "trainer.rollout_data_dir="+filepath.Join(t.TempDir(), "rollouts"))
	args = append(args, extra...)
	script := `
import os, runpy, sys
os.environ["LM2LM_WAIT_CALIBRATION"] = "1"
os.environ["LM2LM_POLL_S"] = "0.02"
sys.argv = ARGS
runpy.run_path(SIM, run_name="__main__")
`
	simJSON, _ := json.Marshal(sim)
	script = strings.NewReplacer("ARGS", pyList(args), "SIM", string(simJSON)).Replace(script)
	out := runPython(t, url, simToken, script)
	if k := strings.LastIndex(out, "\n"); k >= 0 {
		out = out[k+1:]
	}
	var res verlSimOut
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	return res
}

func verlCalibrations(t *testing.T, url, token string) []serve.CalibrationStatus {
	t.Helper()
	code, body := bearer.Call(t, http.MethodGet, url+"/v1/calibrations", token, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var ar serve.AdvanceResponse
	require.NoError(t, json.Unmarshal(body, &ar))
	return ar.Calibrations
}

// TestVerlRewardLoop runs verl's Reward Loop, as the simulator reads it
// from verl's source, with the documented recipe against the real service:
// one sample per call from concurrent reward workers, each sample's group
// named by verl's uid. Every reward must equal the whole group's reward on
// a twin service, and the calibrations must fall on the trainer's steps.
func TestVerlRewardLoop(t *testing.T) {
	// Slow runs: the adapter must wait for a calibration to apply it at
	// the step after its point.
	s, url := simService(t, servetest.Options{RunDelay: 50 * time.Millisecond})
	const B, steps = 3, 5 // every third prompt's policy collapsed (--flat-every 3)
	facts := t.TempDir()
	res := runVerlSim(t, url, "data.train_batch_size=3", "trainer.total_training_steps=5",
		"reward.num_workers=2", "actor_rollout_ref.rollout.agent.num_workers=2", "trainer.rollout_data_dir="+facts)

	// verl v1's rollout dump has no reward_extra_info: the manager logs
	// each sample's answer beside it, one line per sample and step.
	for step := 1; step <= steps; step++ {
		files, err := filepath.Glob(filepath.Join(facts, "lm2lm", fmt.Sprintf("%d-*.jsonl", step)))
		require.NoError(t, err)
		lines := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &m))
				require.Equal(t, float64(step), m["step"])
				require.Contains(t, m, "uid")
				require.Contains(t, m, "score")
				require.Contains(t, m, "kept_advantage")
				lines++
			}
		}
		require.Equal(t, B*8, lines, "step %d", step)
	}

	// The recipe's settings, as the simulator resolved them.
	for k, v := range map[string]any{
		"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": false,
		"algorithm.filter_groups.enable": true, "algorithm.filter_groups.metric": "kept_advantage",
		"actor_rollout_ref.actor.clip_ratio_low": 0.2, "actor_rollout_ref.actor.clip_ratio_high": 0.28,
		"actor_rollout_ref.actor.loss_agg_mode": "token-mean", "actor_rollout_ref.rollout.n": 8.0,
		"reward.reward_manager.source": "importlib", "reward.reward_manager.name": "LM2LMRewardManager",
		"trainer.use_v1": true, "trainer.v1.trainer_mode": "sync",
	} {
		require.Equal(t, v, res.Config[k], k)
	}

	// The twin: same config and seed, the same states request, each step's
	// groups sent whole at the same step, waiting for calibrations as the
	// adapter did.
	_, twin, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	code, b := post(t, twin.URL+"/v1/states", "", res.StatesRequest)
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	require.Len(t, res.Steps, steps)
	for si, st := range res.Steps {
		require.Equal(t, si+1, st.Step)
		require.Len(t, st.Groups, B)
		for {
			running := false
			for _, c := range verlCalibrations(t, twin.URL, "") {
				running = running || (c.State == "running" && c.Step < st.Step)
			}
			if !running {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		q := serve.ScoreRequest{Step: ip(st.Step)}
		for gi, g := range st.Groups {
			require.Equal(t, sr.States[si*B+gi].StateID, g.StateID, "the twin issued other states")
			require.Equal(t, "finished", g.Status)
			require.Len(t, g.Samples, 8)
			var comps []string
			for i, smp := range g.Samples {
				require.Equal(t, i, smp.SessionID)
				comps = append(comps, smp.Completion)
			}
			q.Groups = append(q.Groups, serve.GroupCompletions{StateID: g.StateID, Group: g.UID, Completions: comps})
		}
		code, b := post(t, twin.URL+"/v1/score", "", q)
		require.Equal(t, http.StatusOK, code, string(b))
		var want serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &want))
		for gi, g := range st.Groups {
			kept := false
			for i, smp := range g.Samples {
				w := want.Groups[gi].Samples[i]
				require.Empty(t, smp.Error)
				require.NotNil(t, smp.RewardScore, "step %d group %d sample %d", st.Step, gi, i)
				require.NotNil(t, w.Reward)
				require.Equal(t, *w.Reward, *smp.RewardScore, "step %d group %d sample %d", st.Step, gi, i)
				require.Equal(t, *w.Reward, smp.Extra["score"])
				require.Equal(t, w.Advantage, smp.Extra["advantage"])
				require.Equal(t, w.Mechanism, smp.Extra["mechanism"])
				require.Equal(t, w.Tau, smp.Extra["tau"])
				require.Equal(t, map[bool]float64{true: 1, false: 0}[w.Kept], smp.Extra["kept"])
				require.Equal(t, 8.0, smp.Extra["received"])
				kept = w.Kept
			}
			// DAPO's filter keeps exactly the groups the service keeps.
			require.Equal(t, !kept, g.DAPOEvicted, "step %d group %d", st.Step, gi)
		}
	}

	// The calibrations fell on the trainer's steps 2 and 4 (budget 3 runs
	// each; the flat groups are no candidates) and, the adapter waiting for
	// them, applied at the next step.
	for _, cals := range [][]serve.CalibrationStatus{res.Calibrations, verlCalibrations(t, url, simToken)} {
		require.Len(t, cals, 2)
		for i, c := range cals {
			require.Equal(t, []int{2, 4}[i], c.Step)
			require.Equal(t, 3, c.Budget)
			require.Positive(t, c.Runs)
			require.LessOrEqual(t, c.Runs, c.Budget)
			require.Equal(t, "applied", c.State)
			require.NotNil(t, c.EffectiveStep)
			require.Equal(t, c.Step+1, *c.EffectiveStep)
		}
	}
	in := s.Info()
	require.Equal(t, steps, in.Step)
	require.Equal(t, B*steps, in.Scored)
	require.Zero(t, in.Failed)
}

// TestVerlWorldModelFailure: when the world model fails, every sample's
// compute_score raises, verl marks the group "failure" and stores no
// trajectory: the trainer gets no reward to learn from.
func TestVerlWorldModelFailure(t *testing.T) {
	s, url := simService(t, servetest.Options{PredictFail: errors.New("world model down")})
	res := runVerlSim(t, url, "data.train_batch_size=2", "trainer.total_training_steps=1",
		"reward.num_workers=2", "actor_rollout_ref.rollout.agent.num_workers=1")
	require.Len(t, res.Steps, 1)
	require.Len(t, res.Steps[0].Groups, 2)
	for _, g := range res.Steps[0].Groups {
		require.Equal(t, "failure", g.Status)
		require.False(t, g.DAPOEvicted)
		require.Len(t, g.Samples, 8)
		for _, smp := range g.Samples {
			require.Nil(t, smp.RewardScore)
			require.Nil(t, smp.Extra)
			require.Contains(t, smp.Error, "LM2LMFailure")
		}
	}
	in := s.Info()
	require.Equal(t, 2, in.Failed)
	require.Zero(t, in.Scored)
}

// TestVerlRecipeRefusesUnknownKeys: the simulator refuses a key verl's
// config (as simulated) lacks, so a recipe that drifts fails.
func TestVerlRecipeRefusesUnknownKeys(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skip("the adapters run with Debian's " + python + ", which is missing here")
	}
	sim, err := filepath.Abs("../adapters/python/sim/verl_sim.py")
	require.NoError(t, err)
	cmd := exec.Command(python, sim, "actor_rollout_ref.rollout.group_size=8")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "LM2LM_URL=http://127.0.0.1:9")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "unknown override")
}
