package serve_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/bearer"
	"github.com/lm2lm/lm2lm/records"
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
	b, ok := body.([]byte)
	if !ok {
		js, err := json.Marshal(body)
		require.NoError(t, err)
		b = js
	}
	return bearer.Call(t, http.MethodPost, url, token, b)
}

func states(t *testing.T, url string, n int, split string) serve.StatesResponse {
	t.Helper()
	code, b := post(t, url+"/v1/states", "", serve.StatesRequest{RequestID: fmt.Sprintf("st-%s-%d", split, n), N: n, Split: split})
	require.Equal(t, http.StatusOK, code, string(b))
	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &sr))
	return sr
}

func ip(i int) *int { return &i }

// score sends every state of sr as a whole group of k completions at step.
func score(t *testing.T, url, id string, step int, sr serve.StatesResponse, k int) serve.ScoreResponse {
	t.Helper()
	q := serve.ScoreRequest{RequestID: id, Step: ip(step)}
	for i, st := range sr.States {
		q.Groups = append(q.Groups, serve.GroupCompletions{StateID: st.StateID, Group: fmt.Sprintf("%s-%d", id, i), Completions: servetest.Completions(i+len(id), k)})
	}
	code, b := post(t, url+"/v1/score", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	var resp serve.ScoreResponse
	require.NoError(t, json.Unmarshal(b, &resp))
	return resp
}

func errCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal(b, &e), string(b))
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Code
}

func TestStatesArePrompts(t *testing.T) {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 64, "")
	require.Equal(t, serve.APIVersion, sr.API)
	require.Equal(t, "proposer-v1", sr.PromptVersion)
	require.Len(t, sr.States, 64)
	ids := map[string]bool{}
	for _, st := range sr.States {
		require.Regexp(t, `^s-[0-9a-f]{16}$`, st.StateID)
		require.Equal(t, "train", st.Split)
		require.Len(t, st.Prompt, 2)
		require.Equal(t, "system", st.Prompt[0].Role)
		require.Contains(t, st.Prompt[1].Content, "Propose one change to the training recipe of task "+st.Task)
		require.Contains(t, st.Prompt[1].Content, `CARD {"mechanism":"lr-scale"`)
		ids[st.StateID] = true
	}
	// Four tasks and an empty pool draw the same state many times; every
	// row still has its own id, so rows never merge into one group.
	require.Len(t, ids, 64)
	held := states(t, srv.URL, 3, "test")
	for _, st := range held.States {
		require.Equal(t, "test", st.Split)
		require.Contains(t, []string{"task-4", "task-5"}, st.Task)
	}
}

func TestScoreShapesGroups(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 4, "")
	resp := score(t, srv.URL, "a", 0, sr, 8)
	require.Equal(t, 0, resp.Step)
	require.Len(t, resp.Groups, 4)
	for gi, g := range resp.Groups {
		require.Equal(t, sr.States[gi].StateID, g.StateID)
		require.Len(t, g.Samples, 8)
		var sum, sumR float64
		for i, smp := range g.Samples {
			require.NotNil(t, smp.Reward)
			require.Equal(t, i, smp.Index)
			require.Equal(t, 8, smp.Received)
			c := servetest.Completions(gi+1, 8)[i]
			switch {
			case strings.Contains(c, "rm -rf"):
				// METHOD.md §1 Reward 2: an unparseable answer earns −c.
				require.False(t, smp.Valid)
				require.Equal(t, -6.0, *smp.Reward)
				require.Contains(t, smp.Reason, "no JSON object")
			case strings.Contains(c, `"none"`):
				require.True(t, smp.Valid)
				require.Equal(t, "none", smp.Mechanism)
			default:
				require.True(t, smp.Valid, smp.Reason)
			}
			sum += smp.Advantage
			sumR += *smp.Reward
		}
		require.True(t, g.Kept, "mixed valid and invalid samples are informative")
		// METHOD.md §1 Policy optimisation: mean-centred advantages sum
		// to zero and are the rewards minus their mean.
		require.InDelta(t, 0, sum, 1e-9)
		for _, smp := range g.Samples {
			require.InDelta(t, *smp.Reward-sumR/8, smp.Advantage, 1e-9)
		}
	}
	require.Equal(t, 4, resp.Kept)
	in := s.Info()
	require.Equal(t, 4, in.Scored)
	require.Equal(t, 4, in.Candidates)
}

