package serve_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/bearer"
	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// trlSample is one sample of the TRL simulator's output.
type trlSample struct {
	Step           int      `json:"step"`
	Rank           int      `json:"rank"`
	Pos            int      `json:"pos"`
	StateID        string   `json:"state_id"`
	Completion     string   `json:"completion"`
	Returned       *float64 `json:"returned"`
	NaN            bool     `json:"nan"`
	TRLAdvantage   float64  `json:"trl_advantage"`
	Group          string   `json:"group"`
	LM2LMAdvantage *float64 `json:"lm2lm_advantage"`
	Failure        string   `json:"failure"`
	GroupID        int      `json:"group_id"`
	Index          *int     `json:"index"`
	ServiceStep    *int     `json:"service_step"`
	ReadStep       *int     `json:"read_step"`
}

type trlRun struct {
	Trainer   string         `json:"trainer"`
	Config    map[string]any `json:"config"`
	WorldSize int            `json:"world_size"`
	Samples   []trlSample    `json:"samples"`
	Metrics   []struct {
		Step         int                `json:"step"`
		Rank         int                `json:"rank"`
		Metrics      map[string]float64 `json:"metrics"`
		ExtraColumns []string           `json:"extra_columns"`
	} `json:"metrics"`
	Advanced     []int                     `json:"advanced"`
	Calibrations []serve.CalibrationStatus `json:"calibrations"`
	Errors       []string                  `json:"errors"`
	ScoreSeconds []float64                 `json:"score_seconds"`
}

