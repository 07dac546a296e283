package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// newService returns a service over the fakes in dir and its server.
func newService(t *testing.T, dir string, edit func(*serve.Config), opt servetest.Options) (*serve.Service, *httptest.Server, *servetest.Executor) {
	t.Helper()
	cfg := servetest.Config(dir)
	if edit != nil {
		edit(&cfg)
	}
	c, ex, err := servetest.Components(opt)
	require.NoError(t, err)
	s, err := serve.New(cfg, c)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv, ex
}

// post sends body to srv's path and returns the status and body.
func post(t *testing.T, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(http.MethodPost, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

func states(t *testing.T, url string, n int, split string) serve.StatesResponse {
	t.Helper()
	code, b := post(t, url+"/v1/states", "", serve.StatesRequest{RequestID: fmt.Sprintf("st-%s-%d", split, n), N: n, Split: split})
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	return sr
}

func score(t *testing.T, url, id string, step *int, sr serve.StatesResponse, k int) serve.ScoreResponse {
	t.Helper()
	q := serve.ScoreRequest{RequestID: id, Step: step}
	for i, st := range sr.States {
		q.Groups = append(q.Groups, serve.ScoreGroup{StateID: st.StateID, Completions: servetest.Completions(i+len(id), k)})
	}
	code, b := post(t, url+"/v1/score", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	var resp serve.ScoreResponse
	require.NoError(t, json.Unmarshal(b, &resp))
	return resp
}

func TestStatesArePrompts(t *testing.T) {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 5, "")
	require.Equal(t, serve.APIVersion, sr.API)
	require.Equal(t, "proposer-v1", sr.PromptVersion)
	require.Len(t, sr.States, 5)
	for _, st := range sr.States {
		require.Regexp(t, `^s-[0-9a-f]{16}$`, st.StateID)
		require.Equal(t, "train", st.Split)
		require.Len(t, st.Prompt, 2)
		require.Equal(t, "system", st.Prompt[0].Role)
		require.Contains(t, st.Prompt[1].Content, "Propose one change to the training recipe of task "+st.Task)
		require.Contains(t, st.Prompt[1].Content, `CARD {"mechanism":"lr-scale"`)
	}
	held := states(t, srv.URL, 3, "test")
	for _, st := range held.States {
		require.Equal(t, "test", st.Split)
		require.Contains(t, []string{"task-4", "task-5"}, st.Task)
	}
}

func TestScoreShapesGroups(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 4, "")
	resp := score(t, srv.URL, "a", nil, sr, 8)
	require.Equal(t, 0, resp.Step)
	require.Len(t, resp.Groups, 4)
	for gi, g := range resp.Groups {
		require.Equal(t, sr.States[gi].StateID, g.StateID)
		require.Len(t, g.Samples, 8)
		var sum, sumR float64
		for i, smp := range g.Samples {
			c := servetest.Completions(gi+1, 8)[i]
			switch {
			case strings.Contains(c, "rm -rf"):
				// METHOD.md §1 Reward 2: an unparseable answer earns −c.
				require.False(t, smp.Valid)
				require.Equal(t, -6.0, smp.Reward)
				require.Contains(t, smp.Reason, "no JSON object")
			case strings.Contains(c, `"none"`):
				require.True(t, smp.Valid)
				require.Equal(t, "none", smp.Mechanism)
			default:
				require.True(t, smp.Valid, smp.Reason)
			}
			sum += smp.Advantage
			sumR += smp.Reward
		}
		require.True(t, g.Kept, "mixed valid and invalid samples are informative")
		// METHOD.md §1 Policy optimisation: mean-centred advantages sum
		// to zero and are the rewards minus their mean.
		require.InDelta(t, 0, sum, 1e-9)
		for _, smp := range g.Samples {
			require.InDelta(t, smp.Reward-sumR/8, smp.Advantage, 1e-9)
		}
	}
	require.Equal(t, 4, resp.Kept)
	in := s.Info()
	require.Equal(t, 1, in.Scored)
	require.Equal(t, 4, in.Candidates)
}

func TestCalibrationAtItsStep(t *testing.T) {
	// Steps counted from score requests: the third request (step 2)
	// first runs calibration point 0 (3 runs, greedy top-B over the 8
	// groups scored so far), then is scored under M_1.
	s, srv, ex := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 4, "")
	score(t, srv.URL, "r0", nil, sr, 8)
	score(t, srv.URL, "r1", nil, sr, 8)
	require.Zero(t, ex.Runs())
	resp := score(t, srv.URL, "r2", nil, sr, 8)
	require.Equal(t, 2, resp.Step)
	in := s.Info()
	require.Equal(t, 1, in.Calibrations)
	require.Equal(t, 24+3, in.Evidence)
	require.Equal(t, 3, in.RealRuns)
	require.EqualValues(t, 3, ex.Runs())
	require.Equal(t, 4, in.Candidates, "the candidates start again after the calibration")

	// An explicit step jumps to point 1.
	code, b := post(t, srv.URL+"/v1/advance", "", serve.AdvanceRequest{RequestID: "adv", Step: 9})
	require.Equal(t, http.StatusOK, code, string(b))
	var ar serve.AdvanceResponse
	require.NoError(t, json.Unmarshal(b, &ar))
	require.Equal(t, 9, ar.Step)
	require.Len(t, ar.Calibrations, 1)
	require.Equal(t, 3, ar.Calibrations[0].Executed)
	require.Equal(t, 2, s.Info().Calibrations)

	mon := s.Monitors()
	require.True(t, mon.Calibrated)
	require.NotNil(t, mon.Gap)
	require.InDelta(t, -*mon.DeltaM, *mon.Gap, 1e-12)
}

