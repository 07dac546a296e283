package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/serve"
)

// The transformer methods evaluate a policy that examples/llm-rl trained
// through the environment service (a token-level transformer, METHOD.md
// §1 Policy optimisation, rewarded per sample by the service's world
// model): -transformer names its run directories, one per seed. The
// comparison does not train it; it reads the run's result.json for what
// the training paid and how it went, serves the saved policy with
// train.py --serve (an OpenAI-compatible endpoint on a free loopback port
// with a token) and evaluates it through proposer/openai exactly as every
// other method: the same held-out states with the same histories, the same
// real-run seeds, the same convention for invalid and infeasible
// proposals, so its cells pair with the other methods' by (seed, state).

// defaultTransformerTemp is -transformer-temperature's default, chosen on
// v3-val (seed 1 of each examples/llm-rl setting; 0.25, 0.5 and 1 tried:
// 0.25 was best or level for every setting, e.g. +2.37, +1.98 and +1.40
// σ_e for the chosen one; docs/bring-your-own-model.md). The embedded
// policy's evaluation temperature was likewise chosen below its training
// temperature (lab/setting: 0.5 against 2).
const defaultTransformerTemp = 0.25

// python is Debian's interpreter, which has python3-torch.
const python = "/usr/bin/python3"

// llmrlResult is the part of examples/llm-rl's result.json the comparison
// reads.
type llmrlResult struct {
	Profile     string   `json:"profile"`
	Seed        uint64   `json:"seed"`
	Split       string   `json:"split"`
	Setting     string   `json:"setting"` // "" in runs from before the field: validated
	Checkpoints []string `json:"checkpoints"`
	Steps       []struct {
		Step       int     `json:"step"`
		MeanReward float64 `json:"mean_reward"`
		MeanGain   float64 `json:"mean_gain"`
		Entropy    float64 `json:"entropy"`
		Loss       float64 `json:"loss"`
	} `json:"steps"`
	Calibrations []struct {
		Result   serve.CalibrationStatus `json:"result"`
		Monitors serve.MonitorsResponse  `json:"monitors"`
	} `json:"calibrations"`
	Service     serve.Info `json:"service"`
	WallSeconds float64    `json:"wall_seconds"`
}

// errTransformer marks a -transformer run that cannot be used.
var errTransformer = errors.New("transformer run")

// transformerDir is seed's run directory: -transformer with {seed}
// replaced.
func transformerDir(pattern string, seed uint64) string {
	return strings.ReplaceAll(pattern, "{seed}", strconv.FormatUint(seed, 10))
}

