package serve_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// simServiceWith is simService with the configuration changed by mod.
func simServiceWith(t *testing.T, opt servetest.Options, mod func(*serve.Config)) (*serve.Service, string) {
	t.Helper()
	cfg := servetest.Config(t.TempDir())
	cfg.Token = simToken
	mod(&cfg)
	comp, _, err := servetest.Components(opt)
	require.NoError(t, err)
	s, err := serve.New(cfg, comp)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, startLoopback(t, s)
}

// pathGroup is one group a simulated trainer scored: its state, its
// completions in index order, the rewards the trainer got.
type pathGroup struct {
	state       string
	completions []string
	rewards     []*float64
}

// rescore scores groups whole on the service at its current step under
// fresh names and checks that every reward the trainer got is the reward
// of its own completions.
func rescore(t *testing.T, url string, groups []pathGroup) {
	t.Helper()
	code, b := getJSON(t, url+"/v1/info")
	require.Equal(t, http.StatusOK, code, string(b))
	var info struct {
		Step int `json:"step"`
	}
	require.NoError(t, json.Unmarshal(b, &info))
	require.NotEmpty(t, groups)
	for i, g := range groups {
		q := serve.ScoreRequest{Step: ip(info.Step), Groups: []serve.GroupCompletions{{StateID: g.state,
			Group: fmt.Sprintf("rescore-%d", i), Completions: g.completions}}}
		code, b := post(t, url+"/v1/score", simToken, q)
		require.Equal(t, http.StatusOK, code, string(b))
		var sr serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &sr))
		for j, smp := range sr.Groups[0].Samples {
			require.NotNil(t, g.rewards[j], "group %d sample %d has no reward", i, j)
			require.NotNil(t, smp.Reward)
			require.Equal(t, *smp.Reward, *g.rewards[j], "group %d (%s) sample %d: the reward is not its completion's", i, g.state, j)
		}
	}
}

func getJSON(t *testing.T, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+simToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	return resp.StatusCode, raw
}

// resumeCase runs a simulator for steps steps from start (variant varies
// the completions the policy writes, as a resumed run's sampling does)
// and lists the groups it scored.
type resumeCase struct {
	name   string
	run    func(t *testing.T, url string, start, steps, variant int) string
	groups func(t *testing.T, out string) []pathGroup
}

func verlGroups(t *testing.T, out string) []pathGroup {
	var res verlSimOut
	require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &res), out)
	var gs []pathGroup
	for _, st := range res.Steps {
		for _, g := range st.Groups {
			pg := pathGroup{state: g.StateID}
			for _, smp := range g.Samples {
				require.Empty(t, smp.Error)
				pg.completions = append(pg.completions, smp.Completion)
				pg.rewards = append(pg.rewards, smp.RewardScore)
			}
			gs = append(gs, pg)
		}
	}
	return gs
}

func runVerlPath(t *testing.T, url string, env map[string]string, args ...string) (string, error) {
	t.Helper()
	comps := filepath.Join(t.TempDir(), "completions.json")
	b, _ := json.Marshal(servetestCompletions())
	require.NoError(t, os.WriteFile(comps, b, 0o600))
	all := []string{"--completions", comps}
	var overrides []string
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			all = append(all, a) // the simulator's options come before verl's overrides
		} else {
			overrides = append(overrides, a)
		}
	}
	all = append(all, verlRecipe(t)...)
	all = append(all, "trainer.rollout_data_dir="+filepath.Join(t.TempDir(), "rollouts"), "data.train_batch_size=3",
		"reward.num_workers=2", "actor_rollout_ref.rollout.agent.num_workers=2")
	all = append(all, overrides...)
	return pythonRun(t, url, env, simScript(t, "verl_sim.py", all...))
}