func TestRepeatedRequestIsAnsweredOnce(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 3, "")
	again := states(t, srv.URL, 3, "")
	require.Equal(t, sr, again, "a repeated states request draws nothing new")
	q := serve.ScoreRequest{RequestID: "same", Groups: []serve.ScoreGroup{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 4)}}}
	_, b1 := post(t, srv.URL+"/v1/score", "", q)
	_, b2 := post(t, srv.URL+"/v1/score", "", q)
	require.Equal(t, string(b1), string(b2))
	require.Equal(t, 1, s.Info().Scored)
}

func TestRestartResumesState(t *testing.T) {
	dir := t.TempDir()
	s, srv, _ := newService(t, dir, nil, servetest.Options{})
	sr := states(t, srv.URL, 4, "")
	for k := range 3 {
		score(t, srv.URL, fmt.Sprintf("r%d", k), nil, sr, 8)
	}
	want := s.Info()
	srv.Close()
	require.NoError(t, s.Close())
	s2, srv2, ex2 := newService(t, dir, nil, servetest.Options{})
	require.Equal(t, want, s2.Info())
	// A repeated request after the restart is answered from its first
	// result; the world model and the executor are not asked.
	score(t, srv2.URL, "r2", nil, sr, 8)
	require.Equal(t, want, s2.Info())
	require.Zero(t, ex2.Runs())
}