// groupAnswers scores one group of 8 on a fresh service, sent as send
// says, and returns every sample's answer in index order.
func groupAnswers(t *testing.T, send func(t *testing.T, url, stateID string, texts []string) []serve.SampleScore) []serve.SampleScore {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{PredictDelay: time.Millisecond})
	sr := states(t, srv.URL, 2, "")
	texts := servetest.Completions(3, 8)
	texts[6] = texts[0] // a duplicate: its penalty reads the whole group
	out := send(t, srv.URL, sr.States[1].StateID, texts)
	for i := range out {
		out[i].Group = ""
	}
	return out
}

func postSamples(t *testing.T, url string, step int, smps []serve.SampleCompletion) []serve.SampleScore {
	code, b := post(t, url+"/v1/score", "", serve.ScoreRequest{Step: ip(step), Samples: smps})
	require.Equal(t, http.StatusOK, code, string(b))
	var r serve.ScoreResponse
	require.NoError(t, json.Unmarshal(b, &r))
	return r.Samples
}

func TestSameAnswersHoweverTheGroupIsSplit(t *testing.T) {
	whole := groupAnswers(t, func(t *testing.T, url, id string, texts []string) []serve.SampleScore {
		code, b := post(t, url+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Groups: []serve.GroupCompletions{{StateID: id, Group: "g", Completions: texts}}})
		require.Equal(t, http.StatusOK, code, string(b))
		var r serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &r))
		return r.Groups[0].Samples
	})
	// verl's Reward Loop: one concurrent call per sample, in any order.
	perSample := groupAnswers(t, func(t *testing.T, url, id string, texts []string) []serve.SampleScore {
		out := make([]serve.SampleScore, len(texts))
		var wg sync.WaitGroup
		for i := len(texts) - 1; i >= 0; i-- {
			wg.Go(func() {
				out[i] = postSamples(t, url, 0, []serve.SampleCompletion{{Group: "uid-1", StateID: id, GroupSize: 8, Index: ip(i), Completion: texts[i]}})[0]
			})
		}
		wg.Wait()
		return out
	})
	// TRL on two processes: the group arrives in two halves.
	split := groupAnswers(t, func(t *testing.T, url, id string, texts []string) []serve.SampleScore {
		out := make([]serve.SampleScore, len(texts))
		var wg sync.WaitGroup
		for half := range 2 {
			wg.Go(func() {
				var smps []serve.SampleCompletion
				for i := half * 4; i < half*4+4; i++ {
					smps = append(smps, serve.SampleCompletion{Group: "7", StateID: id, GroupSize: 8, Index: ip(i), Completion: texts[i]})
				}
				copy(out[half*4:], postSamples(t, url, 0, smps))
			})
		}
		wg.Wait()
		return out
	})
	require.Equal(t, whole, perSample)
	require.Equal(t, whole, split)
	var lo, hi float64
	for _, w := range whole {
		lo, hi = min(lo, *w.Reward), max(hi, *w.Reward)
	}
	require.Less(t, lo, hi, "an informative group")
	require.True(t, whole[0].Kept)
}

func TestPartialGroupAtItsDeadline(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.GroupDeadline = 150 * time.Millisecond }, servetest.Options{})
	sr := states(t, srv.URL, 1, "")
	id := sr.States[0].StateID
	texts := servetest.Completions(0, 8)
	var smps []serve.SampleCompletion
	for i := range 3 {
		smps = append(smps, serve.SampleCompletion{Group: "g", StateID: id, GroupSize: 8, Index: ip(i), Completion: texts[i]})
	}
	got := postSamples(t, srv.URL, 0, smps)
	for _, smp := range got {
		require.True(t, smp.Partial)
		require.Equal(t, 3, smp.Received)
		require.NotNil(t, smp.Reward)
	}
	// A sample after the deadline gets no reward and says why.
	late := postSamples(t, srv.URL, 0, []serve.SampleCompletion{{Group: "g", StateID: id, GroupSize: 8, Index: ip(5), Completion: texts[5]}})
	require.Nil(t, late[0].Reward)
	require.Contains(t, late[0].FailureReason, "late")
	// A retried sample gets its first answer.
	again := postSamples(t, srv.URL, 0, smps[:1])
	require.Equal(t, got[0], again[0])
	require.Equal(t, 1, s.Info().Scored)
}