func resumeCases() []resumeCase {
	sync := map[string]string{"LM2LM_SYNC_CALIBRATION": "1", "LM2LM_WAIT_CALIBRATION": "1", "LM2LM_POLL_S": "0.02"}
	return []resumeCase{
		{
			name: "verl",
			run: func(t *testing.T, url string, start, steps, variant int) string {
				out, err := runVerlPath(t, url, sync, fmt.Sprintf("--start-step=%d", start+1), fmt.Sprintf("--policy-shift=%d", variant),
					fmt.Sprintf("trainer.total_training_steps=%d", steps))
				require.NoError(t, err)
				return out
			},
			groups: verlGroups,
		},
		{
			name: "trl",
			run: func(t *testing.T, url string, start, steps, variant int) string {
				code, b := post(t, url+"/v1/states", simToken, map[string]any{"request_id": "trl-states", "n": 4})
				require.Equal(t, http.StatusOK, code, string(b))
				var sr struct {
					States []map[string]any `json:"states"`
				}
				require.NoError(t, json.Unmarshal(b, &sr))
				spec, _ := json.Marshal(map[string]any{"config_py": trlRecipe(t, "GRPOConfig"), "states": sr.States,
					"pool": servetestCompletions(), "world_size": 2, "start_step": start, "pool_shift": variant,
					"config": map[string]any{"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1, "max_steps": steps}})
				dir, err := filepath.Abs("../adapters/python/sim")
				require.NoError(t, err)
				a, _ := json.Marshal([]string{"trl_sim.py", "grpo", string(spec)})
				d, _ := json.Marshal(dir)
				out, err := pythonRun(t, url, nil, fmt.Sprintf("import sys\nsys.path.insert(0, %s)\nimport trl_sim\ntrl_sim.main(%s)\n", d, a))
				require.NoError(t, err)
				return out
			},
			groups: func(t *testing.T, out string) []pathGroup {
				var r trlRun
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &r), out)
				require.Empty(t, r.Errors)
				by := map[string][]trlSample{}
				var names []string
				for _, smp := range r.Samples {
					if by[smp.Group] == nil {
						names = append(names, smp.Group)
					}
					by[smp.Group] = append(by[smp.Group], smp)
				}
				var gs []pathGroup
				for _, n := range names {
					smps := by[n]
					sort.Slice(smps, func(i, j int) bool { return smps[i].Pos < smps[j].Pos })
					pg := pathGroup{state: smps[0].StateID}
					for _, smp := range smps {
						pg.completions = append(pg.completions, smp.Completion)
						pg.rewards = append(pg.rewards, smp.Returned)
					}
					gs = append(gs, pg)
				}
				return gs
			},
		},
		{
			name: "openrlhf",
			run: func(t *testing.T, url string, start, steps, variant int) string {
				code, b := post(t, url+"/v1/dataset", simToken, serve.StatesRequest{RequestID: "sim-ds", N: 3})
				require.Equal(t, http.StatusOK, code, string(b))
				data := filepath.Join(t.TempDir(), "train.jsonl")
				require.NoError(t, os.WriteFile(data, b, 0o600))
				out, err := pythonRun(t, url, sync, simScript(t, "openrlhf_sim.py", openrlhfArgs(data, "--algo.dynamic_filtering_enable",
					"--sim.steps", fmt.Sprint(steps), "--sim.start_step", fmt.Sprint(start), "--sim.seed", fmt.Sprint(1+variant))...))
				require.NoError(t, err)
				return out
			},
			groups: func(t *testing.T, out string) []pathGroup {
				var got openrlhfOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
				var gs []pathGroup
				for _, st := range got.Steps {
					by := map[string][]openrlhfSample{}
					var labels []string
					for _, smp := range append(append([]openrlhfSample{}, st.Kept...), st.Dropped...) {
						require.Empty(t, smp.Error)
						if by[smp.Label] == nil {
							labels = append(labels, smp.Label)
						}
						by[smp.Label] = append(by[smp.Label], smp)
					}
					for _, l := range labels {
						smps := by[l]
						sort.Slice(smps, func(i, j int) bool { return *smps[i].Index < *smps[j].Index })
						pg := pathGroup{state: l}
						for _, smp := range smps {
							pg.completions = append(pg.completions, smp.Completion)
							pg.rewards = append(pg.rewards, smp.Reward)
						}
						gs = append(gs, pg)
					}
				}
				return gs
			},
		},
		{
			name: "slime",
			run: func(t *testing.T, url string, start, steps, variant int) string {
				code, b := post(t, url+"/v1/dataset", simToken, serve.StatesRequest{RequestID: "sim-ds", N: 4})
				require.Equal(t, http.StatusOK, code, string(b))
				data := filepath.Join(t.TempDir(), "train.jsonl")
				require.NoError(t, os.WriteFile(data, b, 0o600))
				out, err := pythonRun(t, url, sync, simScript(t, "slime_sim.py", slimeArgs(data, "--num-rollout", fmt.Sprint(steps),
					"--sim.start_rollout", fmt.Sprint(start), "--sim.seed", fmt.Sprint(1+variant))...))
				require.NoError(t, err)
				return out
			},
			groups: func(t *testing.T, out string) []pathGroup {
				var got slimeOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
				var gs []pathGroup
				for _, r := range got.Rollouts {
					require.Empty(t, r.Error)
					for _, g := range r.Groups {
						pg := pathGroup{state: g.Label}
						for _, smp := range g.Samples {
							pg.completions = append(pg.completions, smp.Response)
							pg.rewards = append(pg.rewards, smp.LM2LM.Reward)
						}
						gs = append(gs, pg)
					}
				}
				return gs
			},
		},
		{
			name: "prime-rl",
			run: func(t *testing.T, url string, start, steps, variant int) string {
				code, b := post(t, url+"/v1/dataset", simToken, serve.StatesRequest{RequestID: "sim-ds", N: 3})
				require.Equal(t, http.StatusOK, code, string(b))
				data := filepath.Join(t.TempDir(), "train.jsonl")
				require.NoError(t, os.WriteFile(data, b, 0o600))
				out, err := pythonRun(t, url, sync, simScript(t, "primerl_sim.py", "--config", primerlConfig(t, data, steps, 3*primerlG, primerlG),
					"--sim.start_step", fmt.Sprint(start), "--sim.seed", fmt.Sprint(1+variant)))
				require.NoError(t, err)
				return out
			},
			groups: func(t *testing.T, out string) []pathGroup {
				var got primerlOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
				var gs []pathGroup
				for _, st := range got.Steps {
					for _, g := range st.Groups {
						pg := pathGroup{state: g.StateID}
						for _, tr := range g.Traces {
							pg.completions = append(pg.completions, tr.Completion)
							pg.rewards = append(pg.rewards, tr.Reward)
						}
						gs = append(gs, pg)
					}
				}
				return gs
			},
		},
	}
}

// TestSimulatorsResume runs each simulator for three steps, then again
// as a run resumed from its checkpoint at the second step, with other
// completions (a resumed run samples anew), on the same service: behind
// the service's step, replaying steps whose groups the service has seen.
// No request may be refused as stale, and every reward of the resumed run
// must be its own completions' (scored again whole under fresh names),
// never an earlier attempt's cached answer.
func TestSimulatorsResume(t *testing.T) {
	for _, c := range resumeCases() {
		t.Run(c.name, func(t *testing.T) {
			s, url := simService(t, servetest.Options{})
			first := c.groups(t, c.run(t, url, 0, 3, 0))
			require.NotEmpty(t, first)
			before := s.Info()
			require.GreaterOrEqual(t, before.Step, 2)
			resumed := c.groups(t, c.run(t, url, 1, 2, 3))
			require.Len(t, resumed, len(first)*2/3, "two of the three steps again")
			// The resumed run scored new groups (none answered from the cache).
			require.Equal(t, before.Scored+len(resumed), s.Info().Scored)
			require.Equal(t, before.Step, s.Info().Step, "the replayed steps are scored at the service's step")
			differ := 0
			for i, g := range resumed {
				if !slices.Equal(g.completions, first[i].completions) {
					differ++
				}
			}
			require.Positive(t, differ, "the resumed run writes other completions")
			rescore(t, url, resumed)
		})
	}
}

// TestVerlStraggler: one session of one prompt finishes past the group
// deadline. Every sample of its group must fail (the on-time ones are
// partial, the late one late), so that no session of it stores a
// trajectory: verl's sync replay buffer then refills the group (with
// sync_refill_failed_groups) or leaves it out of the batch (without), and
// never trains on it.
func TestVerlStraggler(t *testing.T) {
	for _, refill := range []bool{true, false} {
		t.Run(fmt.Sprintf("refill=%v", refill), func(t *testing.T) {
			_, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.GroupDeadline = 500 * time.Millisecond })
			out, err := runVerlPath(t, url, nil, "--straggle=1:1:7:1.5", "trainer.total_training_steps=1",
				fmt.Sprintf("trainer.v1.sampler.sync_refill_failed_groups=%v", refill))
			require.NoError(t, err)
			var res verlSimOut
			require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &res), out)
			var raw struct {
				Steps []struct {
					Groups []struct {
						Stored       int    `json:"stored"`
						ReplayBuffer string `json:"replay_buffer"`
					} `json:"groups"`
				} `json:"steps"`
			}
			require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &raw))
			for gi, g := range res.Steps[0].Groups {
				rb := raw.Steps[0].Groups[gi]
				if gi != 1 {
					require.Equal(t, "finished", g.Status)
					require.Equal(t, 8, rb.Stored)
					continue
				}
				require.Equal(t, "failure", g.Status)
				require.Zero(t, rb.Stored, "a stored trajectory would make the group trainable")
				require.Equal(t, map[bool]string{true: "refilled", false: "empty"}[refill], rb.ReplayBuffer)
				late := 0
				for _, smp := range g.Samples {
					require.Nil(t, smp.RewardScore)
					require.Contains(t, smp.Error, "LM2LMFailure")
					if strings.Contains(smp.Error, "late") {
						late++
					} else {
						require.Contains(t, smp.Error, "partial: scored at the group deadline on 7 of 8")
					}
				}
				require.Equal(t, 1, late)
			}
		})
	}
}