func TestRequestErrors(t *testing.T) {
	_, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.MaxBody, c.MaxGroups, c.MaxCompletions = 4096, 2, 3 }, servetest.Options{})
	sr := states(t, srv.URL, 3, "")
	id := sr.States[0].StateID
	for _, c := range []struct {
		name, path string
		body       any
		code       int
		errCode    string
	}{
		{"unknown state", "/v1/score", serve.ScoreRequest{Groups: []serve.ScoreGroup{{StateID: "s-nope", Completions: []string{"x"}}}}, 400, "unknown_state"},
		{"bad json", "/v1/score", []byte(`{"groups": [`), 400, "bad_json"},
		{"unknown field", "/v1/score", []byte(`{"groupz": []}`), 400, "bad_json"},
		{"no groups", "/v1/score", serve.ScoreRequest{}, 400, "empty"},
		{"too many groups", "/v1/score", serve.ScoreRequest{Groups: []serve.ScoreGroup{{StateID: id, Completions: []string{"a"}}, {StateID: id, Completions: []string{"a"}}, {StateID: id, Completions: []string{"a"}}}}, 413, "too_many_groups"},
		{"too many completions", "/v1/score", serve.ScoreRequest{Groups: []serve.ScoreGroup{{StateID: id, Completions: []string{"a", "b", "c", "d"}}}}, 413, "too_many_completions"},
		{"body too large", "/v1/score", []byte(`{"groups": [{"state_id": "` + strings.Repeat("x", 5000) + `"}]}`), 413, "body_too_large"},
		{"negative step", "/v1/advance", serve.AdvanceRequest{Step: -1}, 400, "bad_step"},
		{"bad split", "/v1/states", serve.StatesRequest{N: 1, Split: "dev"}, 400, "bad_split"},
		{"too many states", "/v1/states", serve.StatesRequest{N: 1 << 20}, 400, "bad_count"},
		{"reward without labels", "/get_reward", serve.RewardRequest{Query: []string{"a"}}, 400, "bad_labels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := post(t, srv.URL+c.path, "", c.body)
			require.Equal(t, c.code, code, string(b))
			var e struct {
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.Unmarshal(b, &e), string(b))
			require.Equal(t, c.errCode, e.Error.Code)
			require.NotEmpty(t, e.Error.Message)
		})
	}
}

func TestTokenAndBind(t *testing.T) {
	cfg := servetest.Config(t.TempDir())
	cfg.Addr = "0.0.0.0:8080"
	c, _, err := servetest.Components(servetest.Options{})
	require.NoError(t, err)
	_, err = serve.New(cfg, c)
	require.ErrorIs(t, err, serve.ErrConfig, "a non-loopback address without a token is refused")
	require.True(t, serve.Loopback("127.0.0.1:1"))
	require.True(t, serve.Loopback("[::1]:1"))
	require.True(t, serve.Loopback("localhost:1"))
	require.False(t, serve.Loopback(":8080"), "all interfaces is not loopback")

	_, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.Token = "sesame" }, servetest.Options{})
	code, _ := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{N: 1})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(t, srv.URL+"/v1/states", "wrong", serve.StatesRequest{N: 1})
	require.Equal(t, http.StatusUnauthorized, code)
	code, b := post(t, srv.URL+"/v1/states", "sesame", serve.StatesRequest{N: 1})
	require.Equal(t, http.StatusOK, code, string(b))
}

func TestBusyBeyondMaxInFlight(t *testing.T) {
	dir := t.TempDir()
	arm := filepath.Join(dir, "armed")
	_, srv, _ := newService(t, filepath.Join(dir, "state"), func(c *serve.Config) { c.MaxInFlight = 1 },
		servetest.Options{PredictDelay: 200 * time.Millisecond, PredictArm: arm})
	sr := states(t, srv.URL, 1, "")
	done := make(chan int)
	go func() {
		code, _ := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Groups: []serve.ScoreGroup{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 2)}}})
		done <- code
	}()
	for {
		if _, err := os.Stat(arm); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, b := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{N: 1, RequestID: "other"})
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))
	require.Contains(t, string(b), `"busy"`)
	require.Equal(t, http.StatusOK, <-done)
}

