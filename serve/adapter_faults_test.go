package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve/servetest"
)

// simOptions are the fakes the path tests run the simulators over.
func simOptions() servetest.Options { return servetest.Options{} }

// servetestCompletions is the pool of completions the simulated policies
// draw from.
func servetestCompletions() []string { return servetest.Completions(0, 8) }

// Transport faults a faultProxy injects on the requests it matches. The
// status faults answer without forwarding (nothing applied) except 502,
// which forwards first (applied, answer lost), as do reset (the
// connection closed after the service answered) and late (the answer held
// past the client's attempt timeout).
var allFaults = []string{"408", "429", "500", "502", "503", "504", "reset", "late"}

// lateHold is how long a "late" fault holds an answer: longer than the
// attempt timeout the fault tests give the clients (faultEnv).
const lateHold = 1500 * time.Millisecond

// faultProxy stands between an adapter and the service on a loopback port
// and injects transport faults into the requests whose path starts with
// match: first those of plan, one per request, then always (when set) on
// every further one.
type faultProxy struct {
	match  string
	always string
	proxy  *httputil.ReverseProxy

	mu       sync.Mutex
	plan     []string
	injected []string
	matched  int
}

func newFaultProxy(t *testing.T, target, match string, plan []string, always string) (*faultProxy, string) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &faultProxy{match: match, always: always, plan: slices.Clone(plan), proxy: httputil.NewSingleHostReverseProxy(u)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: p}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p, "http://" + ln.Addr().String()
}

func (p *faultProxy) next(r *http.Request) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !strings.HasPrefix(r.URL.Path, p.match) {
		return ""
	}
	p.matched++
	f := p.always
	if len(p.plan) > 0 {
		f, p.plan = p.plan[0], p.plan[1:]
	}
	if f != "" {
		p.injected = append(p.injected, f)
	}
	return f
}

// Injected returns the faults injected so far, in order.
func (p *faultProxy) Injected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.injected)
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := p.next(r)
	switch f {
	case "":
		p.proxy.ServeHTTP(w, r)
	case "502", "reset", "late":
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r) // the service applies the request
		switch f {
		case "502":
			writeFault(w, http.StatusBadGateway)
		case "reset":
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = c.Close()
			}
		case "late":
			time.Sleep(lateHold)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = io.Copy(w, rec.Body)
		}
	default:
		var code int
		_, _ = fmt.Sscan(f, &code)
		_, _ = io.Copy(io.Discard, r.Body)
		writeFault(w, code)
	}
}

func writeFault(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error": {"code": "injected", "message": "injected %d"}}`, code)
}

// faultEnv is the clients' retry policy for the fault tests: short
// attempts and backoff, so that a held answer times out and a retry
// comes at once.
func faultEnv(extra map[string]string) map[string]string {
	env := map[string]string{"LM2LM_ATTEMPT_TIMEOUT_S": "1", "LM2LM_DEADLINE_S": "30", "LM2LM_BACKOFF_S": "0.01",
		"LM2LM_BACKOFF_CAP_S": "0.1"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// pythonRun runs script with the adapters on its path against url with
// env, and returns its output and error (a failing script is data here).
func pythonRun(t *testing.T, url string, env map[string]string, script string) (string, error) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skip("the adapters run with Debian's " + python + ", which is missing here")
	}
	dir, err := filepath.Abs("../adapters/python")
	require.NoError(t, err)
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "LM2LM_URL="+url, "LM2LM_TOKEN="+simToken, "PYTHONDONTWRITEBYTECODE=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	if err != nil {
		return strings.TrimSpace(out.String()), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// simScript runs the simulator name (in adapters/python/sim) with argv.
func simScript(t *testing.T, name string, argv ...string) string {
	t.Helper()
	path, err := filepath.Abs("../adapters/python/sim/" + name)
	require.NoError(t, err)
	a, _ := json.Marshal(append([]string{path}, argv...))
	return fmt.Sprintf("import json, runpy, sys\nsys.argv = json.loads(%q)\nrunpy.run_path(%q, run_name=\"__main__\")\n", a, path)
}

// lastLine is a simulator's JSON answer: its last line of output.
func lastLine(out string) string {
	if k := strings.LastIndex(out, "\n"); k >= 0 {
		return out[k+1:]
	}
	return out
}

func rewardText(r *float64) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprint(*r)
}