// trlRecipe returns the keyword arguments (name -> Python literal) of the
// call (GRPOConfig or AsyncGRPOConfig) in docs/frameworks/trl.md's recipe.
func trlRecipe(t *testing.T, call string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/frameworks/trl.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)args = ` + call + `\((.*?)\n\)`).FindSubmatch(b)
	require.NotNil(t, m, "the recipe has no args = %s(...)", call)
	out := map[string]string{}
	for _, kv := range regexp.MustCompile(`(?m)^\s+(\w+)=(.+?),\s*$`).FindAllSubmatch(m[1], -1) {
		out[string(kv[1])] = string(kv[2])
	}
	require.NotEmpty(t, out)
	return out
}

// runTRLSim runs adapters/python/sim/trl_sim.py's main with args.
func runTRLSim(t *testing.T, url string, args ...string) string {
	t.Helper()
	dir, err := filepath.Abs("../adapters/python/sim")
	require.NoError(t, err)
	a, _ := json.Marshal(append([]string{"trl_sim.py"}, args...))
	d, _ := json.Marshal(dir)
	return runPython(t, url, simToken, fmt.Sprintf("import sys\nsys.path.insert(0, %s)\nimport trl_sim\ntrl_sim.main(%s)\n", d, a))
}

// simulate runs the simulator for trainer against url with spec.
func simulate(t *testing.T, url, trainer string, spec map[string]any) trlRun {
	t.Helper()
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	out := runTRLSim(t, url, trainer, string(b))
	var r trlRun
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.Empty(t, r.Errors)
	return r
}

// startTRLService starts the service over the fakes with a token on a
// loopback port and issues n training states.
func startTRLService(t *testing.T, opt servetest.Options, n int) (*serve.Service, string, serve.StatesResponse) {
	t.Helper()
	s, url := simService(t, opt)
	code, b := post(t, url+"/v1/states", simToken, serve.StatesRequest{N: n})
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	return s, url, sr
}

func trlSpec(t *testing.T, call string, sr serve.StatesResponse, over map[string]any) map[string]any {
	return map[string]any{"config_py": trlRecipe(t, call), "config": over, "states": sr.States,
		"pool": servetest.Completions(0, 8), "world_size": 2}
}

// noneRunning waits (bounded) until no calibration of s is running, as
// the simulator's StepCallback(wait=True) does.
func noneRunning(t *testing.T, s *serve.Service) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if !slices.ContainsFunc(s.Calibrations().Calibrations, func(c serve.CalibrationStatus) bool { return c.State == serve.CalRunning }) {
			return
		}
	}
	t.Fatalf("a calibration still runs: %+v", s.Calibrations())
}

// replayWhole scores the run's groups whole ("groups") on a twin service
// (same config and seed, so the same states), at the same steps, advancing
// as the trainer's callback did, and returns each sample's reward by
// group and index, and the twin's calibrations.
func replayWhole(t *testing.T, run trlRun, n, G int) (map[string][]float64, []serve.CalibrationStatus) {
	t.Helper()
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	states(t, srv.URL, n, "")
	type group struct {
		step  int
		state string
		texts []string
	}
	groups := map[string]*group{}
	for _, smp := range run.Samples {
		g := groups[smp.Group]
		if g == nil {
			g = &group{step: smp.Step, state: smp.StateID, texts: make([]string, G)}
			groups[smp.Group] = g
		}
		require.Equal(t, smp.Step, g.step)
		require.Equal(t, smp.StateID, g.state)
		g.texts[trlIndex(smp, G)] = smp.Completion
	}
	out := map[string][]float64{}
	for _, step := range run.Advanced {
		code, b := post(t, srv.URL+"/v1/advance", "", serve.AdvanceRequest{Step: step})
		require.Equal(t, http.StatusOK, code, string(b))
		noneRunning(t, s)
		var names []string
		for name, g := range groups {
			if g.step == step {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		q := serve.ScoreRequest{Step: ip(step)}
		for _, name := range names {
			q.Groups = append(q.Groups, serve.GroupCompletions{StateID: groups[name].state, Group: name, Completions: groups[name].texts})
		}
		code, b = post(t, srv.URL+"/v1/score", "", q)
		require.Equal(t, http.StatusOK, code, string(b))
		var sr serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &sr))
		for i, g := range sr.Groups {
			for _, smp := range g.Samples {
				require.NotNil(t, smp.Reward)
				out[names[i]] = append(out[names[i]], *smp.Reward)
			}
		}
	}
	return out, s.Calibrations().Calibrations
}

func trlIndex(smp trlSample, G int) int {
	if smp.Index != nil {
		return *smp.Index
	}
	return smp.Pos % G
}

// checkCalibrations: the points fall on the trainer's steps 2 and 4
// (servetest.Config's schedule), as the twin's do.
func checkCalibrations(t *testing.T, url string, twin []serve.CalibrationStatus) {
	t.Helper()
	var cr serve.AdvanceResponse
	code, body := bearer.Call(t, http.MethodGet, url+"/v1/calibrations", simToken, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &cr))
	require.Len(t, cr.Calibrations, 2)
	require.Equal(t, 2, cr.Calibrations[0].Step)
	require.Equal(t, 4, cr.Calibrations[1].Step)
	require.Equal(t, serve.CalApplied, cr.Calibrations[0].State)
	require.Equal(t, 3, *cr.Calibrations[0].EffectiveStep)
	strip := func(cs []serve.CalibrationStatus) []serve.CalibrationStatus {
		out := slices.Clone(cs)
		for i := range out {
			out[i].Result = nil
		}
		return out
	}
	require.Equal(t, strip(twin), strip(cr.Calibrations))
	require.Equal(t, twin[0].Result.Records, cr.Calibrations[0].Result.Records)
}

func TestTRLRecipeConfig(t *testing.T) {
	grpo := trlRecipe(t, "GRPOConfig")
	for k, v := range map[string]string{"loss_type": `"dapo"`, "epsilon": "0.2", "epsilon_high": "0.28", "num_generations": "8", "scale_rewards": `"none"`} {
		require.Equal(t, v, grpo[k], "GRPOConfig's %s in the recipe", k)
	}
	async := trlRecipe(t, "AsyncGRPOConfig")
	for k, v := range map[string]string{"epsilon": "0.2", "epsilon_high": "0.28", "num_generations": "8"} {
		require.Equal(t, v, async[k], "AsyncGRPOConfig's %s in the recipe", k)
	}
	for kind, kw := range map[string]map[string]string{"grpo": grpo, "async": async} {
		b, _ := json.Marshal(kw)
		out := runTRLSim(t, "http://127.0.0.1:9", "check-config", kind, string(b))
		var got struct {
			Config map[string]any `json:"config"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Len(t, got.Config, len(kw), out)
	}
	// The simulator refuses a name the config does not have.
	sim, err := filepath.Abs("../adapters/python/sim/trl_sim.py")
	require.NoError(t, err)
	out, err := exec.Command(python, sim, "check-config", "grpo", `{"scale_reward": "\"none\""}`).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "GRPOConfig has no field scale_reward")
}