// TestVerlAhead: an asynchronous trainer's rollout reaches the service
// after its step moved on. With -step-lag 1 every sample is scored at its
// own step; without lag every sample fails visibly (stale_step), and the
// replay buffer refills the groups: no reward, no made-up number.
func TestVerlAhead(t *testing.T) {
	for _, lag := range []int{1, 0} {
		t.Run(fmt.Sprintf("lag=%d", lag), func(t *testing.T) {
			s, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.StepLag = lag })
			out, err := runVerlPath(t, url, nil, "--ahead=1", "trainer.total_training_steps=2")
			require.NoError(t, err)
			var res verlSimOut
			require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &res), out)
			require.Len(t, res.Steps, 2)
			for _, st := range res.Steps {
				for _, g := range st.Groups {
					for _, smp := range g.Samples {
						if lag == 1 {
							require.Empty(t, smp.Error)
							require.NotNil(t, smp.RewardScore)
							require.Equal(t, float64(st.Step), smp.Extra["step"], "scored at its own step")
						} else {
							require.Nil(t, smp.RewardScore)
							require.Contains(t, smp.Error, "stale_step")
						}
					}
				}
			}
			require.Equal(t, 3, s.Info().Step)
			if lag == 0 {
				require.Zero(t, s.Info().Scored)
			} else {
				require.Equal(t, 6, s.Info().Scored)
			}
		})
	}
}

