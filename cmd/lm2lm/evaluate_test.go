package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
)

// TestEvaluateAProposer evaluates a proposer behind an OpenAI-compatible
// server (the repository's test server) on the held-out task: two states
// × three proposals, each valid one run for real on trainscript, Avg@K and
// Best@K with intervals in the report; run again, it pays nothing.
func TestEvaluateAProposer(t *testing.T) {
	answers := []string{`{"mechanism": "lr-scale", "params": {"factor": "2"}}`, `{"mechanism": "width", "params": {"mult": "0.25"}}`, "no idea"}
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		n := max(r.N, 1)
		var cs []string
		for i := range n {
			cs = append(cs, answers[i%len(answers)])
		}
		return oaitest.Text(cs...)
	})
	p := config(t)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "evaluate:\n  k: 3\n  states_per_task: 2\n  proposer: {base_url: %q, model: trained}\n", srv.URL())
	require.NoError(t, err)
	require.NoError(t, f.Close())

	ctx := context.Background()
	var out, errb bytes.Buffer
	require.NoError(t, run(ctx, []string{"-config", p, "-progress", "lines", "evaluate"}, noEnv, &out, &errb), errb.String())
	require.Contains(t, out.String(), "evaluate trained: 1 held-out tasks × 2 states × 3 proposals")
	var sum EvalSummary
	b, err := os.ReadFile(filepath.Join(filepath.Dir(p), "lm2lm-out", "evaluate.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &sum))
	require.Equal(t, []string{"prose-held"}, sum.Tasks)
	require.Equal(t, 2, sum.States)
	require.Equal(t, 2, sum.Invalid, "one unparseable answer per state")
	require.Positive(t, sum.Runs)
	for _, iv := range []struct{ lo, pt, hi float64 }{{sum.AvgK.Low, sum.AvgK.Point, sum.AvgK.High}, {sum.BestK.Low, sum.BestK.Point, sum.BestK.High}} {
		require.LessOrEqual(t, iv.lo, iv.pt)
		require.LessOrEqual(t, iv.pt, iv.hi)
	}
	require.GreaterOrEqual(t, sum.BestK.Point, sum.AvgK.Point)
	// Every catalogue value is away from trainscript's optimum: every
	// change costs loss, so no proposal gains.
	require.Equal(t, 1.0, sum.NegativeRate.Point)
	// Two distinct changes on one task: two runs paid; both states propose
	// them, so the second state's measurements are the same runs.
	require.Equal(t, 2, sum.Runs)
	require.Equal(t, 2, sum.Reused)

	out.Reset()
	require.NoError(t, run(ctx, []string{"-config", p, "evaluate"}, noEnv, &out, &errb), errb.String())
	require.Contains(t, out.String(), fmt.Sprintf("evaluate: 0 runs paid now, %d reused", sum.Runs+sum.Reused), "a rerun pays nothing")
}

// TestEvaluateTheEmbeddedPolicy: without evaluate.proposer, evaluate asks
// the embedded policy, untrained, and needs no server.
func TestEvaluateTheEmbeddedPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	p := config(t)
	require.NoError(t, run(context.Background(), []string{"-config", p, "evaluate"}, noEnv, &out, &errb), errb.String())
	require.Contains(t, errb.String(), "the embedded policy, untrained")
	require.Contains(t, out.String(), "evaluate embedded-policy: 1 held-out tasks × 4 states × 4 proposals")
	require.FileExists(t, filepath.Join(filepath.Dir(p), "lm2lm-out", "evaluations", "embedded-policy-seed1.json"))
}
