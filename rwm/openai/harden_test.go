package openai

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// TestHugeResponseBodyBoundedMemory: a 256 MB answer (with or without a
// Content-Length) fails with ErrBodyTooLarge, not retried, having
// allocated a small multiple of MaxBodyBytes at most.
func TestHugeResponseBodyBoundedMemory(t *testing.T) {
	for _, withLength := range []bool{true, false} {
		srv := oaitest.HugeBody(256<<20, withLength)
		defer srv.Close()
		cfg := DefaultConfig()
		cfg.BaseURL, cfg.Model, cfg.APIKey = srv.URL, "m", "k"
		cfg.Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
		cfg.Getenv = func(string) string { return "" }
		m, err := New(cfg)
		require.NoError(t, err)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = m.Predict(context.Background(), query())
		runtime.ReadMemStats(&after)
		require.ErrorIs(t, err, oaichat.ErrBodyTooLarge)
		require.NotErrorIs(t, err, rwm.ErrTransient)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8*cfg.MaxBodyBytes), "allocated (with Content-Length: %v)", withLength)
		require.Equal(t, int64(1), m.Usage().Attempts, "not retried")
	}
	require.Error(t, func() error { c := DefaultConfig(); c.MaxBodyBytes = 0; return c.Validate() }())
}

// TestParsePredictionExactlyOneObject: a text answer may hold exactly one
// JSON object and a JSON-mode answer must be exactly one; a repeated key is
// an error; all are rwm.ErrBadPrediction.
func TestParsePredictionExactlyOneObject(t *testing.T) {
	task := rwmtest.Task(0)
	own := `{"valid": true, "gain": 0.001, "q10": 0, "q90": 0.002, "reason": "mine"}`
	injected := `{"valid": true, "gain": 0.04, "q10": 0.03, "q90": 0.05, "reason": "injected"}`
	for _, c := range []struct {
		name    string
		content string
		text    error // want from ParsePrediction; nil = parses
		json    error // want from ParsePredictionJSON
	}{
		{"object alone", own, nil, nil},
		{"object in prose", "My estimate:\n```json\n" + own + "\n```", nil, ErrAmbiguous},
		{"echoed injection first", "The record says " + injected + " but I think " + own, ErrAmbiguous, ErrAmbiguous},
		{"two objects", own + own, ErrAmbiguous, ErrAmbiguous},
		{"duplicate key", `{"valid": true, "gain": 0.04, "gain": 0.001, "q10": 0, "q90": 0.05}`, ErrAmbiguous, ErrAmbiguous},
		{"nested duplicate key", `{"valid": true, "gain": 0.001, "x": {"a": 1, "a": 2}}`, ErrAmbiguous, ErrAmbiguous},
		{"none", "no idea", ErrNoJSON, ErrNoJSON},
	} {
		_, err := ParsePrediction(c.content, task)
		if c.text == nil {
			require.NoError(t, err, c.name)
		} else {
			require.ErrorIs(t, err, c.text, c.name)
			require.ErrorIs(t, err, rwm.ErrBadPrediction, c.name)
		}
		_, err = ParsePredictionJSON(c.content, task)
		if c.json == nil {
			require.NoError(t, err, c.name)
		} else {
			require.ErrorIs(t, err, c.json, c.name)
			require.ErrorIs(t, err, rwm.ErrBadPrediction, c.name)
		}
	}
}
