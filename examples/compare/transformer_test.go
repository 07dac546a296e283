package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lm2lm/lm2lm/internal/pytest"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
	"github.com/stretchr/testify/require"
)

func TestParseListening(t *testing.T) {
	for _, c := range []struct {
		line, url string
	}{
		{"listening on http://127.0.0.1:8080\n", "http://127.0.0.1:8080"},
		{"listening on http://127.0.0.1:1", "http://127.0.0.1:1"},
		{"listening on http://127.0.0.1:65535\r\n", "http://127.0.0.1:65535"},
		{"listening on http://127.0.0.1:0", ""},
		{"listening on http://127.0.0.1:65536", ""},
		{"listening on http://0.0.0.0:8080", ""},
		{"listening on http://127.0.0.1:80/x", ""},
		{"listening on http://example.com:80", ""},
		{"Traceback (most recent call last):", ""},
		{"", ""},
		{" listening on http://127.0.0.1:8080", ""},
	} {
		url, err := parseListening(c.line)
		if c.url == "" {
			require.ErrorIs(t, err, errTransformer, "%q", c.line)
			continue
		}
		require.NoError(t, err, "%q", c.line)
		require.Equal(t, c.url, url)
	}
}

// FuzzParseListening: whatever the server prints, an accepted address is
// a loopback URL with a port in range.
func FuzzParseListening(f *testing.F) {
	for _, s := range []string{"listening on http://127.0.0.1:8080\n", "listening on http://127.0.0.1:99999", "listening on http://[::1]:80", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		url, err := parseListening(line)
		if err != nil {
			require.Empty(t, url)
			return
		}
		require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)
		port, err := strconv.Atoi(url[len("http://127.0.0.1:"):])
		require.NoError(t, err, url)
		require.True(t, port >= 1 && port <= 65535, url)
	})
}

func TestTransformerFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-methods", "base,transformer"}, "with {seed} in it"},
		{[]string{"-methods", "transformer-warmup", "-transformer", "out/run"}, "with {seed} in it"},
		{[]string{"-methods", "base", "-transformer", "out/run-{seed}"}, "no method of -methods evaluates it"},
		{[]string{"-methods", "transformer", "-transformer", "out/run-{seed}", "-transformer-temperature", "3"}, "-transformer-temperature 3"},
	} {
		_, err := parseFlags(c.args, &bytes.Buffer{})
		require.ErrorIs(t, err, errUsage, "%q", c.args)
		require.ErrorContains(t, err, c.want, "%q", c.args)
	}
	o, err := parseFlags([]string{"-methods", "transformer", "-transformer", "out/run-{seed}", "-transformer-temperature", "0.5"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "out/run-7", transformerDir(o.transformer, 7))
	require.Contains(t, runDir(o), "-tt0.5", "another temperature is a run directory of its own")
	require.Contains(t, command(o), " -transformer out/run-{seed} -transformer-temperature 0.5")
	require.NotContains(t, defaultMethods(), "transformer")
	o, err = parseFlags([]string{"-methods", "transformer", "-transformer", "out/run-{seed}"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, defaultTransformerTemp, o.transformerTemp)
	require.NotContains(t, runDir(o), "-tt", "the default temperature names no run directory")
}

// writeTransformerRun writes what examples/llm-rl leaves in a run
// directory for seed 1 against the tiny suite: result.json and two
// policies of train.py (after 120 steps of its supervised warm-up on the
// lab's prompts as the warm-up's, after 300 more as the final one).
func writeTransformerRun(t *testing.T, dir string, specs []lab.TaskSpec) {
	t.Helper()
	var pool []map[string]any
	for _, s := range specs {
		task := records.Task{ID: s.ID, Family: s.Family, Split: s.Split, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.03,
			Budget: 1000, Description: "context 4, embedding 32, adam lr 0.003 (warm-up 0), batch 32"}
		msgs, err := openai.Messages(records.State{Task: task}, lab.Catalogue(), true, 0)
		require.NoError(t, err)
		pool = append(pool, map[string]any{"prompt": msgs})
	}
	b, err := json.Marshal(pool)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "policy"), 0o755))
	poolPath := filepath.Join(dir, "pool.json")
	require.NoError(t, os.WriteFile(poolPath, b, 0o600))
	script, err := filepath.Abs(filepath.Join("..", "llm-rl"))
	require.NoError(t, err)
	code := `import json, random, sys
sys.argv = ["x"]
sys.path.insert(0, sys.stdin.readline().strip())
import train, torch
torch.manual_seed(1)
train.PROMPT = "full"
pool = json.load(open(sys.stdin.readline().strip()))
out = sys.stdin.readline().strip()
cat = train.catalogue_of(pool[0])
pol = train.Policy(torch, train.Tokenizer(cat, train.task_words(pool)), "cpu", 1)
train.warmup(pol, cat, pool, 120, 16, random.Random(1), lambda m: None)
train.save_policy(pol, out + "/warmup.pt", "warmup", 1)
train.warmup(pol, cat, pool, 300, 16, random.Random(2), lambda m: None)
train.save_policy(pol, out + "/final.pt", "final", 1)
`
	cmd := exec.Command(pytest.Python, "-c", code)
	cmd.Stdin = strings.NewReader(script + "\n" + poolPath + "\n" + filepath.Join(dir, "policy") + "\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	res := `{"profile": "method", "seed": 1, "split": "v1", "checkpoints": ["policy/warmup.pt", "policy/final.pt"],
 "steps": [{"step": 0, "mean_reward": -0.5, "mean_gain": 0.25, "entropy": 1.1, "loss": 0.01},
           {"step": 1, "mean_reward": 0.5, "mean_gain": 0.75, "entropy": 0.9, "loss": -0.02}],
 "calibrations": [{"result": {"point": 0, "step": 1, "budget": 6, "runs": 6, "state": "applied",
                              "result": {"executed": 6, "infeasible": 1, "mean_real_gain_sigmas": 0.4, "records": []}},
                   "monitors": {"api": "lm2lm-serve/v1", "calibrated": true, "point": 0, "delta_m": -0.3, "gap": 0.3,
                                "advantage_cosine": 0.2, "pairwise_accuracy": 0.6, "mechanism_share": []}}],
 "service": {"api": "lm2lm-serve/v1", "real_runs": 5, "reused_runs": 1}, "wall_seconds": 12}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "result.json"), []byte(res), 0o600))
}

