package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pageBlocks returns the fenced code blocks of a page by their language.
func pageBlocks(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string][]string{}
	for rest := string(b); ; {
		_, after, ok := strings.Cut(rest, "```")
		if !ok {
			return out
		}
		body, tail, ok := strings.Cut(after, "```")
		require.True(t, ok, "unclosed block in %s", path)
		lang, code, _ := strings.Cut(body, "\n")
		out[lang] = append(out[lang], code)
		rest = tail
	}
}

// TestProtocolPageScript writes the script and env.yaml of
// docs/protocol.md from the page's text into an empty folder and runs the
// page's verbs on them, with no LLM server: the page is enough to write a
// script that works.
func TestProtocolPageScript(t *testing.T) {
	blocks := pageBlocks(t, "../../docs/protocol.md")
	require.Len(t, blocks["python"], 1)
	require.Len(t, blocks["yaml"], 1)
	require.Len(t, blocks["sh"], 1)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "train.py"), []byte(blocks["python"][0]), 0o644))
	cfg := filepath.Join(dir, "env.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(blocks["yaml"][0]), 0o644))
	var verbs [][]string
	for _, l := range strings.Split(blocks["sh"][0], "\n") {
		cmd, _, _ := strings.Cut(l, "#")
		if f := strings.Fields(cmd); len(f) > 0 {
			require.Equal(t, []string{"lm2lm", "-config", "env.yaml"}, f[:3], "%q", l)
			verbs = append(verbs, f[3:])
		}
	}
	require.Equal(t, [][]string{{"reference"}, {"m0"}, {"evaluate"}, {"runs"}, {"report"}}, verbs)
	outs := map[string]string{}
	for _, v := range verbs {
		out, errs, err := lm2lmRun(t, cfg, v...)
		require.NoError(t, err, "lm2lm %v:\n%s\n%s", v, out, errs)
		outs[v[0]] = out
	}
	require.Contains(t, outs["reference"], "reference: 9 runs paid now, 0 reused")
	require.Contains(t, outs["m0"], "M_0: 10 records (1 infeasible, 0 failed): 10 runs paid now")
	require.Contains(t, outs["evaluate"], "evaluate embedded-policy: 1 held-out tasks × 2 states × 2 proposals")
	require.Contains(t, outs["runs"], "small  lr-scale{factor=200}")
	require.Contains(t, outs["runs"], "infeasible")
	require.Contains(t, outs["runs"], "diverged: lr 4")
	require.Regexp(t, `\n(2[0-3]) runs in `, outs["runs"], "9 reference runs, 10 of M_0, 1 to 4 of the evaluation")
	var refs []struct {
		LeftOut string `json:"left_out"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "lm2lm-out", "reference.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &refs))
	for _, r := range refs {
		require.Empty(t, r.LeftOut)
	}
}
