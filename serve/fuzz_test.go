package serve_test

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

func FuzzParseScoreRequest(f *testing.F) {
	f.Add([]byte(`{"request_id": "r1", "step": 3, "groups": [{"state_id": "s-00", "completions": ["{\"mechanism\": \"none\"}"]}]}`))
	f.Add([]byte(`{"groups": []}`))
	f.Add([]byte(`{"groups": [{"state_id": ""}]}`))
	f.Add([]byte(`{"step": -1}`))
	f.Add([]byte(`{"groups": [{"state_id": "a", "completions": ["x"]}]} trailing`))
	f.Add([]byte(`{"unknown": 1}`))
	f.Add([]byte(`[1, 2]`))
	f.Add([]byte(`{"step": 2, "samples": [{"group": "uid-1", "state_id": "s-00", "group_size": 8, "index": 3, "completion": "x"}]}`))
	f.Add([]byte(`{"step": 2, "samples": [{"group": "g", "group": "h"}]}`))
	f.Add([]byte(`{"Step": 2}`))
	f.Add([]byte(`{"step": 2, "samples": [{"group": "g", "state_id": "s", "group_size": 1, "index": -1, "completion": ""}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := serve.ParseScoreRequest(b)
		if err != nil {
			return
		}
		if q.Step != nil && (*q.Step < 0 || *q.Step > serve.MaxStep) {
			t.Fatalf("accepted step %d", *q.Step)
		}
		for i, g := range q.Groups {
			if g.StateID == "" {
				t.Fatalf("accepted group %d without a state id", i)
			}
		}
	})
}

func FuzzParseRewardRequest(f *testing.F) {
	f.Add([]byte(`{"query": ["p a"], "prompts": ["p"], "labels": ["s-1"]}`))
	f.Add([]byte(`{"query": ["p a", "p b"], "labels": ["s-1"]}`))
	f.Add([]byte(`{"query": [], "labels": []}`))
	f.Add([]byte(`{"query": ["x"], "labels": ["y"], "step": 1e3, "extra": true}`))
	f.Add([]byte(`{"query": ["x"], "labels": ["y"], "prompts": ["a", "b"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := serve.ParseRewardRequest(b)
		if err != nil {
			return
		}
		if len(q.Query) == 0 || len(q.Labels) != len(q.Query) || (len(q.Prompts) != 0 && len(q.Prompts) != len(q.Query)) {
			t.Fatalf("accepted %d queries, %d labels, %d prompts", len(q.Query), len(q.Labels), len(q.Prompts))
		}
		if q.Step != nil && (*q.Step < 0 || math.IsNaN(float64(*q.Step))) {
			t.Fatalf("accepted step %d", *q.Step)
		}
	})
}

// FuzzHandler posts arbitrary bodies to every POST route of a live
// service: the answer is JSON (or JSON Lines) with a 200 or a 4xx, never a
// server error.
func FuzzHandler(f *testing.F) {
	dir := f.TempDir()
	cfg := servetest.Config(dir)
	cfg.GroupDeadline = 10 * time.Millisecond // a partial group is scored at once
	c, _, err := servetest.Components(servetest.Options{})
	if err != nil {
		f.Fatal(err)
	}
	s, err := serve.New(cfg, c)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	h := s.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/states", strings.NewReader(`{"request_id": "seed", "n": 2}`)))
	var sr serve.StatesResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &sr); err != nil {
		f.Fatal(err)
	}
	id := sr.States[0].StateID
	routes := []string{"/v1/score", "/v1/states", "/v1/advance", "/v1/dataset", "/get_reward"}
	f.Add(uint8(0), `{"step": 0, "groups": [{"state_id": "`+id+`", "completions": ["{\"mechanism\": \"lr-scale\", \"params\": {\"factor\": \"2\"}}", "x"]}]}`)
	f.Add(uint8(0), `{"step": 0, "samples": [{"group": "u", "state_id": "`+id+`", "group_size": 2, "index": 1, "completion": "x"}]}`)
	f.Add(uint8(1), `{"n": 1, "split": "test"}`)
	f.Add(uint8(2), `{"step": 1}`)
	f.Add(uint8(3), `{"n": 0}`)
	f.Add(uint8(4), `{"query": ["a b"], "prompts": ["a"], "labels": ["`+id+`"]}`)
	f.Add(uint8(0), `{"groups": [{"state_id": "`+id+`", "completions": ["\u0000\ud800"]}], "step": 99999999999}`)
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		path := routes[int(route)%len(routes)]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		// 503 is a retry signal (busy, a failed group), never a crash.
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body.String())
		}
		if rec.Code != http.StatusOK && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s: error answer is not JSON: %s", path, rec.Body.String())
		}
	})
}