// simCase is one simulator: how to run it against a service with a
// fresh dataset, and what a run gave, as sorted "step|state|completion|
// reward" lines (a canonical form that two runs of the same seed share
// whatever the order their samples arrived in).
type simCase struct {
	name string
	run  func(t *testing.T, url string, env map[string]string) (string, error)
	// canon returns the run's rewards, and the samples it trained without
	// a reward or reports as failed (errors).
	canon func(t *testing.T, out string) (lines []string, errors []string)
}

func simCases() []simCase {
	return []simCase{
		{
			name: "verl",
			run: func(t *testing.T, url string, env map[string]string) (string, error) {
				comps := filepath.Join(t.TempDir(), "completions.json")
				b, _ := json.Marshal(servetestCompletions())
				require.NoError(t, os.WriteFile(comps, b, 0o600))
				args := append([]string{"--completions", comps, "--flat-every", "3"}, verlRecipe(t)...)
				args = append(args, "trainer.rollout_data_dir="+filepath.Join(t.TempDir(), "rollouts"),
					"data.train_batch_size=3", "trainer.total_training_steps=3", "reward.num_workers=2",
					"actor_rollout_ref.rollout.agent.num_workers=2")
				return pythonRun(t, url, env, simScript(t, "verl_sim.py", args...))
			},
			canon: func(t *testing.T, out string) ([]string, []string) {
				var res verlSimOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &res), out)
				var lines, errs []string
				for _, st := range res.Steps {
					for _, g := range st.Groups {
						for _, smp := range g.Samples {
							lines = append(lines, fmt.Sprintf("%d|%s|%s|%s", st.Step, g.StateID, smp.Completion, rewardText(smp.RewardScore)))
							if smp.Error != "" {
								errs = append(errs, smp.Error)
							}
						}
					}
				}
				return lines, errs
			},
		},
		{
			name: "trl",
			run: func(t *testing.T, url string, env map[string]string) (string, error) {
				code, b := post(t, url+"/v1/states", simToken, map[string]any{"n": 4})
				require.Equal(t, http.StatusOK, code, string(b))
				var sr struct {
					States []map[string]any `json:"states"`
				}
				require.NoError(t, json.Unmarshal(b, &sr))
				spec, _ := json.Marshal(map[string]any{"config_py": trlRecipe(t, "GRPOConfig"), "states": sr.States,
					"pool": servetestCompletions(), "world_size": 2,
					"config": map[string]any{"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1, "max_steps": 3}})
				dir, err := filepath.Abs("../adapters/python/sim")
				require.NoError(t, err)
				a, _ := json.Marshal([]string{"trl_sim.py", "grpo", string(spec)})
				d, _ := json.Marshal(dir)
				return pythonRun(t, url, env, fmt.Sprintf("import sys\nsys.path.insert(0, %s)\nimport trl_sim\ntrl_sim.main(%s)\n", d, a))
			},
			canon: func(t *testing.T, out string) ([]string, []string) {
				var r trlRun
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &r), out)
				var lines []string
				for _, smp := range r.Samples {
					lines = append(lines, fmt.Sprintf("%d|%s|%s|%s", smp.Step, smp.StateID, smp.Completion, rewardText(smp.Returned)))
				}
				return lines, r.Errors
			},
		},
		{
			name: "openrlhf",
			run: func(t *testing.T, url string, env map[string]string) (string, error) {
				data, _ := simDataset(t, url, simToken, 3)
				return pythonRun(t, url, env, simScript(t, "openrlhf_sim.py",
					openrlhfArgs(data, "--algo.dynamic_filtering_enable", "--sim.steps", "3", "--sim.flat_every", "3")...))
			},
			canon: func(t *testing.T, out string) ([]string, []string) {
				var got openrlhfOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
				var lines, errs []string
				for _, st := range got.Steps {
					for _, smp := range append(append([]openrlhfSample{}, st.Kept...), st.Dropped...) {
						lines = append(lines, fmt.Sprintf("%d|%s|%s|%s", st.Step, smp.Label, smp.Completion, rewardText(smp.Reward)))
						if smp.Error != "" {
							errs = append(errs, smp.Error)
						}
					}
				}
				return lines, errs
			},
		},
		{
			name: "slime",
			run: func(t *testing.T, url string, env map[string]string) (string, error) {
				data, _ := simDataset(t, url, simToken, 4)
				return pythonRun(t, url, env, simScript(t, "slime_sim.py",
					slimeArgs(data, "--num-rollout", "3", "--sim.flat_every", "3")...))
			},
			canon: func(t *testing.T, out string) ([]string, []string) {
				var got slimeOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
				var lines, errs []string
				for _, r := range got.Rollouts {
					if r.Error != "" {
						errs = append(errs, r.Error)
					}
					for _, g := range r.Groups {
						for _, smp := range g.Samples {
							lines = append(lines, fmt.Sprintf("%d|%s|%s|%s", r.RolloutID, g.Label, smp.Response, rewardText(smp.LM2LM.Reward)))
						}
					}
				}
				return lines, errs
			},
		},
		{
			name: "prime-rl",
			run: func(t *testing.T, url string, env map[string]string) (string, error) {
				data, _ := simDataset(t, url, simToken, 3)
				return pythonRun(t, url, env, simScript(t, "primerl_sim.py", "--config", primerlConfig(t, data, 3, 3*primerlG, primerlG)))
			},
			canon: func(t *testing.T, out string) ([]string, []string) {
				var got primerlOut
				require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &got), out)
				var lines []string
				for _, st := range got.Steps {
					for _, g := range st.Groups {
						for _, tr := range g.Traces {
							lines = append(lines, fmt.Sprintf("%d|%s|%s|%s", st.Step, g.StateID, tr.Completion, rewardText(tr.Reward)))
						}
					}
				}
				return lines, nil
			},
		},
	}
}

