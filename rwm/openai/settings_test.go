package openai_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	popenai "github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/rwm/openai"
	"github.com/lm2lm/lm2lm/rwm/verdict"
)

// The three OpenAI-format clients share one Settings type with one set of
// defaults: a value of one is a value of the others, and each default
// Config embeds the same DefaultSettings.
func TestSettingsShared(t *testing.T) {
	s := openai.DefaultSettings()
	s.BaseURL, s.Model, s.MaxRetries = "http://localhost:8000/v1", "m", 7
	var v verdict.Settings = s
	var p popenai.Settings = v
	require.Equal(t, "http://localhost:8000/v1", p.BaseURL)
	require.Equal(t, 7, p.Transport.MaxRetries)

	want := openai.Transport{MaxRetries: 3, Timeout: 2 * time.Minute, BaseDelay: 500 * time.Millisecond,
		MaxDelay: 30 * time.Second, MaxBodyBytes: 4 << 20}
	require.Equal(t, want, openai.DefaultSettings().Transport)
	require.Equal(t, want, openai.DefaultConfig().Transport)
	require.Equal(t, want, verdict.DefaultConfig().Transport)
	require.Equal(t, want, popenai.DefaultConfig().Transport)
	for _, c := range []openai.Settings{openai.DefaultConfig().Settings, verdict.DefaultConfig().Settings, popenai.DefaultConfig().Settings} {
		require.Empty(t, c.BaseURL+c.APIKey+c.Model, "endpoint defaults come from the environment")
		require.Nil(t, c.HTTPClient)
		require.Nil(t, c.Sleep)
		require.Nil(t, c.Now)
		require.Nil(t, c.Getenv)
	}
}
