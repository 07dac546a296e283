package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment/yamlenv"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/serve"
)

// page returns the worked example of docs/own-environment.md: its set-up
// commands, its config file and its verbs.
func workedExample(t *testing.T) (setup, config string, verbs [][]string) {
	b, err := os.ReadFile("../../docs/own-environment.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(b), "## 4. A worked example")
	require.True(t, ok, "no worked example on the page")
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []string
	for rest := sec; ; {
		_, after, ok := strings.Cut(rest, "```")
		if !ok {
			break
		}
		body, tail, ok := strings.Cut(after, "```")
		require.True(t, ok)
		blocks = append(blocks, body)
		rest = tail
	}
	require.Len(t, blocks, 3, "set-up commands, env.yaml, verbs")
	setup = strings.TrimPrefix(blocks[0], "sh\n")
	config = strings.TrimPrefix(blocks[1], "yaml\n")
	require.True(t, strings.HasPrefix(config, "# env.yaml"))
	for _, l := range strings.Split(strings.TrimPrefix(blocks[2], "sh\n"), "\n") {
		cmd, _, _ := strings.Cut(l, "#")
		if f := strings.Fields(cmd); len(f) > 0 {
			require.Equal(t, []string{"lm2lm", "-config", "env.yaml"}, f[:3], "%q", l)
			verbs = append(verbs, f[3:])
		}
	}
	return setup, config, verbs
}

func requirePyTorchAndSlurm(t *testing.T) {
	t.Helper()
	want := os.Getenv("CI") != ""
	skip := func(format string, args ...any) {
		t.Helper()
		if want {
			t.Fatalf(format+" (CI is set: .ci/setup.sh installs it)", args...)
		}
		t.Skipf(format, args...)
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch").CombinedOutput(); err != nil {
		skip("Debian's python3 cannot import torch: %v: %s", err, bytes.TrimSpace(out))
	}
	if _, err := exec.LookPath("sbatch"); err != nil {
		skip("no Slurm cluster (sbatch not on PATH): start one with .ci/setup.sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%T").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("sbatch is on PATH but sinfo does not answer (%v): %s", err, out)
	}
}

// fakeWorld answers the world model's prompts: a warm-up predicts a gain,
// everything else a small loss, so that groups are not flat.
func fakeWorld(r oaitest.Request) oaitest.Reply {
	var all strings.Builder
	for _, m := range r.Messages {
		all.WriteString(m.Content)
	}
	gain := -0.02
	if strings.Contains(all.String(), `"warmup"`) {
		gain = 0.05
	}
	return oaitest.Text(fmt.Sprintf(`{"gain": %g, "q10": %g, "q90": %g, "valid": true, "reason": "scripted"}`, gain, gain-0.05, gain+0.05))
}

// serverSection returns the env.yaml fragment of the page's section 5:
// the world model and the proposer on OpenAI-compatible servers.
func serverSection(t *testing.T) string {
	b, err := os.ReadFile("../../docs/own-environment.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(b), "## 5. The same example on your own LLM servers")
	require.True(t, ok, "no section 5 on the page")
	_, after, ok := strings.Cut(sec, "```yaml\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok)
	return block
}

// serverConfig returns the worked example's config with section 5's
// servers at worldURL and propURL in place of the embedded world model and
// policy, its reports under out-servers and its store the example's.
func serverConfig(t *testing.T, config, worldURL, propURL string) string {
	servers := strings.Replace(serverSection(t), "http://127.0.0.1:8000/v1", worldURL, 1)
	servers = strings.Replace(servers, "http://127.0.0.1:8001/v1", propURL, 1)
	c := strings.Replace(config, "world_model: {kind: embedded}\n", "", 1)
	c = strings.Replace(c, "evaluate: {k: 2, states_per_task: 1}\n", servers, 1)
	return strings.Replace(c, "version: 1\n", "version: 1\nout: out-servers\nstore: lm2lm-out/records.jsonl\n", 1)
}

// TestWorkedExampleServerConfig: the worked example's config with section
// 5's servers names them both (the pieces the long test swaps are on the
// page).
func TestWorkedExampleServerConfig(t *testing.T) {
	_, config, _ := workedExample(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "env.yaml")
	require.NoError(t, os.WriteFile(p, []byte(serverConfig(t, config, "http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")), 0o644))
	c, err := envconfig.Load(p)
	require.NoError(t, err)
	require.Equal(t, envconfig.OpenAI, c.WorldModel.Kind)
	require.Equal(t, "http://127.0.0.1:9/v1", c.WorldModel.OpenAI.BaseURL)
	require.NotNil(t, c.Evaluate.Proposer)
	require.Equal(t, "my-proposer", c.Evaluate.Proposer.Model)
	require.Equal(t, 2, c.Evaluate.K)
}

// TestWorkedExample runs the page's worked example as a newcomer would: the
// set-up commands in an empty folder, its env.yaml (the embedded world
// model and policy: no LLM server), every verb, real PyTorch runs under the
// one-node Slurm cluster; then once more with section 5's world model and
// proposer on the repository's test server, over the same store.
func TestWorkedExample(t *testing.T) {
	if testing.Short() {
		t.Skip("real PyTorch runs under Slurm: not with -short")
	}
	requirePyTorchAndSlurm(t)
	setup, config, verbs := workedExample(t)
	require.Equal(t, [][]string{{"print-config"}, {"plan"}, {"reference"}, {"m0"}, {"serve"}, {"evaluate"}, {"report"}}, verbs)

	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	base := t.TempDir()
	sh := exec.Command("bash", "-euo", "pipefail", "-c", setup)
	sh.Dir, sh.Env = base, append(os.Environ(), "LM2LM="+root)
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir := filepath.Join(base, "my-env")
	for _, f := range []string{"train.py", "lm2lm_env.py", "corpus.txt"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	cfgPath := filepath.Join(dir, "env.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(config), 0o644))

	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	lm2lm := func(args ...string) string {
		t.Helper()
		stdout.Reset()
		stderr.Reset()
		err := run(ctx, append([]string{"-config", cfgPath, "-progress", "lines"}, args...), noEnv, &stdout, &stderr)
		require.NoError(t, err, "lm2lm %v:\n%s\n%s", args, stdout.String(), stderr.String())
		return stdout.String()
	}
	require.Contains(t, lm2lm("print-config"), "partition: debug")
	// The plan, before anything is paid, says what the verbs then pay:
	// the page's numbers, each checked against the verb's own count.
	plan := lm2lm("plan")
	require.Regexp(t, `\nreference +reference, m0, serve, evaluate +6 +0 +0 +6 +≤ 1 +≤ 2\.5 +at most training\.timeout per run\n`, plan)
	_, by := planOf(t, cfgPath)
	require.Equal(t, [4]int{6, 4, 1, 1}, [4]int{by["reference"].ToPay, by["M_0"].ToPay, by["calibration"].AtMost, by["evaluation"].ToPay})
	require.Equal(t, 1, by["evaluation"].Reused, "the embedded policy draws the same change twice")
	require.Contains(t, lm2lm("reference"), "reference: 6 runs paid now, 0 reused")
	// Measured now: the estimate of M_0 is its runs at their tasks'
	// measured durations.
	_, by = planOf(t, cfgPath)
	require.Equal(t, [2]int{0, 4}, [2]int{by["reference"].ToPay, by["M_0"].ToPay})
	require.Equal(t, yamlenv.Measured, by["M_0"].Estimate.Basis)
	require.Positive(t, by["M_0"].Estimate.DeviceHours)
	require.Contains(t, lm2lm("m0"), "M_0: 4 records (0 infeasible, 0 failed): 4 runs paid now, 0 reused")
	url, stop := serveInBackground(t, cfgPath)
	score(t, url, 0, 4)
	post(t, url, "/v1/advance", `{"request_id": "a1", "step": 1}`)
	score(t, url, 1, 4)
	// The calibration at step 1 (budget 1) runs in the background under
	// Slurm; it is applied at the next step.
	waitCalibration(t, url)
	post(t, url, "/v1/advance", `{"request_id": "a2", "step": 2}`)
	stop()
	ev := lm2lm("evaluate")
	require.Contains(t, ev, "evaluate embedded-policy: 1 held-out tasks × 1 states × 2 proposals")
	require.Contains(t, ev, "evaluate: 1 runs paid now, 1 reused")
	rep := lm2lm("report")
	for _, want := range []string{"reference    6", "M_0          4", "calibration  1", "evaluation   "} {
		require.Contains(t, rep, want, "%s", rep)
	}
	for _, f := range []string{"report.md", "report.json", "report-costs.png", "report-evaluations.png", "reference.json", "m0.json", "evaluate.json"} {
		require.FileExists(t, filepath.Join(dir, "lm2lm-out", f))
	}
	// Every verb again pays nothing.
	require.Contains(t, lm2lm("m0"), "M_0: 4 records (0 infeasible, 0 failed): 0 runs paid now, 4 reused")
	require.Contains(t, lm2lm("evaluate"), "evaluate: 0 runs paid now, ")
	pl, _ := planOf(t, cfgPath)
	require.Equal(t, 1, pl.ToPay, "only a calibration run of a later serve is left to pay")

	// Once more with section 5's servers, over the same store: nothing is
	// paid again before the service scores.
	world := oaitest.New(t, fakeWorld)
	world.SetModels("my-world-model")
	prop := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		return oaitest.Text(`{"mechanism": "warmup", "params": {"frac": "0.25"}}`, `{"mechanism": "lr-scale", "params": {"factor": "2"}}`)
	})
	prop.SetModels("my-proposer")
	cfgPath = filepath.Join(dir, "env-servers.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(serverConfig(t, config, world.URL(), prop.URL())), 0o644))
	require.Contains(t, lm2lm("m0"), "M_0: 4 records (0 infeasible, 0 failed): 0 runs paid now, 4 reused")
	url, stop = serveInBackground(t, cfgPath)
	score(t, url, 0, 4)
	stop()
	require.Contains(t, lm2lm("evaluate"), "evaluate my-proposer: 1 held-out tasks × 1 states × 2 proposals")
}

// serveInBackground runs the serve verb on a free loopback port and
// returns its URL and a stop function that waits for it to return.
func serveInBackground(t *testing.T, cfgPath string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		err := run(ctx, []string{"-config", cfgPath, "-progress", "lines", "serve", "-addr", "127.0.0.1:0"}, noEnv, pw, &stderr)
		pw.CloseWithError(fmt.Errorf("serve returned: %v", err))
		done <- err
	}()
	re := regexp.MustCompile(`serving \S+ on (http://\S+) `)
	sc := bufio.NewScanner(pr)
	var url string
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	require.NotEmpty(t, url, "no serving line: %v", sc.Err())
	go io.Copy(io.Discard, pr)
	return url, func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("serve did not stop")
		}
	}
}

func post(t *testing.T, url, path, body string) []byte {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", path, body, b)
	return b
}

// score asks for one training state at step and scores one whole group of
// g proposals on it: every sample gets a reward.
func score(t *testing.T, url string, step, g int) {
	t.Helper()
	var st serve.StatesResponse
	require.NoError(t, json.Unmarshal(post(t, url, "/v1/states", fmt.Sprintf(`{"request_id": "s%d", "n": 1}`, step)), &st))
	require.Len(t, st.States, 1)
	cs := []string{`{"mechanism": "warmup", "params": {"frac": "0.25"}}`, `{"mechanism": "lr-scale", "params": {"factor": "4"}}`,
		`{"mechanism": "width", "params": {"factor": "2"}}`, `{"mechanism": "schedule", "params": {"kind": "constant"}}`}
	comp, _ := json.Marshal(cs[:g])
	var sr serve.ScoreResponse
	require.NoError(t, json.Unmarshal(post(t, url, "/v1/score", fmt.Sprintf(`{"request_id": "g%d", "step": %d, "groups": [{"state_id": %q, "completions": %s}]}`,
		step, step, st.States[0].StateID, comp)), &sr))
	require.Len(t, sr.Groups, 1)
	require.Len(t, sr.Groups[0].Samples, g)
	for _, s := range sr.Groups[0].Samples {
		require.NotNil(t, s.Reward, "%+v", s)
		require.True(t, s.Valid, "%+v", s)
	}
}

// waitCalibration waits until the service's first calibration point has
// run (ready or applied) and checks it paid one run.
func waitCalibration(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := http.Get(url + "/v1/calibrations")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var cs struct {
			Calibrations []serve.CalibrationStatus `json:"calibrations"`
		}
		require.NoError(t, json.Unmarshal(b, &cs), "%s", b)
		if len(cs.Calibrations) > 0 {
			c := cs.Calibrations[0]
			require.NotEqual(t, "failed", c.State, "%s", b)
			if c.State == "ready" || c.State == "applied" {
				require.Equal(t, 1, c.Runs, "%s", b)
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "no calibration after 5 minutes: %s", b)
		time.Sleep(500 * time.Millisecond)
	}
}