// transformerRun reads and checks seed's run for method m: its result,
// the checkpoint's path and the digest of both (with the sampling
// temperature), which the method's result file records.
func transformerRun(o options, m method, seed uint64) (llmrlResult, string, string, error) {
	var r llmrlResult
	dir := transformerDir(o.transformer, seed)
	raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		return r, "", "", fmt.Errorf("%w: %w (run go run ./examples/llm-rl -profile method -split %s -setting %s -seed %d -dir %s)", errTransformer, err, o.suite, cmp.Or(o.setting, "validated"), seed, dir)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, "", "", fmt.Errorf("%w: %s: %w", errTransformer, filepath.Join(dir, "result.json"), err)
	}
	switch {
	case r.Seed != seed:
		return r, "", "", fmt.Errorf("%w: %s holds seed %d, want %d", errTransformer, dir, r.Seed, seed)
	case r.Split != o.suite:
		return r, "", "", fmt.Errorf("%w: %s trained against split %q, want -suite %s", errTransformer, dir, r.Split, o.suite)
	case cmp.Or(r.Setting, "validated") != cmp.Or(o.setting, "validated"):
		return r, "", "", fmt.Errorf("%w: %s trained under setting %q, want -setting %s", errTransformer, dir, cmp.Or(r.Setting, "validated"), cmp.Or(o.setting, "validated"))
	}
	ckpt := filepath.Join(dir, "policy", m.checkpoint)
	b, err := os.ReadFile(ckpt)
	if err != nil {
		return r, "", "", fmt.Errorf("%w: %w", errTransformer, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%d\x00%s\x00%g", len(raw), raw, len(b), b, o.transformerTemp)
	return r, ckpt, hex.EncodeToString(h.Sum(nil)), nil
}

// listening matches the first line train.py --serve prints.
var listening = regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]{1,5})$`)

// parseListening returns the base URL of train.py --serve's first line.
func parseListening(line string) (string, error) {
	m := listening.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
	if m == nil {
		return "", fmt.Errorf("%w: the policy server's first line is %q, want \"listening on http://127.0.0.1:PORT\"", errTransformer, excerpt(line))
	}
	port, err := strconv.Atoi(m[1][len("http://127.0.0.1:"):])
	if err != nil || port < 1 || port > 65535 {
		return "", fmt.Errorf("%w: the policy server listens on port %q", errTransformer, m[1][len("http://127.0.0.1:"):])
	}
	return m[1], nil
}

func excerpt(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// policyServer is a running train.py --serve.
type policyServer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *strings.Builder
	url    string
	token  string
}

// startPolicy serves the checkpoint with script (train.py --serve) and
// waits for its address (at most a minute).
func startPolicy(ctx context.Context, script, ckpt string) (*policyServer, error) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s := &policyServer{token: hex.EncodeToString(tok), stderr: &strings.Builder{}}
	s.cmd = exec.CommandContext(ctx, python, script, "--serve", ckpt)
	s.cmd.Env = append(os.Environ(), "LM2LM_POLICY_TOKEN="+s.token)
	s.cmd.Stderr = &limitedWriter{w: s.stderr, n: 16 << 10}
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %w", errTransformer, err)
	}
	line := make(chan string, 1)
	go func() { // owned by startPolicy: ends when stdout closes
		r := bufio.NewReader(io.LimitReader(out, 4<<10))
		l, _ := r.ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, out)
	}()
	var first string
	select {
	case first = <-line:
	case <-time.After(time.Minute):
	case <-ctx.Done():
	}
	if s.url, err = parseListening(first); err != nil {
		_ = s.stop()
		return nil, fmt.Errorf("%w (stderr: %s)", err, excerpt(s.stderr.String()))
	}
	return s, nil
}

// stop closes the server's stdin (it exits) and waits for it.
func (s *policyServer) stop() error {
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return <-done
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// transformerProposer starts the policy server of the job's run and
// returns a proposer over it, the function that stops it, and fills res
// with what the run paid and how it trained.
func transformerProposer(ctx context.Context, o options, m method, seed uint64, res *Result) (proposer.Proposer, func() error, error) {
	r, ckpt, digest, err := transformerRun(o, m, seed)
	if err != nil {
		return nil, nil, err
	}
	res.Transformer = digest
	if m.checkpoint == "final.pt" {
		transformerTraining(r, res)
	}
	srv, err := startPolicy(ctx, o.transformerScript, ckpt)
	if err != nil {
		return nil, nil, err
	}
	cfg := openai.DefaultConfig()
	cfg.BaseURL, cfg.APIKey, cfg.Model = srv.url+"/v1", srv.token, "llm-rl"
	cfg.Temperature = o.transformerTemp
	// The service's prompt (serve: no history text) and catalogue.
	cfg.Catalogue, cfg.HistoryTextChars = lab.Catalogue(), 0
	cfg.MaxRetries = 0
	p, err := openai.New(cfg)
	if err != nil {
		_ = srv.stop()
		return nil, nil, err
	}
	return p, srv.stop, nil
}

// transformerTraining copies the run's curves, calibrations and real runs
// into res: the calibrations' runs are its training runs (fresh and
// reused, as the service counted them).
func transformerTraining(r llmrlResult, res *Result) {
	for _, s := range r.Steps {
		res.Steps = append(res.Steps, StepResult{Step: s.Step, Loss: s.Loss, Entropy: s.Entropy,
			Reward: stat.OrNil(s.MeanReward), MeanGain: stat.OrNil(s.MeanGain)})
	}
	for _, c := range r.Calibrations {
		cr := CalibrationResult{Step: c.Result.Step, Delta: c.Monitors.DeltaM, Cosine: c.Monitors.Cosine,
			Accuracy: c.Monitors.Accuracy, Gap: c.Monitors.Gap}
		if x := c.Result.Result; x != nil {
			cr.Executed, cr.Infeasible = x.Executed, x.Infeasible
		}
		res.Calibrations = append(res.Calibrations, cr)
	}
	res.Runs.Training = Runs{Fresh: r.Service.RealRuns, Reused: r.Service.Reused}
}