// TestSimulatorsTransportFaults runs every simulator through a proxy that
// injects each transport fault once into its score requests (refused,
// applied then lost, held past the attempt timeout) and compares every
// reward with the same run against a twin service without faults: the
// retries must neither lose a sample nor score one twice. Then every
// score request fails for good (a 400, or 503s past the deadline): the
// simulated trainer must end without a reward, never with a number.
func TestSimulatorsTransportFaults(t *testing.T) {
	for _, c := range simCases() {
		t.Run(c.name, func(t *testing.T) {
			s, target := simService(t, simOptions())
			proxy, purl := newFaultProxy(t, target, "/v1/score", allFaults, "")
			out, err := c.run(t, purl, faultEnv(map[string]string{"LM2LM_SYNC_CALIBRATION": "1", "LM2LM_WAIT_CALIBRATION": "1"}))
			require.NoError(t, err)
			got, errs := c.canon(t, out)
			require.Empty(t, errs)
			require.Equal(t, allFaults, proxy.Injected(), "every fault was injected")

			twin, turl := simService(t, simOptions())
			wout, err := c.run(t, turl, faultEnv(map[string]string{"LM2LM_SYNC_CALIBRATION": "1", "LM2LM_WAIT_CALIBRATION": "1"}))
			require.NoError(t, err)
			want, _ := c.canon(t, wout)
			slices.Sort(got)
			slices.Sort(want)
			require.NotEmpty(t, want)
			require.Equal(t, want, got)
			require.Equal(t, twin.Info().Scored, s.Info().Scored)
			require.Zero(t, s.Info().Failed)

			for _, fail := range []struct{ always, deadline, want string }{{"400", "30", "400"}, {"503", "1", "deadline"}} {
				s, target := simService(t, simOptions())
				_, purl := newFaultProxy(t, target, "/v1/score", nil, fail.always)
				out, err := c.run(t, purl, faultEnv(map[string]string{"LM2LM_DEADLINE_S": fail.deadline}))
				if err != nil {
					// The trainer stopped (prime-rl's orchestrator, a raising step).
					require.Contains(t, err.Error(), fail.want)
					continue
				}
				lines, errs := c.canon(t, out)
				require.NotEmpty(t, errs, "a lasting %s must reach the trainer as an error", fail.always)
				require.Contains(t, strings.Join(errs, "\n"), fail.want)
				for _, l := range lines {
					require.True(t, strings.HasSuffix(l, "|none"), "a reward without a scored group: %s", l)
				}
				require.Zero(t, s.Info().Scored)
			}
		})
	}
}