func TestStepRules(t *testing.T) {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 1, "")
	g := []serve.GroupCompletions{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 2)}}
	for _, c := range []struct {
		name string
		body any
		code int
		err  string
	}{
		{"no step", serve.ScoreRequest{Groups: g}, 400, "no_step"},
		{"step beyond the cap", []byte(`{"step": 9223372036854775807, "groups": [{"state_id": "x", "completions": ["a"]}]}`), 400, "bad_step"},
		{"step jump", serve.ScoreRequest{Step: ip(1000), Groups: g}, 400, "step_jump"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := post(t, srv.URL+"/v1/score", "", c.body)
			require.Equal(t, c.code, code, string(b))
			require.Equal(t, c.err, errCode(t, b))
		})
	}
	code, b := post(t, srv.URL+"/v1/advance", "", serve.AdvanceRequest{Step: 1})
	require.Equal(t, http.StatusOK, code, string(b))
	code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Groups: g})
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Equal(t, "stale_step", errCode(t, b))
}

func TestStepCountingIsOptIn(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.CountSteps = true }, servetest.Options{})
	sr := states(t, srv.URL, 1, "")
	for k := range 3 {
		code, b := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{RequestID: fmt.Sprint(k),
			Groups: []serve.GroupCompletions{{StateID: sr.States[0].StateID, Completions: servetest.Completions(k, 2)}}})
		require.Equal(t, http.StatusOK, code, string(b))
		var r serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &r))
		require.Equal(t, k, r.Step)
	}
	require.Equal(t, 3, s.Info().Requests)
}

func waitCalibration(t *testing.T, s *serve.Service, u int, state ...string) serve.CalibrationStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cs := s.Calibrations().Calibrations
		for _, st := range state {
			if len(cs) > u && cs[u].State == st {
				return cs[u]
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("calibration %d never reached %s: %+v", u, state, s.Calibrations())
	return serve.CalibrationStatus{}
}

func TestCalibrationOffTheScoringPath(t *testing.T) {
	// The runs of point 0 (step 2, 3 runs) take a while; scoring goes on
	// under M_0 meanwhile, and M_1 takes effect at the first step after
	// the runs are done.
	release := make(chan struct{})
	s, srv, ex := newService(t, t.TempDir(), nil, servetest.Options{RunGate: release})
	sr := states(t, srv.URL, 4, "")
	score(t, srv.URL, "r0", 0, sr, 8)
	score(t, srv.URL, "r1", 1, sr, 8)
	code, b := post(t, srv.URL+"/v1/advance", "", serve.AdvanceRequest{Step: 2})
	require.Equal(t, http.StatusOK, code, string(b))
	var ar serve.AdvanceResponse
	require.NoError(t, json.Unmarshal(b, &ar))
	require.Len(t, ar.Calibrations, 1)
	require.Equal(t, serve.CalibrationStatus{Point: 0, Step: 2, Budget: 3, Runs: 3, State: serve.CalRunning}, ar.Calibrations[0])
	require.True(t, s.Info().Calibrating)

	// Scoring while the runs are blocked: M is still M_0.
	resp := score(t, srv.URL, "r2", 2, sr, 8)
	require.Equal(t, 4, resp.Kept)
	require.Equal(t, 24, s.Info().Evidence)
	close(release)
	waitCalibration(t, s, 0, serve.CalReady)
	score(t, srv.URL, "r2b", 2, sr, 8)
	require.Equal(t, 24, s.Info().Evidence, "the runs apply at the next step, not within step 2")

	score(t, srv.URL, "r3", 3, sr, 8)
	in := s.Info()
	require.Equal(t, 24+3, in.Evidence)
	require.Equal(t, 1, in.Calibrations)
	require.Equal(t, 3, in.RealRuns)
	require.EqualValues(t, 3, ex.Runs())
	st := waitCalibration(t, s, 0, serve.CalApplied)
	require.Equal(t, 3, *st.EffectiveStep)
	require.Equal(t, 3, st.Result.Executed)
	// The groups scored at step 2 while the runs went are the next
	// point's candidates, with step 3's.
	require.Equal(t, 8+4, in.Candidates)

	mon := s.Monitors()
	require.True(t, mon.Calibrated)
	require.NotNil(t, mon.Gap)
	require.InDelta(t, -*mon.DeltaM, *mon.Gap, 1e-12)

	// A retried advance answers the same status.
	code, b2 := post(t, srv.URL+"/v1/advance", "", serve.AdvanceRequest{Step: 3})
	require.Equal(t, http.StatusOK, code)
	var ar2 serve.AdvanceResponse
	require.NoError(t, json.Unmarshal(b2, &ar2))
	require.Equal(t, s.Calibrations(), ar2)
}

func TestRequestIDReusedWithAnotherBody(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 2, "")
	q := serve.ScoreRequest{RequestID: "same", Step: ip(0), Groups: []serve.GroupCompletions{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 4)}}}
	_, b1 := post(t, srv.URL+"/v1/score", "", q)
	_, b2 := post(t, srv.URL+"/v1/score", "", q)
	require.Equal(t, string(b1), string(b2))
	require.Equal(t, 1, s.Info().Scored)
	q.Groups[0].StateID = sr.States[1].StateID
	code, b := post(t, srv.URL+"/v1/score", "", q)
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Equal(t, "request_id_reused", errCode(t, b))
	require.Equal(t, 1, s.Info().Scored)
}

