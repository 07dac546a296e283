package serve_test

import (
	"math"
	"testing"

	"github.com/lm2lm/lm2lm/serve"
)

func FuzzParseScoreRequest(f *testing.F) {
	f.Add([]byte(`{"request_id": "r1", "step": 3, "groups": [{"state_id": "s-00", "completions": ["{\"mechanism\": \"none\"}"]}]}`))
	f.Add([]byte(`{"groups": []}`))
	f.Add([]byte(`{"groups": [{"state_id": ""}]}`))
	f.Add([]byte(`{"step": -1}`))
	f.Add([]byte(`{"groups": [{"state_id": "a", "completions": ["x"]}]} trailing`))
	f.Add([]byte(`{"unknown": 1}`))
	f.Add([]byte(`[1, 2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := serve.ParseScoreRequest(b)
		if err != nil {
			return
		}
		if q.Step != nil && *q.Step < 0 {
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
