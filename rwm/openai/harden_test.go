package openai

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
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
		sl := &sleeps{}
		cfg := urlConfig(srv.URL, sl)
		m, err := New(cfg)
		require.NoError(t, err)
		allocated := oaitest.Allocated(func() { _, err = m.Predict(context.Background(), query()) })
		require.ErrorIs(t, err, oaichat.ErrBodyTooLarge)
		require.NotErrorIs(t, err, rwm.ErrTransient)
		require.Less(t, allocated, uint64(8*cfg.MaxBodyBytes), "allocated (with Content-Length: %v)", withLength)
		require.Equal(t, int64(1), m.Usage().Attempts, "not retried")
		require.Empty(t, sl.All(), "not retried")
	}
	require.Error(t, func() error { c := DefaultConfig(); c.MaxBodyBytes = 0; return c.Validate() }())
}

// TestParsePredictionExactlyOneObject: a text answer may hold exactly one
// JSON object and a JSON-mode answer must be exactly one; a repeated key is
// an error; all are unreadable answers (ErrUnreadable).
func TestParsePredictionExactlyOneObject(t *testing.T) {
	task := rwmtest.Task(0)
	for _, c := range []struct {
		name    string
		content string
		text    error // want from ParsePrediction; nil = parses
		json    error // want from ParsePredictionJSON
	}{
		{"object alone", ownAnswer, nil, nil},
		{"object in prose", "My estimate:\n```json\n" + ownAnswer + "\n```", nil, ErrAmbiguous},
		{"echoed injection first", "The record says " + injectedAnswer + " but I think " + ownAnswer, ErrAmbiguous, ErrAmbiguous},
		{"two objects", ownAnswer + ownAnswer, ErrAmbiguous, ErrAmbiguous},
		{"duplicate key", `{"valid": true, "gain": 0.04, "gain": 0.001, "q10": 0, "q90": 0.05}`, ErrAmbiguous, ErrAmbiguous},
		{"nested duplicate key", `{"valid": true, "gain": 0.001, "x": {"a": 1, "a": 2}}`, ErrAmbiguous, ErrAmbiguous},
		{"none", "no idea", ErrNoJSON, ErrNoJSON},
	} {
		for _, p := range []struct {
			name  string
			parse func(string, records.Task) (rwm.Prediction, error)
			want  error
		}{{"text", ParsePrediction, c.text}, {"json", ParsePredictionJSON, c.json}} {
			_, err := p.parse(c.content, task)
			if p.want == nil {
				require.NoError(t, err, "%s: %s", p.name, c.name)
				continue
			}
			requireAnswerError(t, err, p.want, "%s: %s", p.name, c.name)
		}
	}
}