func TestHeldOutStatesAreNeverScored(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	held := states(t, srv.URL, 2, "test")
	code, b := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Groups: []serve.GroupCompletions{{StateID: held.States[0].StateID, Completions: servetest.Completions(0, 4)}}})
	require.Equal(t, http.StatusBadRequest, code, string(b))
	require.Equal(t, "test_state", errCode(t, b))
	require.Zero(t, s.Info().Candidates, "nothing of a held-out state can reach a calibration")
}

func TestWorldModelFailureIsNotAReward(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{PredictFail: errors.New("upstream 502")})
	sr := states(t, srv.URL, 1, "")
	resp := score(t, srv.URL, "f", 0, sr, 4)
	require.Equal(t, 1, resp.Failed)
	for _, smp := range resp.Groups[0].Samples {
		require.Nil(t, smp.Reward)
		require.Contains(t, smp.FailureReason, "upstream 502")
	}
	require.Contains(t, resp.Groups[0].FailureReason, "world_model")
	in := s.Info()
	require.Zero(t, in.Scored)
	require.Equal(t, 1, in.Failed)
	require.Zero(t, in.Candidates)
	// OpenRLHF gets a 503 (it retries), never a number.
	code, b := post(t, srv.URL+"/get_reward?step=0&group_size=1", "", serve.RewardRequest{Query: []string{`{"mechanism": "lr-scale", "params": {"factor": "2"}}`}, Labels: []string{sr.States[0].StateID}})
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))
}

func TestRestartResumesState(t *testing.T) {
	dir := t.TempDir()
	store := records.NewMemStore() // the runs' store outlives the service
	s, srv, _ := newService(t, dir, nil, servetest.Options{Store: store})
	sr := states(t, srv.URL, 4, "")
	for k := range 4 {
		score(t, srv.URL, fmt.Sprintf("r%d", k), k, sr, 8)
	}
	waitCalibration(t, s, 0, serve.CalReady, serve.CalApplied)
	score(t, srv.URL, "r5", 5, sr, 8)
	waitCalibration(t, s, 1, serve.CalReady)
	want, wantMon := s.InfoDigest(), s.Monitors()
	require.True(t, wantMon.Calibrated)
	srv.Close()
	require.NoError(t, s.Close())
	s2, srv2, ex2 := newService(t, dir, nil, servetest.Options{Store: store})
	waitCalibration(t, s2, 1, serve.CalReady)
	require.Equal(t, want, s2.InfoDigest())
	require.Equal(t, wantMon, s2.Monitors(), "monitors survive a restart")
	// A repeated request after the restart is answered from its first
	// result; the world model and the executor are not asked.
	score(t, srv2.URL, "r3", 3, sr, 8)
	require.Equal(t, want, s2.InfoDigest())
	require.Zero(t, ex2.Runs())
}

func TestStateDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	newService(t, dir, nil, servetest.Options{})
	c, _, err := servetest.Components(servetest.Options{})
	require.NoError(t, err)
	_, err = serve.New(servetest.Config(dir), c)
	require.ErrorIs(t, err, serve.ErrLocked)
}

