package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lm2lm/lm2lm/internal/bearer"
	"github.com/lm2lm/lm2lm/internal/pytest"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/serve"
)

// requireTorch skips the test without PyTorch, or fails it under CI
// (pytest.RequireTorch).
func requireTorch(t *testing.T) {
	t.Helper()
	pytest.RequireTorch(t, "train.py")
}

// checkBatch returns sequences whose tokens fall in every regime of the
// clipped surrogate (METHOD.md §1 Policy optimisation: ε_low 0.2, ε_high
// 0.28) for advantages of each sign and zero, and one empty sequence.
func checkBatch() []dapo.Sequence {
	rng := rand.New(rand.NewPCG(23, 5))
	ratios := []func() float64{
		func() float64 { return 0.1 * (rng.Float64() - 0.5) },         // ρ ∈ (0.95, 1.05)
		func() float64 { return math.Log(1.4 + rng.Float64()) },       // ρ > 1 + ε_high
		func() float64 { return math.Log(0.3 + 0.4*rng.Float64()) },   // ρ < 1 − ε_low
		func() float64 { return math.Log(1.1 + 0.1*rng.Float64()) },   // inside, above 1
		func() float64 { return math.Log(0.85 + 0.05*rng.Float64()) }, // inside, below 1
	}
	var seqs []dapo.Sequence
	for i, a := range []float64{1.3, -0.7, 0, 2.25, -1.9, 0.4, -0.05} {
		n := 2 + rng.IntN(8)
		s := dapo.Sequence{Advantage: a}
		for k := range n {
			old := -0.2 - 5*rng.Float64()
			s.OldLogProbs = append(s.OldLogProbs, old)
			s.NewLogProbs = append(s.NewLogProbs, old+ratios[(i+k)%len(ratios)]())
		}
		seqs = append(seqs, s)
	}
	return append(seqs, dapo.Sequence{Advantage: 0.9, OldLogProbs: []float64{}, NewLogProbs: []float64{}})
}

