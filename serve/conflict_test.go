package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// TestGroupNameReusedWithOtherCompletions: a group name the service has
// scored at a step is answered from its cache only for the same
// completions. The same name at the same step with other completions (a
// resumed trainer reusing its names) is a 409 naming both digests, never
// the first group's rewards, whole or one sample at a time, and also
// after a restart that replays the journal.
func TestGroupNameReusedWithOtherCompletions(t *testing.T) {
	dir := t.TempDir()
	s, srv, _ := newService(t, dir, nil, servetest.Options{})
	sr := states(t, srv.URL, 1, "")
	id := sr.States[0].StateID
	first, other := servetest.Completions(0, 4), servetest.Completions(1, 4)
	require.NotEqual(t, first, other)
	whole := func(url string, comps []string) (int, []byte) {
		return post(t, url+"/v1/score", "", serve.ScoreRequest{Step: ip(0),
			Groups: []serve.GroupCompletions{{StateID: id, Group: "run/g0", Completions: comps}}})
	}
	code, b := whole(srv.URL, first)
	require.Equal(t, http.StatusOK, code, string(b))
	var want serve.ScoreResponse
	require.NoError(t, json.Unmarshal(b, &want))

	check := func(url string) {
		// The same completions: the first answer, not scored again.
		code, b := whole(url, first)
		require.Equal(t, http.StatusOK, code, string(b))
		var again serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &again))
		require.Equal(t, want.Groups[0].Samples, again.Groups[0].Samples)

		// Other completions under the same name: refused, naming both.
		code, b = whole(url, other)
		require.Equal(t, http.StatusConflict, code, string(b))
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(b, &e))
		require.Equal(t, "group_conflict", e.Error.Code)
		require.Regexp(t, regexp.MustCompile(`sample 0 sent with digest [0-9a-f]{16}, scored with digest [0-9a-f]{16}`), e.Error.Message)

		// One sample at a time: its index's text is compared.
		code, b = post(t, url+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{
			{Group: "run/g0", StateID: id, GroupSize: 4, Index: ip(2), Completion: other[2]}}})
		if other[2] != first[2] {
			require.Equal(t, http.StatusConflict, code, string(b))
		}
		code, b = post(t, url+"/v1/score", "", serve.ScoreRequest{Step: ip(0), Samples: []serve.SampleCompletion{
			{Group: "run/g0", StateID: id, GroupSize: 4, Index: ip(2), Completion: first[2]}}})
		require.Equal(t, http.StatusOK, code, string(b))
		var one serve.ScoreResponse
		require.NoError(t, json.Unmarshal(b, &one))
		require.Equal(t, *want.Groups[0].Samples[2].Reward, *one.Samples[0].Reward)
	}
	check(srv.URL)
	require.Equal(t, 1, s.Info().Scored)

	// After a restart the journal's groups carry their digests again.
	srv.Close()
	s.Close()
	s2, srv2, _ := newService(t, dir, nil, servetest.Options{})
	check(srv2.URL)
	require.Equal(t, 1, s2.Info().Scored)
}

// TestTornJournalLogged: a final journal entry cut short by a crash is
// dropped on the next start, and the log says so with the bytes dropped
// and where.
func TestTornJournalLogged(t *testing.T) {
	dir := t.TempDir()
	s, srv, _ := newService(t, dir, nil, servetest.Options{})
	sr := states(t, srv.URL, 1, "")
	score(t, srv.URL, "torn-1", 0, sr, 4)
	srv.Close()
	s.Close()

	path := filepath.Join(dir, "journal.log")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	last := lines[len(lines)-1]
	torn := last[:len(last)/2] // the next entry's first half, as a crash leaves it
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.Write(torn)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	var logged bytes.Buffer
	s2, _, _ := newService(t, dir, func(c *serve.Config) { c.Log = slog.New(slog.NewTextHandler(&logged, nil)) }, servetest.Options{})
	require.Equal(t, 1, s2.Info().Scored)
	require.Contains(t, logged.String(), "level=WARN")
	require.Contains(t, logged.String(), fmt.Sprintf("offset=%d bytes_dropped=%d", len(b), len(torn)))
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, b, after, "the journal is cut back to its whole entries")
}

// TestRequestIDsIdempotentOnEveryRoute: a request_id repeated with the
// same body gets the first answer; with another body it is a 409 on every
// route (states, dataset, score, evaluate), never the first answer.
func TestRequestIDsIdempotentOnEveryRoute(t *testing.T) {
	_, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	code409 := func(code int, b []byte) {
		t.Helper()
		require.Equal(t, http.StatusConflict, code, string(b))
		require.Contains(t, string(b), "request_id_reused")
	}
	code, first := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: "s1", N: 2})
	require.Equal(t, http.StatusOK, code, string(first))
	code, again := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: "s1", N: 2})
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, string(first), string(again))
	code409(post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: "s1", N: 3}))
	code409(post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: "s1", N: 2, Split: serve.SplitTest}))
	code409(post(t, srv.URL+"/v1/dataset", "", serve.StatesRequest{RequestID: "s1", N: 5}))
	code, rows := post(t, srv.URL+"/v1/dataset", "", serve.StatesRequest{RequestID: "s1", N: 2})
	require.Equal(t, http.StatusOK, code, string(rows))
	require.Len(t, bytes.Split(bytes.TrimSpace(rows), []byte("\n")), 2)

	var sr serve.StatesResponse
	require.NoError(t, json.Unmarshal(first, &sr))
	id := sr.States[0].StateID
	q := serve.ScoreRequest{RequestID: "q1", Step: ip(0), Groups: []serve.GroupCompletions{{StateID: id, Completions: servetest.Completions(0, 3)}}}
	code, b := post(t, srv.URL+"/v1/score", "", q)
	require.Equal(t, http.StatusOK, code, string(b))
	q.Groups[0].Completions = servetest.Completions(1, 3)
	code409(post(t, srv.URL+"/v1/score", "", q))

	ev := map[string]any{"request_id": "e1", "groups": []serve.GroupCompletions{{StateID: id, Completions: servetest.Completions(0, 2)}}}
	code, e1 := post(t, srv.URL+"/v1/evaluate", "", ev)
	require.Equal(t, http.StatusOK, code, string(e1))
	code, e2 := post(t, srv.URL+"/v1/evaluate", "", ev)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, string(e1), string(e2))
	ev["groups"] = []serve.GroupCompletions{{StateID: id, Completions: servetest.Completions(2, 2)}}
	code409(post(t, srv.URL+"/v1/evaluate", "", ev))
}