func TestRequestErrors(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.MaxBody, c.MaxSamples, c.MaxCompletions, c.GroupSize = 4096, 3, 3, 3 }, servetest.Options{})
	sr := states(t, srv.URL, 3, "")
	id := sr.States[0].StateID
	g := func(k int) []serve.GroupCompletions {
		return []serve.GroupCompletions{{StateID: id, Completions: servetest.Completions(0, k)}}
	}
	for _, c := range []struct {
		name, path string
		body       any
		code       int
		errCode    string
	}{
		{"unknown state", "/v1/score", serve.ScoreRequest{Step: ip(0), Groups: []serve.GroupCompletions{{StateID: "s-nope", Completions: []string{"x"}}}}, 400, "unknown_state"},
		{"bad json", "/v1/score", []byte(`{"groups": [`), 400, "bad_json"},
		{"unknown field", "/v1/score", []byte(`{"groupz": []}`), 400, "bad_json"},
		{"duplicate key", "/v1/score", []byte(`{"step": 0, "step": 5, "groups": []}`), 400, "bad_json"},
		{"case-folded key", "/v1/score", []byte(`{"Step": 0, "groups": []}`), 400, "bad_json"},
		{"nested duplicate key", "/v1/score", []byte(`{"step": 0, "groups": [{"state_id": "a", "state_id": "b", "completions": ["x"]}]}`), 400, "bad_json"},
		{"no samples", "/v1/score", serve.ScoreRequest{Step: ip(0)}, 400, "empty"},
		{"too many samples", "/v1/score", serve.ScoreRequest{Step: ip(0), Groups: g(4)}, 413, "too_many_samples"},
		{"group size", "/v1/score", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{{Group: "g", StateID: id, GroupSize: 9, Completion: "x"}}}, 413, "bad_group_size"},
		{"index", "/v1/score", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{{Group: "g", StateID: id, GroupSize: 2, Index: ip(2), Completion: "x"}}}, 400, "bad_index"},
		{"no group name", "/v1/score", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{{StateID: id, GroupSize: 2, Completion: "x"}}}, 400, "bad_group"},
		{"body too large", "/v1/score", []byte(`{"groups": [{"state_id": "` + strings.Repeat("x", 5000) + `"}]}`), 413, "body_too_large"},
		{"negative step", "/v1/advance", serve.AdvanceRequest{Step: -1}, 400, "bad_step"},
		{"bad split", "/v1/states", serve.StatesRequest{N: 1, Split: "dev"}, 400, "bad_split"},
		{"too many states", "/v1/states", serve.StatesRequest{N: 513}, 400, "bad_count"},
		{"reward without labels", "/get_reward", serve.RewardRequest{Query: []string{"a"}}, 400, "bad_labels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := post(t, srv.URL+c.path, "", c.body)
			require.Equal(t, c.code, code, string(b))
			require.Equal(t, c.errCode, errCode(t, b))
		})
	}
	// A sample with another completion for a filled index, and a group
	// named twice with another state, are conflicts: within one request
	// (refused whole) and against a group being assembled.
	smp := func(i int, text string) serve.SampleCompletion {
		return serve.SampleCompletion{Group: "c", StateID: id, GroupSize: 3, Index: ip(i), Completion: text}
	}
	code, b := post(t, srv.URL+"/v1/score?x", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{smp(0, "a"), smp(0, "b")}})
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Equal(t, "sample_conflict", errCode(t, b))
	first := make(chan int, 1)
	go func() {
		code, _ := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{smp(0, "a")}})
		first <- code
	}()
	require.Eventually(t, func() bool { return s.Health().PendingGroups == 1 }, 10*time.Second, 5*time.Millisecond)
	code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{smp(0, "b")}})
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Equal(t, "sample_conflict", errCode(t, b))
	code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{{Group: "c", StateID: sr.States[1].StateID, GroupSize: 3, Completion: "a"}}})
	require.Equal(t, http.StatusConflict, code, string(b))
	require.Equal(t, "group_mismatch", errCode(t, b))
	code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{smp(1, "b"), smp(2, "c")}})
	require.Equal(t, http.StatusOK, code, string(b))
	require.Equal(t, http.StatusOK, <-first)
}