// TestLossMatchesDAPO runs train.py's dapo_loss (the function its RL update
// minimises) with torch autograd in float64 on a batch and requires its
// loss and gradient to equal dapo.Loss's (token-mean, clip 0.2/0.28) to
// 1e-9.
func TestLossMatchesDAPO(t *testing.T) {
	requireTorch(t)
	seqs := checkBatch()
	type seqJSON struct {
		Old       []float64 `json:"old"`
		New       []float64 `json:"new"`
		Advantage float64   `json:"advantage"`
	}
	var in struct {
		Sequences []seqJSON `json:"sequences"`
	}
	for _, s := range seqs {
		in.Sequences = append(in.Sequences, seqJSON{s.OldLogProbs, s.NewLogProbs, s.Advantage})
	}
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "batch.json"), filepath.Join(dir, "out.json")
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(inPath, b, 0o600))
	out, err := exec.Command(Python, "train.py", "--check", inPath, outPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	raw, err := os.ReadFile(outPath)
	require.NoError(t, err)
	var got struct {
		Loss     float64     `json:"loss"`
		ClipFrac float64     `json:"clip_frac"`
		Tokens   int         `json:"tokens"`
		Grad     [][]float64 `json:"grad"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))

	want := dapo.Evaluate(dapo.DefaultLossConfig(), seqs)
	require.Equal(t, want.Tokens, got.Tokens)
	require.InDelta(t, want.Loss, got.Loss, 1e-9, "loss")
	require.InDelta(t, want.ClipFrac, got.ClipFrac, 1e-12, "ε-clip fraction")
	require.Greater(t, want.ClipFrac, 0.0, "the batch must exercise the clip")
	require.NotZero(t, want.Loss)
	maxDiff := math.Abs(want.Loss - got.Loss)
	require.Len(t, got.Grad, len(seqs))
	nonzero := 0
	for i := range seqs {
		require.Len(t, got.Grad[i], len(seqs[i].NewLogProbs), "sequence %d", i)
		for k, g := range got.Grad[i] {
			maxDiff = max(maxDiff, math.Abs(want.Grad[i][k]-g))
			require.InDelta(t, want.Grad[i][k], g, 1e-9, "∂loss/∂new[%d][%d]", i, k)
			if g != 0 {
				nonzero++
			}
		}
	}
	require.Positive(t, nonzero)
	t.Logf("train.py dapo_loss vs dapo.Loss: %d tokens, clip fraction %.3f, max |difference| %.3g", want.Tokens, want.ClipFrac, maxDiff)
}

// TestTinyProfile runs the tiny profile end to end on the embedded lab:
// the service in process, train.py's warm-up and RL through it, real runs
// on held-out states before and after RL.
func TestTinyProfile(t *testing.T) {
	if testing.Short() {
		// The run is PyTorch's and the lab's; the README's test command
		// (without -short) runs it, and the short race pass checks the Go
		// side with TestLossMatchesDAPO.
		t.Skip("the tiny profile trains a transformer and runs the lab for real (about 2 minutes); run without -short")
	}
	requireTorch(t)
	p := Profiles["tiny"]
	var log strings.Builder
	dir := t.TempDir()
	s, err := Run(context.Background(), Options{Profile: p, Dir: dir, Script: "train.py", Seed: 1, Parallel: 2}, &log)
	require.NoError(t, err, "%s", log.String())
	var report strings.Builder
	Print(&report, p, s)
	t.Log("\n" + report.String())

	// After the warm-up most samples parse: train.py's check on 64
	// samples, and the service's parser on the held-out samples.
	require.GreaterOrEqual(t, s.WarmupValid, 0.9, "%s", log.String())
	require.GreaterOrEqual(t, s.Before.Valid, 0.75)
	require.Equal(t, p.EvalStates*4, s.Before.Samples)
	require.Equal(t, p.EvalStates*4, s.After.Samples)
	require.Positive(t, s.Before.Runs, "valid held-out proposals are run for real")
	require.Len(t, s.Steps, p.Steps)
	for i, st := range s.Steps {
		require.Equal(t, i, st.Step)
		require.Equal(t, p.States, st.Kept+st.Flat, "step %d: every group is kept or flat", i)
	}
	// The calibration points before the last step applied, in schedule
	// order (a point at the last step runs, but no step is scored after
	// it: its records never reach a reward).
	applied := 0
	for _, st := range p.Schedule.Steps {
		if st < p.Steps {
			applied++
		}
	}
	require.Len(t, s.Calibrations, applied)
	for i, c := range s.Calibrations {
		require.Equal(t, p.Schedule.Steps[i], c.Result.Step)
		require.Equal(t, p.Schedule.Budgets[i], c.Result.Budget)
		require.Equal(t, serve.CalApplied, c.Result.State)
		require.LessOrEqual(t, c.Result.Result.Executed, c.Result.Budget)
	}
	require.Equal(t, applied, s.Info.Calibrations)
	require.Equal(t, p.Steps, s.Info.Step)
	require.Positive(t, s.CPUSeconds)
	require.Positive(t, s.WallSeconds)

	// result.json holds the whole run, as examples/compare's transformer
	// methods read it, and both policies are saved.
	raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
	require.NoError(t, err)
	var back Summary
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, "tiny", back.Profile)
	require.Equal(t, uint64(1), back.Seed)
	require.Equal(t, p.LR, back.LR)
	require.Equal(t, p.Epochs, back.Epochs)
	require.Equal(t, s.Info, back.Info)
	require.Equal(t, s.Steps, back.Steps)
	require.Equal(t, []string{"policy/warmup.pt", "policy/final.pt"}, back.Checkpoints)
	for _, c := range back.Checkpoints {
		require.FileExists(t, filepath.Join(dir, c))
	}
	for i, st := range back.Steps {
		require.False(t, math.IsNaN(st.MeanGain), "step %d", i)
	}
}

func TestUnknownProfile(t *testing.T) {
	_, ok := Profiles["huge"]
	require.False(t, ok)
	for name, p := range Profiles {
		require.Equal(t, name, p.Name)
		require.NoError(t, p.Schedule.Validate(), name)
		require.LessOrEqual(t, p.Schedule.Steps[len(p.Schedule.Steps)-1], p.Steps, "%s: every calibration falls within the steps", name)
		require.Contains(t, []string{"condensed", "full"}, p.Prompt, name)
		require.Positive(t, p.LR, name)
	}
}

// A held-out state's cell in the comparison's convention: an invalid,
// unmeasured or failed sample counts in no average, an infeasible one
// counts −clip.
func TestEvalStateCell(t *testing.T) {
	s := EvalState{StateID: "s1", Task: "t", Results: []serve.EvalResult{
		{Valid: true, Measured: true, GainSigmas: 1.5},
		{Valid: true, Measured: true, Infeasible: "diverged"},
		{Valid: false},
		{Valid: true, Measured: false, Failure: "run failed"},
	}}
	c := s.Cell(3, 6)
	require.Equal(t, uint64(3), c.Seed)
	require.Equal(t, "s1", c.State)
	require.Equal(t, "t", c.Task)
	require.Equal(t, []float64{1.5, -6}, c.Gains)
}

// The full prompt's reading of a task description: every "name value"
// pair, the value as its quarter-octave token (floor(4·log2|v|), "n" for a
// negative value, q0z for zero), so values a factor 2 apart differ.
func TestFullPromptPairs(t *testing.T) {
	if _, err := os.Stat(Python); err != nil {
		t.Skipf("%s: %v", Python, err)
	}
	cmd := exec.Command(Python, "-c", `import sys, json; sys.argv = ["x"]; import train
print(json.dumps(train.description_pairs("context 2, embedding 32, adam lr 0.003625 (warm-up 0), shift -4, batch 64, budget 3.04e+09")))`)
	cmd.Dir = "."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var pairs []string
	require.NoError(t, json.Unmarshal(out, &pairs), "%s", out)
	// 4·log2: 2 → 4, 32 → 20, 0.003625 → −32.4 → −33, −4 → n8, 64 → 24,
	// 3.04e9 → 126.
	require.Equal(t, []string{"context q4", "embedding q20", "lr q-33", "warm-up q0z", "shift nq8", "batch q24", "budget q126"}, pairs)
}

// TestFastPathsMatchForward checks train.py's two fast paths against the
// model's full forward (the path the warm-up trains through), on a
// randomly initialised policy: the key-value-cached sampler's old
// log-probs, and group_logprobs' log-probs and parameter gradients (a
// prompt encoded once for its G answers, prompts of different lengths,
// an answer that is only EOS).
func TestFastPathsMatchForward(t *testing.T) {
	requireTorch(t)
	out := filepath.Join(t.TempDir(), "sampler.json")
	b, err := exec.Command(Python, "train.py", "--check-sampler", out).CombinedOutput()
	require.NoError(t, err, "%s", b)
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	var got struct {
		SampleDiff float64 `json:"sample_diff"`
		GroupDiff  float64 `json:"group_diff"`
		GradDiff   float64 `json:"grad_diff"`
		GradNorm   float64 `json:"grad_norm"`
		Tokens     int     `json:"tokens"`
	}
	require.NoError(t, json.Unmarshal(raw, &got), "%s", raw)
	// Sixteen samples of up to 24 tokens each (an untrained model seldom
	// writes EOS).
	require.Greater(t, got.Tokens, 16)
	require.Greater(t, got.GradNorm, 1.0, "the gradient must not vanish")
	// float32 rounding: an indexing or masking error moves log-probs by
	// far more than 1e-4 (the log-prob of a uniform token is about -6.9).
	require.Less(t, got.SampleDiff, 1e-4)
	require.Less(t, got.GroupDiff, 1e-4)
	require.Less(t, got.GradDiff, 1e-4*got.GradNorm)
	t.Logf("sampler %.2g, grouped log-probs %.2g, gradients %.2g (norm %.1f) over %d sampled tokens", got.SampleDiff, got.GroupDiff, got.GradDiff, got.GradNorm, got.Tokens)
}

// TestChart draws two runs' result.json files and refuses no run, a
// missing file and runs of two profiles.
func TestChart(t *testing.T) {
	dir := t.TempDir()
	write := func(name, profile string, seed uint64) string {
		d := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		top := 0.5
		s := Summary{Profile: profile, Seed: seed}
		for i := range 5 {
			s.Steps = append(s.Steps, Step{Step: i, MeanReward: float64(i) / 10, MeanGain: float64(i) / 20, Entropy: 1 - float64(i)/10,
				ClipFrac: 0.001 * float64(i), TopShare: &top})
		}
		b, err := json.Marshal(s)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(d, "result.json"), b, 0o600))
		return d
	}
	a, b := write("a", "method", 1), write("b", "method", 2)
	out := filepath.Join(dir, "charts", "curves.png")
	require.NoError(t, Chart(out, []string{a, b}))
	png, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")))
	require.ErrorIs(t, Chart(out, nil), ErrNoRuns)
	require.ErrorIs(t, Chart(out, []string{filepath.Join(dir, "none")}), fs.ErrNotExist)
	require.ErrorContains(t, Chart(out, []string{a, write("c", "short", 3)}), "one chart is one profile")
}

// TestServePolicy serves a saved (untrained) policy with train.py --serve
// and sends it what a client may: no token, another path, an oversized or
// broken body, bad n, temperature and messages are refused with their
// codes; a good request is answered with n choices, a log-prob per token,
// and the same choices again for the same seed.
func TestServePolicy(t *testing.T) {
	requireTorch(t)
	ckpt := filepath.Join(t.TempDir(), "p.pt")
	save := exec.Command(Python, "-c", `import sys, torch
sys.argv = ["x"]
import train
cat = [("lr", [("factor", ["0.5", "2"])]), ("none", [])]
pol = train.Policy(torch, train.Tokenizer(cat, ["ar-prose"]), "cpu", 1)
train.save_policy(pol, sys.stdin.readline().strip(), "final", 1)
`)
	save.Stdin = strings.NewReader(ckpt + "\n")
	out, err := save.CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd := exec.Command(Python, "train.py", "--serve", ckpt)
	cmd.Env = append(os.Environ(), "LM2LM_POLICY_TOKEN=tok")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on http://127.0.0.1:")
	require.True(t, ok, line)
	url := "http://127.0.0.1:" + base + "/v1/chat/completions"

	post := func(path, token, body string) (int, []byte) {
		return bearer.Call(t, http.MethodPost, strings.TrimSuffix(url, "/v1/chat/completions")+path, token, []byte(body))
	}
	good := `{"messages": [{"role": "user", "content": "TASK {\"family\": \"ar-prose\"}"}], "n": 3, "seed": 7, "temperature": 1}`
	for _, c := range []struct {
		path, token, body string
		code              int
	}{
		{"/v1/chat/completions", "", good, http.StatusUnauthorized},
		{"/v1/chat/completions", "other", good, http.StatusUnauthorized},
		{"/v1/completions", "tok", good, http.StatusNotFound},
		{"/v1/chat/completions", "tok", `{"messages": [`, http.StatusBadRequest},
		{"/v1/chat/completions", "tok", `[]`, http.StatusBadRequest},
		{"/v1/chat/completions", "tok", `{"messages": []}`, http.StatusBadRequest},
		{"/v1/chat/completions", "tok", `{"messages": [{"role": "user"}]}`, http.StatusBadRequest},
		{"/v1/chat/completions", "tok", strings.Replace(good, `"n": 3`, `"n": 0`, 1), http.StatusBadRequest},
		{"/v1/chat/completions", "tok", strings.Replace(good, `"n": 3`, `"n": true`, 1), http.StatusBadRequest},
		{"/v1/chat/completions", "tok", strings.Replace(good, `"temperature": 1`, `"temperature": 3`, 1), http.StatusBadRequest},
		{"/v1/chat/completions", "tok", strings.Replace(good, `"seed": 7`, `"seed": "7"`, 1), http.StatusBadRequest},
	} {
		code, b := post(c.path, c.token, c.body)
		require.Equal(t, c.code, code, "%s %q: %s", c.path, records.Excerpt(c.body), b)
	}
	// A body over 1 MiB is refused from its Content-Length, before it is
	// read (a raw request, so that no upload races the refusal).
	conn, err := net.Dial("tcp", "127.0.0.1:"+base)
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: %d\r\n\r\n", 1<<20+1)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.NoError(t, conn.Close())

	type answer struct {
		Choices []struct {
			Message  struct{ Content string }
			Logprobs struct {
				Content []struct {
					Token   string
					Logprob float64
				}
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	var first, again answer
	code, b := post("/v1/chat/completions", "tok", good)
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.NoError(t, json.Unmarshal(b, &first))
	require.Len(t, first.Choices, 3)
	for _, ch := range first.Choices {
		require.NotEmpty(t, ch.Logprobs.Content)
		text := ""
		for _, lp := range ch.Logprobs.Content {
			require.LessOrEqual(t, lp.Logprob, 0.0)
			text += lp.Token
		}
		require.Equal(t, ch.Message.Content, text, "the tokens spell the content")
		require.Contains(t, []string{"stop", "length"}, ch.FinishReason)
	}
	_, b = post("/v1/chat/completions", "tok", good)
	require.NoError(t, json.Unmarshal(b, &again))
	require.Equal(t, first, again, "the same seed samples the same choices")
}
