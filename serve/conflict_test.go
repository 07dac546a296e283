package serve_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

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