func TestOpenRLHFReward(t *testing.T) {
	// A group is the completions of one label (state id) in the request;
	// query is the prompt and the response, the prompt is cut off.
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 2, "")
	var q serve.RewardRequest
	for i := range 6 {
		st := sr.States[i%2]
		c := servetest.Completions(i/2, 3)[i/2]
		q.Prompts = append(q.Prompts, "PROMPT "+st.StateID)
		q.Query = append(q.Query, "PROMPT "+st.StateID+c)
		q.Labels = append(q.Labels, st.StateID)
	}
	code, b := post(t, srv.URL+"/get_reward", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	var rr serve.RewardResponse
	require.NoError(t, json.Unmarshal(b, &rr))
	require.Len(t, rr.Rewards, 6)
	require.Equal(t, rr.Rewards, rr.Scores)
	require.Contains(t, rr.ExtraLogs, "lm2lm_mean_reward")
	for _, r := range rr.Rewards {
		require.False(t, math.IsNaN(r))
		require.LessOrEqual(t, math.Abs(r), 6+1.0)
	}
}

func TestDatasetAndMetrics(t *testing.T) {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	code, b := post(t, srv.URL+"/v1/dataset", "", serve.StatesRequest{RequestID: "ds", N: 3})
	require.Equal(t, http.StatusOK, code, string(b))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 3)
	var row serve.DatasetRow
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &row))
	require.Equal(t, row.StateID, row.ExtraInfo["state_id"])
	require.Equal(t, row.StateID, row.Label)
	require.Equal(t, row.StateID, row.RewardModel["ground_truth"])
	require.Equal(t, "lm2lm", row.DataSource)
	require.Len(t, row.Prompt, 2)

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(m), `lm2lm_serve_requests_total{code="200",route="dataset"} 1`)
	require.Contains(t, string(m), "lm2lm_evidence_records 24")
}

func TestEvaluateRunsForReal(t *testing.T) {
	_, srv, ex := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 2, "test")
	q := serve.ScoreRequest{RequestID: "ev"}
	for _, st := range sr.States {
		q.Groups = append(q.Groups, serve.ScoreGroup{StateID: st.StateID, Completions: []string{
			`{"mechanism": "lr-scale", "params": {"factor": "2"}}`, `{"mechanism": "lr-scale", "params": {"factor": "2"}}`, "junk"}})
	}
	code, b := post(t, srv.URL+"/v1/evaluate", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	var er serve.EvalResponse
	require.NoError(t, json.Unmarshal(b, &er))
	require.Len(t, er.Groups, 2)
	g := er.Groups[0][0]
	require.True(t, g.Measured)
	// buildertest.Quadratic: factor 2 costs 0.1·(2−1)² and the change
	// gains 0.05, less seed noise σ_e·z(7).
	require.InDelta(t, 0.05-0.1, g.Gain, 0.0041)
	require.Equal(t, er.Groups[0][0], er.Groups[0][1], "a duplicate is run once")
	require.False(t, er.Groups[0][2].Valid)
	require.LessOrEqual(t, ex.Runs(), int64(2))
}

func TestServiceContext(t *testing.T) {
	// A cancelled request context stops the world-model calls with an
	// error and changes nothing.
	dir := t.TempDir()
	s, srv, _ := newService(t, dir, nil, servetest.Options{PredictDelay: time.Second})
	sr := states(t, srv.URL, 1, "")
	before := s.Info()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Score(ctx, "c", -1, []serve.ScoreGroup{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 2)}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, before, s.Info())
}

func TestConcurrentRepeatsWaitForTheFirst(t *testing.T) {
	// Two copies of one request in flight at once: the second waits for
	// the first and gets its answer; the rollout is scored once.
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{PredictDelay: 20 * time.Millisecond})
	sr := states(t, srv.URL, 2, "")
	q := serve.ScoreRequest{RequestID: "twin", Groups: []serve.ScoreGroup{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 4)}}}
	out := make(chan string, 2)
	for range 2 {
		go func() {
			code, b := post(t, srv.URL+"/v1/score", "", q)
			out <- fmt.Sprint(code, string(b))
		}()
	}
	a, b := <-out, <-out
	require.Equal(t, a, b)
	require.True(t, strings.HasPrefix(a, "200"), a)
	require.Equal(t, 1, s.Info().Scored)
}
