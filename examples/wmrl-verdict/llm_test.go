package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
)

// ruleJudge stands in for an LLM behind the OpenAI wire format: it reads
// the solution from the prompt and answers a verdict over the eight checks.
func ruleJudge(r oaitest.Request) oaitest.Reply {
	user := r.Text("user")
	status, bucket := "valid", "mid"
	switch {
	case strings.Contains(user, "for r in test\n") && strings.Contains(user, "[train[0]['target'] for r in test\n"):
		status = "syntax_err"
	case strings.Contains(user, "r['label']"), strings.Contains(user, "bytearray(8 << 30)"):
		status = "runtime_err"
	case !strings.Contains(user, "submission.csv"):
		status = "ran_no_sub"
	case strings.Contains(user, "neighbours"):
		bucket = "high"
	case strings.Contains(user, "top = max"):
		bucket = "low"
	}
	ps := make([]string, 8)
	for i := range ps {
		s := "valid"
		if i == 5 || i == 6 {
			s = status
		}
		ps[i] = fmt.Sprintf(`{"status":%q,"error_type":"","error_line":0,"quality_bucket":%q,"confidence":0.9,"feedback":"-"}`, s, bucket)
	}
	return oaitest.Text(`{"reason":"rules","predictions":[` + strings.Join(ps, ",") + `]}`)
}

func TestLLMWorld(t *testing.T) {
	// The example with its verdict world model over an OpenAI-compatible
	// server (rwm/verdict), real grading throughout.
	if testing.Short() {
		t.Skip("grades solutions with real Python runs")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	srv := oaitest.New(t, ruleJudge)
	env := map[string]string{"OPENAI_BASE_URL": srv.URL(), "LM2LM_MODEL": "rule-judge"}
	o := Options{Out: t.TempDir(), Tasks: []string{"iris"}, Steps: 16, Seed: 1, World: "auto", Power: 1,
		Getenv: func(k string) string { return env[k] }}
	var out strings.Builder
	res, err := Run(context.Background(), o, io.MultiWriter(&out))
	require.NoError(t, err)
	require.False(t, res.ScriptedWorld)
	require.Contains(t, out.String(), "verdict world model: rwm/verdict rule-judge@")
	require.Greater(t, srv.Count(), 0)
	// Distinct solutions are judged once each (the model is cached).
	require.LessOrEqual(t, srv.Count(), len(Solutions()))
	require.Greater(t, res.ScoreAfter, res.ScoreBefore)
}