func TestTRLGRPOTrainer(t *testing.T) {
	const n, G = 4, 8
	_, url, sr := startTRLService(t, servetest.Options{}, n)
	// 2 processes × 12 samples: 3 prompts of 8 per step, the second split 4/4.
	run := simulate(t, url, "grpo", trlSpec(t, "GRPOConfig", sr, map[string]any{"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1, "max_steps": 6}))
	require.Equal(t, "none", run.Config["scale_rewards"])
	require.Len(t, run.Samples, 6*24)
	byGroup := map[string][]trlSample{}
	for _, smp := range run.Samples {
		require.NotNil(t, smp.Returned, "%+v", smp)
		require.False(t, smp.NaN)
		// scale_rewards="none": TRL's advantage is the service's.
		require.InDelta(t, *smp.LM2LMAdvantage, smp.TRLAdvantage, 1e-9)
		byGroup[smp.Group] = append(byGroup[smp.Group], smp)
	}
	require.Len(t, byGroup, 6*3)
	split := 0
	for name, smps := range byGroup {
		require.Len(t, smps, G, name)
		ranks := map[int]bool{}
		for _, smp := range smps {
			ranks[smp.Rank] = true
		}
		if len(ranks) == 2 {
			split++
		}
	}
	require.Equal(t, 6, split, "one group per step split across the 2 processes")
	for _, m := range run.Metrics {
		require.Equal(t, []string{"lm2lm_advantage", "lm2lm_failure", "lm2lm_gain", "lm2lm_group", "lm2lm_mechanism", "lm2lm_valid"}, m.ExtraColumns)
		require.Zero(t, m.Metrics["lm2lm/failed"])
		require.Contains(t, m.Metrics, "lm2lm/kept")
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6}, run.Advanced)

	twin, cals := replayWhole(t, run, n, G)
	for _, smp := range run.Samples {
		require.Equal(t, twin[smp.Group][smp.Pos%G], *smp.Returned, "%s index %d (rank %d)", smp.Group, smp.Pos%G, smp.Rank)
	}
	checkCalibrations(t, url, cals)
}

func TestTRLAsyncGRPOTrainer(t *testing.T) {
	const n, G = 4, 8
	_, url, sr := startTRLService(t, servetest.Options{}, n)
	// 2 processes × 8 samples per step: 2 whole groups per step.
	run := simulate(t, url, "async", trlSpec(t, "AsyncGRPOConfig", sr, map[string]any{"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_steps": 6}))
	require.Len(t, run.Samples, 6*16)
	byGroup := map[string]int{}
	for _, smp := range run.Samples {
		require.NotNil(t, smp.Returned)
		require.False(t, smp.NaN)
		// No trainer_state: the step came from the service, as the callback set it.
		require.Equal(t, smp.Step, *smp.ServiceStep)
		byGroup[smp.Group]++
	}
	require.Len(t, byGroup, 6*2)
	for name, k := range byGroup {
		require.Equal(t, G, k, name)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6}, run.Advanced)
	// AsyncRolloutWorker._score_loop scores one group at a time: its
	// throughput is one group per round trip (the first call also reads
	// the service's health and step).
	require.Len(t, run.ScoreSeconds, 12)
	rt := slices.Clone(run.ScoreSeconds[1:])
	slices.Sort(rt)
	t.Logf("async scoring: one whole group of %d per call, round trip median %.1f ms (max %.1f ms): %.0f groups/s",
		G, 1000*rt[len(rt)/2], 1000*rt[len(rt)-1], 1/rt[len(rt)/2])
	require.Positive(t, rt[0])

	twin, cals := replayWhole(t, run, n, G)
	for _, smp := range run.Samples {
		require.Equal(t, twin[smp.Group][*smp.Index], *smp.Returned, "%s index %d", smp.Group, *smp.Index)
	}
	checkCalibrations(t, url, cals)
}

func TestTRLWorldModelFailureIsNaN(t *testing.T) {
	s, url, sr := startTRLService(t, servetest.Options{PredictFail: errors.New("upstream 502")}, 4)
	over := map[string]any{"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1, "max_steps": 1}
	run := simulate(t, url, "grpo", trlSpec(t, "GRPOConfig", sr, over))
	require.Len(t, run.Samples, 24)
	for _, smp := range run.Samples {
		require.Nil(t, smp.Returned, "a failed group is no number")
		require.True(t, smp.NaN, "TRL sees NaN")
		require.Zero(t, smp.TRLAdvantage)
		require.Contains(t, smp.Failure, "upstream 502")
	}
	for _, m := range run.Metrics {
		require.Equal(t, 1.0, m.Metrics["lm2lm/failed"])
	}
	in := s.Info()
	require.Zero(t, in.Scored)
	require.Equal(t, 3, in.Failed)

	s, url, sr = startTRLService(t, servetest.Options{PredictFail: errors.New("upstream 502")}, 4)
	arun := simulate(t, url, "async", trlSpec(t, "AsyncGRPOConfig", sr, map[string]any{"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_steps": 1}))
	require.Len(t, arun.Samples, 16)
	for _, smp := range arun.Samples {
		require.Nil(t, smp.Returned)
		require.True(t, smp.NaN)
		require.Zero(t, smp.TRLAdvantage)
		require.True(t, strings.Contains(smp.Failure, "upstream 502"), smp.Failure)
	}
	in = s.Info()
	require.Zero(t, in.Scored)
	require.Equal(t, 2, in.Failed)
}