func TestTokenAndBind(t *testing.T) {
	cfg := servetest.Config(t.TempDir())
	cfg.Addr = "0.0.0.0:8080"
	c, _, err := servetest.Components(servetest.Options{})
	require.NoError(t, err)
	_, err = serve.New(cfg, c)
	require.ErrorIs(t, err, serve.ErrConfig, "a non-loopback address without a token is refused")
	for _, tok := range []string{" ", "short", strings.Repeat(" ", 20), "a token with spaces in it"} {
		cfg.Token = tok
		_, err = serve.New(cfg, c)
		require.ErrorIs(t, err, serve.ErrConfig, "token %q", tok)
	}
	require.True(t, serve.Loopback("127.0.0.1:1"))
	require.True(t, serve.Loopback("[::1]:1"))
	require.True(t, serve.Loopback("localhost:1"))
	require.False(t, serve.Loopback(":8080"), "all interfaces is not loopback")

	const tok = "sesame-sesame-sesame"
	_, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.Token = tok }, servetest.Options{})
	code, _ := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{N: 1})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(t, srv.URL+"/v1/states", "wrong", serve.StatesRequest{N: 1})
	require.Equal(t, http.StatusUnauthorized, code)
	code, b := post(t, srv.URL+"/v1/states", tok, serve.StatesRequest{N: 1})
	require.Equal(t, http.StatusOK, code, string(b))
}

func TestBusyBeyondMaxInFlight(t *testing.T) {
	dir := t.TempDir()
	arm := filepath.Join(dir, "armed")
	s, srv, _ := newService(t, filepath.Join(dir, "state"), func(c *serve.Config) { c.MaxInFlight = 1 },
		servetest.Options{PredictDelay: 200 * time.Millisecond, PredictArm: arm})
	sr := states(t, srv.URL, 1, "")
	done := make(chan int)
	go func() {
		code, _ := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Groups: []serve.GroupCompletions{{StateID: sr.States[0].StateID, Completions: servetest.Completions(0, 2)}}})
		done <- code
	}()
	for {
		if _, err := os.Stat(arm); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	h := s.Health()
	require.Equal(t, 1, h.InFlight)
	require.Equal(t, 1, h.MaxInFlight)
	code, b := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{N: 1, RequestID: "other"})
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))
	require.Equal(t, "busy", errCode(t, b))
	require.Equal(t, http.StatusOK, <-done)
}

func TestOpenRLHFReward(t *testing.T) {
	// OpenRLHF posts one sample per request; the samples of a label at a
	// step form a group of group_size.
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	sr := states(t, srv.URL, 2, "")
	type res struct {
		i int
		r serve.RewardResponse
	}
	out := make(chan res, 6)
	for i := range 6 {
		go func() {
			st := sr.States[i%2]
			c := servetest.Completions(i/2, 3)[i/2]
			q := serve.RewardRequest{Prompts: []string{"PROMPT " + st.StateID}, Query: []string{"PROMPT " + st.StateID + c}, Labels: []string{st.StateID}}
			code, b := post(t, srv.URL+"/get_reward?group_size=3&step=0", "", q)
			if code != http.StatusOK {
				t.Error(string(b))
			}
			var rr serve.RewardResponse
			_ = json.Unmarshal(b, &rr)
			out <- res{i, rr}
		}()
	}
	for range 6 {
		r := <-out
		require.Len(t, r.r.Rewards, 1)
		require.Equal(t, r.r.Rewards, r.r.Scores)
		require.Contains(t, r.r.ExtraLogs, "lm2lm_mean_reward")
		require.False(t, math.IsNaN(r.r.Rewards[0]))
		require.LessOrEqual(t, math.Abs(r.r.Rewards[0]), 6+1.0)
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
	dir := t.TempDir()
	s, srv, ex := newService(t, dir, nil, servetest.Options{})
	sr := states(t, srv.URL, 2, "test")
	q := serve.ScoreRequest{RequestID: "ev"}
	for _, st := range sr.States {
		q.Groups = append(q.Groups, serve.GroupCompletions{StateID: st.StateID, Completions: []string{
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
	runs := s.Info().EvalRuns
	require.EqualValues(t, ex.Runs(), runs)
	require.Equal(t, 24, s.Info().Evidence, "evaluation runs never join M")
	// The evaluation counter survives a restart.
	srv.Close()
	require.NoError(t, s.Close())
	s2, _, _ := newService(t, dir, nil, servetest.Options{})
	require.Equal(t, runs, s2.Info().EvalRuns)
}

func TestMemoryBounds(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) {
		c.MaxCandidates, c.PoolPerTask, c.MaxIssued, c.MaxDoneGroups = 5, 3, 6, 4
		c.Schedule.Steps = []int{100, 200}
	}, servetest.Options{})
	first := states(t, srv.URL, 4, "")
	for k := range 16 { // 64 groups: the pool's bound is applied every 64
		score(t, srv.URL, fmt.Sprintf("m%d", k), k, first, 8)
		if k == 14 {
			require.Equal(t, 5, s.Info().Candidates, "the candidates are the newest MaxCandidates at every score")
		}
	}
	in := s.Info()
	require.Equal(t, 64, in.Scored)
	require.Equal(t, 5, in.Candidates)
	require.LessOrEqual(t, in.Pool, 24+4*3, "M_0 and at most 3 synthetic records per task")
	code, b := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: "more", N: 4})
	require.Equal(t, http.StatusOK, code, string(b))
	var more serve.StatesResponse
	require.NoError(t, json.Unmarshal(b, &more))
	require.Equal(t, 6, s.Info().Issued)
	code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(16), Groups: []serve.GroupCompletions{{StateID: first.States[0].StateID, Completions: []string{"x"}}}})
	require.Equal(t, http.StatusBadRequest, code, string(b))
	require.Equal(t, "unknown_state", errCode(t, b), "the oldest issued states are forgotten")
	code, b = post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: "st--4", N: 4})
	require.Equal(t, http.StatusGone, code, string(b))
	require.Equal(t, "states_forgotten", errCode(t, b), "a repeated states request whose states were forgotten says so")
	score(t, srv.URL, "m16", 16, more, 2)
}

func TestDamagedJournalRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s, srv, _ := newService(t, dir, nil, servetest.Options{})
	sr := states(t, srv.URL, 2, "")
	// A completion of '<' is journalled as itself, not as six bytes of
	// JSON escape each.
	lt := strings.Repeat("<", 8000)
	code, b := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Groups: []serve.GroupCompletions{{StateID: sr.States[0].StateID, Completions: []string{lt, lt}}}})
	require.Equal(t, http.StatusOK, code, string(b))
	score(t, srv.URL, "x", 0, sr, 4)
	srv.Close()
	require.NoError(t, s.Close())
	path := filepath.Join(dir, "journal.log")
	j, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Less(t, len(j), 3*8000+20000, "journal of %d bytes", len(j))
	j[len(j)/2] ^= 0x04
	require.NoError(t, os.WriteFile(path, j, 0o600))
	c, _, err := servetest.Components(servetest.Options{})
	require.NoError(t, err)
	_, err = serve.New(servetest.Config(dir), c)
	var je *serve.JournalError
	require.ErrorAs(t, err, &je)
	require.ErrorIs(t, err, serve.ErrState)
	require.Contains(t, err.Error(), "damaged at byte")
}

// Each split keeps its own MaxIssued most recent states: the training
// states a long run asks for never push out the held-out states it
// evaluates at the end (a run of 96 × 128 training states did, when the
// bound was shared).
func TestHeldOutStatesOutliveTraining(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.MaxIssued = 4 }, servetest.Options{})
	held := states(t, srv.URL, 2, "test")
	var first serve.StatesResponse
	for k := range 4 {
		code, b := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: fmt.Sprintf("train-%d", k), N: 3})
		require.Equal(t, http.StatusOK, code, string(b))
		var sr serve.StatesResponse
		require.NoError(t, json.Unmarshal(b, &sr))
		if k == 0 {
			first = sr
		}
	}
	require.Equal(t, 4+2, s.Info().Issued, "4 training states and the 2 held-out ones")
	q := serve.ScoreRequest{RequestID: "ev"}
	for _, st := range held.States {
		q.Groups = append(q.Groups, serve.GroupCompletions{StateID: st.StateID, Completions: []string{`{"mechanism": "lr-scale", "params": {"factor": "2"}}`}})
	}
	code, b := post(t, srv.URL+"/v1/evaluate", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Groups: []serve.GroupCompletions{{StateID: first.States[0].StateID, Completions: []string{"x"}}}})
	require.Equal(t, http.StatusBadRequest, code, string(b))
	require.Equal(t, "unknown_state", errCode(t, b), "the oldest training states are forgotten")
}
