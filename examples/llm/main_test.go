package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	wopenai "github.com/lm2lm/lm2lm/rwm/openai"
)

func TestRunAgainstFakeServer(t *testing.T) {
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		if r.ResponseFormat != nil { // the world model asks for a schema
			return oaitest.Text(`{"gain": 0.004, "q10": -0.002, "q90": 0.01, "valid": true, "reason": "warmup helped"}`)
		}
		return oaitest.Text(`{"mechanism": "warmup", "params": {"steps": 30}}`, `{"mechanism": "qk-norm"}`, `no idea`, `{"mechanism": "lr-scale", "params": {"factor": 0.5}}`)
	})
	require.NoError(t, run(srv.URL(), "fake", "", 4, 1, time.Minute))
	require.Equal(t, 2, srv.Count())
}

func TestRunNotConfigured(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("LM2LM_MODEL", "")
	err := run("", "", "", 4, 1, time.Minute)
	require.True(t, errors.Is(err, wopenai.ErrNotConfigured), "got %v", err)
}