// TestTRLStraggler: the second process generates its slice of one step
// past the group deadline. The group split across the two processes is
// partial for the first and late for the second: every one of its
// samples must be None (NaN, advantage 0), in both processes, and every
// other group scored.
func TestTRLStraggler(t *testing.T) {
	_, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.GroupDeadline = 500 * time.Millisecond })
	code, b := post(t, url+"/v1/states", simToken, serve.StatesRequest{N: 4})
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	spec := trlSpec(t, "GRPOConfig", sr, map[string]any{"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1, "max_steps": 2})
	spec["straggle"] = map[string]any{"rank": 1, "step": 1, "seconds": 1.5}
	run := simulate(t, url, "grpo", spec)
	require.Len(t, run.Samples, 2*24)
	dropped := map[string]int{}
	for _, smp := range run.Samples {
		// The split group is positions 8..15: 8..11 on rank 0, 12..15 on rank 1.
		if smp.Step == 1 && smp.Pos >= 8 && smp.Pos < 16 {
			require.Nil(t, smp.Returned, "pos %d", smp.Pos)
			require.True(t, smp.NaN)
			require.Zero(t, smp.TRLAdvantage)
			dropped[smp.Group]++
			continue
		}
		require.NotNil(t, smp.Returned, "step %d pos %d", smp.Step, smp.Pos)
		require.False(t, smp.NaN)
	}
	require.Len(t, dropped, 1)
	for _, k := range dropped {
		require.Equal(t, 8, k)
	}
}

// TestOpenRLHFStraggler: the last sample of one prompt comes past the
// group deadline. Every sample of its group must score -1, so that
// OpenRLHF's dynamic filtering drops the whole group (a late sample alone
// at -1 would leave the group's mean at 0.125 with three real scores of
// 0.5, and the group trained).
func TestOpenRLHFStraggler(t *testing.T) {
	_, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.GroupDeadline = 500 * time.Millisecond })
	data, rows := simDataset(t, url, simToken, 3)
	out := runSim(t, url, "openrlhf_sim.py", nil,
		openrlhfArgs(data, "--algo.dynamic_filtering_enable", "--sim.steps", "1", "--sim.straggle", "1:1.5")...)
	var got openrlhfOut
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	st := got.Steps[0]
	for _, smp := range st.Kept {
		require.NotEqual(t, rows[1].Label, smp.Label, "the straggler's group was kept")
		require.Equal(t, 0.5, *smp.Score)
	}
	late := 0
	for _, smp := range st.Dropped {
		if smp.Label != rows[1].Label {
			continue
		}
		late++
		require.Equal(t, -1.0, *smp.Score)
	}
	require.Equal(t, openrlhfG, late)
	require.Len(t, st.Kept, 2*openrlhfG)
}

