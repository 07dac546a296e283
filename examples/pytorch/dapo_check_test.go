package main

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
)

// checkResult is one result of dapo_check.py.
type checkResult struct {
	Mode       string      `json:"loss_agg_mode"`
	C          *float64    `json:"clip_ratio_c"`
	Loss       float64     `json:"loss"`
	Grad       [][]float64 `json:"grad"`
	ClipFrac   float64     `json:"pg_clipfrac"`
	LowerFrac  float64     `json:"pg_clipfrac_lower"`
	TokenCount int         `json:"tokens"`
}

// Token kinds of the cross-check batch: the log-ratio new − old that puts
// a token of a sequence with advantage A in each regime of the surrogate
// (METHOD.md §1 Policy optimisation: ε_low 0.2, ε_high 0.28; dual clip c 3).
var logRatios = []struct {
	name string
	r    func(rng *rand.Rand) float64
}{
	{"inside", func(rng *rand.Rand) float64 { return 0.1 * (rng.Float64() - 0.5) }},           // ρ ∈ (0.95, 1.05)
	{"above 1+ε_high", func(rng *rand.Rand) float64 { return math.Log(1.4 + rng.Float64()) }}, // ρ ∈ (1.4, 2.4)
	{"below 1−ε_low", func(rng *rand.Rand) float64 { return math.Log(0.3 + 0.4*rng.Float64()) }},
	{"above c", func(rng *rand.Rand) float64 { return math.Log(3.5 + rng.Float64()) }}, // ρ ∈ (3.5, 4.5)
}

// crossCheckBatch returns items with every advantage sign (including
// zero) crossed with every ratio regime, an invalid sample, a sample
// without tokens, and the new log-probs of every token.
func crossCheckBatch() ([]proposer.Item, [][]float64) {
	rng := rand.New(rand.NewPCG(17, 1))
	task := records.Task{ID: "gpt-prose/slow", Family: "gpt-prose", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 3.6, SeedNoise: 0.05, Budget: 160, Description: "a tiny GPT"}
	var items []proposer.Item
	var news [][]float64
	advantages := []float64{1.3, -0.7, 0, 2.25, -1.9, 0.4, -0.05}
	for i, a := range advantages {
		n := 3 + rng.IntN(10)
		smp := proposer.Sample{Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"},
			Text: `{"mechanism": "lr-scale", "params": {"factor": 2}}`}, Temperature: 1}
		var nl []float64
		for k := range n {
			old := -1.7 - 4*rng.Float64() // ≤ 0 even after the largest ratio
			smp.Tokens = append(smp.Tokens, string(rune('a'+k)))
			smp.LogProbs = append(smp.LogProbs, old)
			nl = append(nl, old+logRatios[(k+i)%len(logRatios)].r(rng))
		}
		if i == 4 {
			smp.Invalid, smp.Reason, smp.Proposal = true, "not JSON", records.Proposal{Text: "no idea"}
		}
		items = append(items, proposer.Item{State: records.State{Task: task}, Sample: smp, Advantage: a})
		news = append(news, nl)
	}
	// A sample whose backend reported no tokens: it adds nothing.
	empty := proposer.Sample{Proposal: records.Proposal{Mechanism: "warmup", Params: map[string]string{"frac": "0.2"}}, Temperature: 1}
	items = append(items, proposer.Item{State: records.State{Task: task}, Sample: empty, Advantage: 0.9})
	news = append(news, []float64{})
	return items, news
}

// TestDAPOMatchesAutograd recomputes dapo.Loss and its gradient from an
// exported batch with torch autograd in float64 (verl's
// compute_policy_loss), for token-mean and seq-mean-token-mean, with and
// without the dual clip, and requires agreement to 1e-9.
func TestDAPOMatchesAutograd(t *testing.T) {
	requireTorch(t)
	items, news := crossCheckBatch()
	dir := t.TempDir()
	var batch bytes.Buffer
	prompt := func(s records.State) ([]openai.Message, error) { return openai.Messages(s, Catalogue(), false, 0) }
	require.NoError(t, openai.ExportBatch(&batch, items, prompt))
	batchPath, newPath, outPath := filepath.Join(dir, "batch.jsonl"), filepath.Join(dir, "new.json"), filepath.Join(dir, "out.json")
	require.NoError(t, os.WriteFile(batchPath, batch.Bytes(), 0o600))
	nb, err := json.Marshal(map[string][][]float64{"new_logprobs": news})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(newPath, nb, 0o600))
	cmd := exec.Command(python, script(t, "dapo_check.py"), batchPath, newPath, outPath, "--clip-ratio-c", "3")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var got struct{ Results []checkResult }
	raw, err := os.ReadFile(outPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got.Results, 4)

	lines, err := openai.DecodeBatch(bytes.NewReader(batch.Bytes()))
	require.NoError(t, err)
	seqs := make([]dapo.Sequence, len(lines))
	for i, l := range lines {
		seqs[i] = dapo.Sequence{OldLogProbs: l.OldLogProbs, NewLogProbs: news[i], Advantage: l.Advantage}
	}
	var maxDiff float64
	for _, r := range got.Results {
		cfg := dapo.DefaultLossConfig()
		if r.Mode == "seq-mean-token-mean" {
			cfg.Aggregation = dapo.SeqMeanTokenMean
		}
		if r.C != nil {
			cfg.DualClip = *r.C
		}
		want := dapo.Evaluate(cfg, seqs)
		name := r.Mode + map[bool]string{true: " dual-clip", false: ""}[r.C != nil]
		require.Equal(t, want.Tokens, r.TokenCount, name)
		maxDiff = max(maxDiff, math.Abs(want.Loss-r.Loss))
		require.InDelta(t, want.Loss, r.Loss, 1e-9, "%s: loss", name)
		require.InDelta(t, want.ClipFrac, r.ClipFrac, 1e-12, "%s: ε-clip fraction", name)
		require.InDelta(t, want.DualClipFrac, r.LowerFrac, 1e-12, "%s: dual-clip fraction", name)
		require.Len(t, r.Grad, len(seqs))
		for i := range seqs {
			require.Len(t, r.Grad[i], len(seqs[i].NewLogProbs), "%s: sequence %d", name, i)
			for k, g := range r.Grad[i] {
				maxDiff = max(maxDiff, math.Abs(want.Grad[i][k]-g))
				require.InDelta(t, want.Grad[i][k], g, 1e-9, "%s: ∂loss/∂new[%d][%d]", name, i, k)
			}
		}
		// The batch exercises every regime: the check cannot pass on
		// unclipped tokens alone.
		require.Greater(t, want.ClipFrac, 0.0, name)
		if r.C != nil {
			require.Greater(t, want.DualClipFrac, 0.0, name)
		}
	}
	t.Logf("dapo.Loss vs torch autograd (verl's compute_policy_loss), 4 configurations: max |difference| %.3g", maxDiff)
}