// TestTransformerEndToEnd evaluates a transformer run's two policies
// beside Base on the real lab (tiny profile), through train.py --serve
// and proposer/openai: the row pairs with Base's, what the run paid is
// its budget, a second invocation reads every result back, and a changed
// checkpoint is refused.
func TestTransformerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("warms up a transformer and trains tiny models; runs without -short")
	}
	pytest.RequireTorch(t, "the transformer methods")
	specs := tinyTasks()
	runs := t.TempDir()
	writeTransformerRun(t, filepath.Join(runs, "run-1"), specs)
	o := options{methods: []string{"base", "transformer-warmup", "transformer"}, seeds: 1, firstSeed: 1, profile: "tiny", suite: "v1",
		out: t.TempDir(), progress: "lines", parallel: 2, resamples: 200, specs: specs, evalStates: 4,
		transformer: filepath.Join(runs, "run-{seed}"), transformerScript: filepath.Join("..", "llm-rl", "train.py"), transformerTemp: 1}
	var first bytes.Buffer
	require.NoError(t, run(context.Background(), &first, o))
	t.Log(first.String())
	dir := runDir(o)
	final, ok, err := readResult(dir, job{"transformer", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	warm, ok, err := readResult(dir, job{"transformer-warmup", 1}, o)
	require.NoError(t, err)
	require.True(t, ok)
	require.NotEmpty(t, final.Transformer)
	require.NotEqual(t, final.Transformer, warm.Transformer, "two checkpoints")
	// What the run paid: M_0 here (the tiny profile's 8, drawn as the
	// service draws it) and its calibrations' runs, fresh and reused.
	require.Equal(t, Runs{Fresh: 5, Reused: 1}, final.Runs.Training)
	require.Equal(t, 8+6, final.Budget())
	require.Len(t, final.Steps, 2)
	require.InDelta(t, 0.75, *final.Steps[1].MeanGain, 1e-12)
	require.Len(t, final.Calibrations, 1)
	require.Equal(t, 6, final.Calibrations[0].Executed)
	require.InDelta(t, 0.6, *final.Calibrations[0].Accuracy, 1e-12)
	require.Empty(t, warm.Steps, "the warm-up policy did no RL")
	require.Zero(t, warm.Budget(), "the warm-up imitates catalogue answers: no real record")
	// The longer warmed-up policy writes more answers the comparison
	// measures.
	measured := func(r Result) int {
		n := 0
		for _, s := range r.States {
			n += len(s.Gains)
		}
		return n
	}
	require.Greater(t, measured(final), measured(warm))
	require.Positive(t, warm.Unmeasured)
	require.Greater(t, warm.Unmeasured, final.Unmeasured)

	var second bytes.Buffer
	require.NoError(t, run(context.Background(), &second, o))
	require.Contains(t, second.String(), "3 finished earlier, 0 to run")
	md, err := os.ReadFile(filepath.Join(dir, "compare-seeds1-1-base+transformer-warmup+transformer.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| transformer, LM2LM through the service |")
	// Paired with Base and with its own warm-up (what RL added).
	require.Contains(t, string(md), "| Δ vs Base (untrained) | P(better than Base (untrained)) | Δ vs transformer, warm-up only | P(better than transformer, warm-up only) |")

	f, err := os.OpenFile(filepath.Join(runs, "run-1", "policy", "final.pt"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, _, err = readResult(dir, job{"transformer", 1}, o)
	require.ErrorContains(t, err, "evaluated another transformer run")
	_, ok, err = readResult(dir, job{"transformer-warmup", 1}, o)
	require.NoError(t, err, "the warm-up's checkpoint did not change")
	require.True(t, ok)
}

// TestTransformerRunRefused: a run directory without result.json, with a
// damaged one, of another seed, split or setting, or without the checkpoint is
// refused with errTransformer and the path; a good one has a digest that
// changes with the temperature.
func TestTransformerRunRefused(t *testing.T) {
	dir := t.TempDir()
	o := options{suite: "v3-val", transformer: filepath.Join(dir, "run-{seed}"), transformerTemp: 0.25}
	m := methods["transformer"]
	run1 := filepath.Join(dir, "run-1")
	require.NoError(t, os.MkdirAll(filepath.Join(run1, "policy"), 0o755))
	write := func(body string) {
		require.NoError(t, os.WriteFile(filepath.Join(run1, "result.json"), []byte(body), 0o600))
	}
	_, _, _, err := transformerRun(o, m, 1)
	require.ErrorIs(t, err, errTransformer)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "go run ./examples/llm-rl")
	for _, c := range []struct{ body, want string }{
		{`{"seed": 1, "split": "v3-val"`, "result.json"},
		{`{"seed": 2, "split": "v3-val"}`, "holds seed 2, want 1"},
		{`{"seed": 1, "split": "v3-test"}`, `split "v3-test", want -suite v3-val`},
		{`{"seed": 1, "split": "v3-val", "setting": "prior-local"}`, `setting "prior-local", want -setting validated`},
		{`{"seed": 1, "split": "v3-val", "setting": "validated"}`, "final.pt"},
		{`{"seed": 1, "split": "v3-val"}`, "final.pt"},
	} {
		write(c.body)
		_, _, _, err := transformerRun(o, m, 1)
		require.ErrorIs(t, err, errTransformer, c.body)
		require.ErrorContains(t, err, c.want, c.body)
	}
	require.NoError(t, os.WriteFile(filepath.Join(run1, "policy", "final.pt"), []byte("weights"), 0o600))
	_, ckpt, d1, err := transformerRun(o, m, 1)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(run1, "policy", "final.pt"), ckpt)
	o.transformerTemp = 1
	_, _, d2, err := transformerRun(o, m, 1)
	require.NoError(t, err)
	require.NotEqual(t, d1, d2, "the temperature is in the digest")
	o.setting = "prior-local"
	_, _, _, err = transformerRun(o, m, 1)
	require.ErrorContains(t, err, `trained under setting "validated", want -setting prior-local`, "a run from before the field is validated's")
	write(`{"seed": 1, "split": "v3-val", "setting": "prior-local"}`)
	_, _, _, err = transformerRun(o, m, 1)
	require.NoError(t, err)
}