// TestOpenRLHFAsync runs the asynchronous trainer: the trainer posts its
// step while the next rollout's samples are in flight, so every group's
// last sample arrives after the advance. Each group must stay one group,
// at the step its first sample read, whole and scored (with -step-lag 1),
// its rewards those of its completions.
func TestOpenRLHFAsync(t *testing.T) {
	s, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.StepLag = 1 })
	data, rows := simDataset(t, url, simToken, 3)
	out := runSim(t, url, "openrlhf_sim.py", nil,
		openrlhfArgs(data, "--algo.dynamic_filtering_enable", "--train.async_enable", "--sim.steps", "3")...)
	var got struct {
		Steps []struct {
			Kept    []map[string]any `json:"kept"`
			Dropped []map[string]any `json:"dropped"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Steps, 3)
	var groups []pathGroup
	for k, st := range got.Steps {
		all := append(append([]map[string]any{}, st.Kept...), st.Dropped...)
		require.Len(t, all, openrlhfG*len(rows))
		steps := map[string]map[float64]bool{}
		by := map[string][]map[string]any{}
		for _, smp := range all {
			require.Empty(t, smp["error"])
			require.Equal(t, false, smp["partial"], "%v", smp)
			require.Equal(t, false, smp["failed"])
			l := smp["label"].(string)
			if steps[l] == nil {
				steps[l] = map[float64]bool{}
			}
			steps[l][smp["step"].(float64)] = true
			by[l] = append(by[l], smp)
		}
		for l, ss := range steps {
			require.Len(t, ss, 1, "rollout %d group %s straddles steps %v", k, l, ss)
		}
		if k == len(got.Steps)-1 {
			for _, r := range rows {
				smps := by[r.Label]
				sort.Slice(smps, func(i, j int) bool { return smps[i]["index"].(float64) < smps[j]["index"].(float64) })
				pg := pathGroup{state: r.Label}
				for _, smp := range smps {
					pg.completions = append(pg.completions, smp["completion"].(string))
					rw := smp["reward"].(float64)
					pg.rewards = append(pg.rewards, &rw)
				}
				groups = append(groups, pg)
			}
		}
	}
	require.Equal(t, 2, s.Info().Step)
	require.Zero(t, s.Info().Failed)
	rescore(t, url, groups)
}

// TestPrimeRLAheadAndRefusals: groups dispatched at step k reach the
// service after the trainer moved on by max_off_policy_steps. With
// -step-lag at least that, each is scored at its dispatch step; with less,
// the orchestrator stops with stale_step rather than train on a number.
// An lm2lm group under another algorithm type, or under GRPO with a length
// penalty, stops it with a message naming the setting.
func TestPrimeRLAheadAndRefusals(t *testing.T) {
	run := func(lag int, args ...string) (string, error, *serve.Service) {
		s, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.StepLag = lag })
		data, _ := simDataset(t, url, simToken, 3)
		out, err := pythonRun(t, url, nil, simScript(t, "primerl_sim.py",
			append([]string{"--config", primerlConfig(t, data, 2, 3*primerlG, primerlG)}, args...)...))
		return out, err, s
	}
	out, err, s := run(2, "--sim.ahead", "2")
	require.NoError(t, err)
	var got primerlOut
	require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
	for _, st := range got.Steps {
		for _, g := range st.Groups {
			for _, tr := range g.Traces {
				require.NotNil(t, tr.Reward)
				require.Zero(t, tr.Metrics["lm2lm_failed"])
			}
		}
	}
	require.Equal(t, 6, s.Info().Scored)
	require.Equal(t, 3, s.Info().Step)

	_, err, s = run(1, "--sim.ahead", "2")
	require.ErrorContains(t, err, "stale_step")
	require.Zero(t, s.Info().Scored)

	_, err, s = run(0, "--sim.algo", "max_rl")
	require.ErrorContains(t, err, "algo.type 'MaxRLAlgorithm' scores groups itself")
	require.Zero(t, s.Info().Scored)
	_, err, _ = run(0, "--sim.length_penalty")
	require.ErrorContains(t, err, "length_penalty")
}

// TestTRLAsyncAhead: AsyncGRPOTrainer's worker reads the step, and the
// trainer's step ends before the group's score request arrives (no step
// lag): the service refuses it as stale, and the reward reads the step
// again and resends, so that every group is scored once, at the trainer's
// new step, with the rewards of its own completions.
func TestTRLAsyncAhead(t *testing.T) {
	const n, G = 4, 8
	s, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) {
		c.Schedule.Steps, c.Schedule.Budgets = []int{100}, []int{3}
	})
	code, b := post(t, url+"/v1/states", simToken, serve.StatesRequest{N: n})
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	spec := trlSpec(t, "AsyncGRPOConfig", sr, map[string]any{"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_steps": 2})
	spec["ahead"] = true
	run := simulate(t, url, "async", spec)
	require.NotEmpty(t, run.Samples)
	by := map[string][]trlSample{}
	var names []string
	for _, smp := range run.Samples {
		require.NotNil(t, smp.Returned)
		require.False(t, smp.NaN)
		read := smp.ReadStep
		require.NotNil(t, read, "the child read the step")
		require.Equal(t, *read+1, *smp.ServiceStep, "scored at the step after the one read")
		if by[smp.Group] == nil {
			names = append(names, smp.Group)
		}
		by[smp.Group] = append(by[smp.Group], smp)
	}
	var groups []pathGroup
	for _, name := range names {
		smps := by[name]
		sort.Slice(smps, func(i, j int) bool { return *smps[i].Index < *smps[j].Index })
		pg := pathGroup{state: smps[0].StateID}
		for _, smp := range smps {
			pg.completions = append(pg.completions, smp.Completion)
			pg.rewards = append(pg.rewards, smp.Returned)
		}
		groups = append(groups, pg)
	}
	require.Equal(t, len(groups), s.Info().Scored, "each group scored once")
	rescore(t, url, groups)
}

// TestSlimeAhead: a rollout's groups reach the service after its step
// moved past the rollout id. Within -step-lag each group is scored at its
// rollout id; beyond it the rollout ends with stale_step (slime's rollout
// stops at an exception in the reward): no reward, no made-up number.
func TestSlimeAhead(t *testing.T) {
	for _, lag := range []int{2, 1} {
		t.Run(fmt.Sprintf("lag=%d", lag), func(t *testing.T) {
			s, url := simServiceWith(t, servetest.Options{}, func(c *serve.Config) { c.StepLag = lag })
			data, _ := simDataset(t, url, simToken, 4)
			out, err := pythonRun(t, url, nil, simScript(t, "slime_sim.py", slimeArgs(data, "--num-rollout", "2", "--sim.ahead", "2")...))
			require.NoError(t, err)
			var got slimeOut
			require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
			if lag == 1 {
				require.Len(t, got.Rollouts, 1)
				require.Contains(t, got.Rollouts[0].Error, "stale_step")
				require.Zero(t, s.Info().Scored)
				return
			}
			require.Len(t, got.Rollouts, 2)
			for _, r := range got.Rollouts {
				require.Empty(t, r.Error)
				for _, g := range r.Groups {
					for _, smp := range g.Samples {
						require.NotNil(t, smp.LM2LM.Reward)
						require.Equal(t, r.RolloutID, smp.LM2LM.Step, "scored at its rollout id")
					}
				}
			}
			require.Equal(t, 6, s.Info().Scored)
		})
	}
}
