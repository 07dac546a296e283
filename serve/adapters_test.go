package serve_test

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

const python = "/usr/bin/python3"

// startLoopback serves s on a fresh 127.0.0.1 port with a real
// http.Server and returns its URL.
func startLoopback(t *testing.T, s *serve.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: s.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// simToken is the bearer token of the services the adapters are tested
// against.
const simToken = "sim-token-sim-token-sim"

// simService starts the real service with a token over the fakes and
// returns it with its URL.
func simService(t *testing.T, opt servetest.Options) (*serve.Service, string) {
	t.Helper()
	cfg := servetest.Config(t.TempDir())
	cfg.Token = simToken
	comp, _, err := servetest.Components(opt)
	require.NoError(t, err)
	s, err := serve.New(cfg, comp)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, startLoopback(t, s)
}

// runPython runs script with the adapters on its path against url.
func runPython(t *testing.T, url, token, script string) string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skip("the adapters run with Debian's " + python + ", which is missing here")
	}
	dir, err := filepath.Abs("../adapters/python")
	require.NoError(t, err)
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "LM2LM_URL="+url, "LM2LM_TOKEN="+token, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return strings.TrimSpace(string(out))
}

// adapterCase is the batch the adapters score: two states, three
// completions each, interleaved as trainers lay groups out.
type adapterCase struct {
	ids, completions []string
}

func newAdapterCase(sr serve.StatesResponse) adapterCase {
	var c adapterCase
	for j := range 3 {
		for i, st := range sr.States {
			c.ids = append(c.ids, st.StateID)
			c.completions = append(c.completions, servetest.Completions(i, 3)[j])
		}
	}
	return c
}

// want scores the case directly on a twin service (same seed, same
// states) and returns the rewards in the case's order.
func (c adapterCase) want(t *testing.T) []float64 {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	states(t, srv.URL, 2, "")
	q := serve.ScoreRequest{Step: ip(0)}
	idx := map[string]int{}
	for k, id := range c.ids {
		g, ok := idx[id]
		if !ok {
			g = len(q.Groups)
			idx[id] = g
			q.Groups = append(q.Groups, serve.GroupCompletions{StateID: id})
		}
		q.Groups[g].Completions = append(q.Groups[g].Completions, c.completions[k])
	}
	code, b := post(t, srv.URL+"/v1/score", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.ScoreResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	var out []float64
	seen := map[string]int{}
	for _, id := range c.ids {
		out = append(out, *sr.Groups[idx[id]].Samples[seen[id]].Reward)
		seen[id]++
	}
	return out
}

func pyList(xs []string) string {
	b, _ := json.Marshal(xs)
	return string(b)
}

func TestAdapters(t *testing.T) {
	for _, c := range []struct {
		name, script string
		step         int // the step the service ends at
	}{
		{"trl", `
import asyncio, json, os, types
os.environ["LM2LM_GROUP_SIZE"] = "3"
from lm2lm_trl import lm2lm_reward
ids, comps = IDS, COMPS
# TRL's layout: each prompt's G completions in a row.
order = sorted(range(len(ids)), key=lambda k: (ids.index(ids[k]), k))
chat = [[{"role": "assistant", "content": comps[k]}] for k in order]
state = types.SimpleNamespace(global_step=1)
got = asyncio.run(lm2lm_reward(["p"] * len(ids), chat, state_id=[ids[k] for k in order], trainer_state=state))
out = [None] * len(ids)
for r, k in zip(got, order):
    out[k] = r
print(json.dumps(out))
`, 1},
		{"openrlhf", `
import json
from lm2lm_openrlhf import remote_reward
ids, comps = IDS, COMPS
prompts = ["PROMPT " + i + "\n" for i in ids]
print(json.dumps(remote_reward([p + c for p, c in zip(prompts, comps)], prompts, ids, group_size=3)))
`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, url := simService(t, servetest.Options{})
			code, b := post(t, url+"/v1/states", simToken, serve.StatesRequest{N: 2})
			require.Equal(t, http.StatusOK, code, string(b))
			var sr serve.StatesResponse
			require.NoError(t, json.Unmarshal(b, &sr))
			ac := newAdapterCase(sr)
			script := strings.NewReplacer("IDS", pyList(ac.ids), "COMPS", pyList(ac.completions)).Replace(c.script)
			out := runPython(t, url, simToken, script)
			var got []float64
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
			require.Equal(t, ac.want(t), got)
			in := s.Info()
			require.Equal(t, 2, in.Scored)
			require.Equal(t, c.step, in.Step)
		})
	}
}