// TestRequestAppliedWholeOrNotAtAll: a request with one valid group and
// one unknown or held-out state is refused before anything of it is
// applied: the valid group is not scored (so it is no calibration
// candidate), its samples join no group, and the request's step does not
// move the service's.
func TestRequestAppliedWholeOrNotAtAll(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), nil, servetest.Options{})
	train := states(t, srv.URL, 1, "").States[0].StateID
	test := states(t, srv.URL, 1, serve.SplitTest).States[0].StateID
	for _, c := range []struct{ other, code string }{{"s-unknown", "unknown_state"}, {test, "test_state"}} {
		code, b := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(3), Groups: []serve.GroupCompletions{
			{StateID: train, Group: "valid", Completions: servetest.Completions(0, 4)},
			{StateID: c.other, Group: "bad", Completions: servetest.Completions(1, 4)}}})
		require.Equal(t, http.StatusBadRequest, code, string(b))
		require.Contains(t, string(b), c.code)
		// Samples one at a time: the first would open a group.
		code, b = post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(3), Samples: []serve.SampleCompletion{
			{Group: "half", StateID: train, GroupSize: 2, Index: ip(0), Completion: "a"},
			{Group: "other", StateID: c.other, GroupSize: 2, Index: ip(0), Completion: "b"}}})
		require.Equal(t, http.StatusBadRequest, code, string(b))
	}
	in := s.Info()
	require.Zero(t, in.Scored)
	require.Zero(t, in.Step, "a refused request moves no step")
	require.Zero(t, s.Health().PendingGroups, "no sample of a refused request waits in a group")

	// The valid group alone is scored afresh, under the same name.
	code, b := post(t, srv.URL+"/v1/score", "", serve.ScoreRequest{Step: ip(3), Groups: []serve.GroupCompletions{
		{StateID: train, Group: "valid", Completions: servetest.Completions(0, 4)}}})
	require.Equal(t, http.StatusOK, code, string(b))
	require.Equal(t, 1, s.Info().Scored)
}

// TestGetRewardIndexAndLateSample: /get_reward takes the samples'
// indices, so that a resent sample is answered from its group's first
// answer instead of filling the group; a sample after its group was
// scored at the deadline gets the documented 503, not a conflict.
func TestGetRewardIndexAndLateSample(t *testing.T) {
	s, srv, _ := newService(t, t.TempDir(), func(c *serve.Config) { c.GroupDeadline = 300 * time.Millisecond }, servetest.Options{})
	id := states(t, srv.URL, 1, "").States[0].StateID
	comps := servetest.Completions(0, 3)
	send := func(i int, indices []int) (int, []byte) {
		return post(t, srv.URL+"/get_reward?group_size=3&step=0", "", serve.RewardRequest{Query: []string{comps[i]}, Labels: []string{id}, Indices: indices})
	}
	// Sample 0 sent twice (a client's retry) and sample 1: the group is
	// still missing sample 2, and scored at its deadline on two samples.
	codes := make(chan int, 3)
	for _, c := range []struct{ i, idx int }{{0, 0}, {0, 0}, {1, 1}} {
		go func() { code, _ := send(c.i, []int{c.idx}); codes <- code }()
	}
	for range 3 {
		require.Equal(t, http.StatusOK, <-codes)
	}
	require.Equal(t, 1, s.Info().Scored)
	// The late third sample, without an index as OpenRLHF sends it: 503.
	code, b := send(2, nil)
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))
	require.Contains(t, string(b), "no_reward")
	require.Contains(t, string(b), "late")
	// With its index it is answered as a late sample of a scored group: 503.
	code, b = send(2, []int{2})
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))
	// A resend of sample 0 gets its reward.
	code, b = send(0, []int{0})
	require.Equal(t, http.StatusOK, code, string(b))
	var rr serve.RewardResponse
	require.NoError(t, json.Unmarshal(b, &rr))
	require.Len(t, rr.Rewards, 1)
	code, b = post(t, srv.URL+"/get_reward?group_size=3&step=0", "", serve.RewardRequest{Query: []string{"a", "b"}, Labels: []string{id, id}, Indices: []int{0}})
	require.Equal(t, http.StatusBadRequest, code, string(b))
}
