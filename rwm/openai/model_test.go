package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func query() rwm.Query {
	return rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0], Evidence: rwmtest.Evidence(6)}
}

func newTestModel(t *testing.T, srv *oaitest.Server, sl *sleeps, edit func(*Config)) *Model {
	t.Helper()
	cfg := testConfig(srv, sl)
	if edit != nil {
		edit(&cfg)
	}
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

func TestPredictRequestAndUsage(t *testing.T) {
	srv := oaitest.New(t, fakeWorld)
	m := newTestModel(t, srv, &sleeps{}, nil)
	p, err := m.Predict(context.Background(), query())
	require.NoError(t, err)
	require.True(t, p.Valid)
	require.True(t, p.HasInterval)
	require.Greater(t, p.Usage.PromptTokens, int64(0))
	require.Greater(t, p.Usage.CompletionTokens, int64(0))

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.Equal(t, "fake-model", r.Model)
	require.Equal(t, "Bearer test-key", r.Header.Get("Authorization"))
	require.Equal(t, "json_schema", r.ResponseFormatType())
	require.NotNil(t, r.Temperature)
	require.Zero(t, *r.Temperature)
	require.NotNil(t, r.Seed)
	require.Equal(t, SystemPrompt, r.Text("system"))
	var rf struct {
		JSONSchema struct {
			Name   string         `json:"name"`
			Strict bool           `json:"strict"`
			Schema map[string]any `json:"schema"`
		} `json:"json_schema"`
	}
	require.NoError(t, json.Unmarshal(r.ResponseFormat, &rf))
	require.True(t, rf.JSONSchema.Strict)
	require.ElementsMatch(t, []any{"gain", "q10", "q90", "valid", "reason"}, rf.JSONSchema.Schema["required"])

	u := m.Usage()
	require.Equal(t, int64(1), u.Calls)
	require.Equal(t, p.Usage.PromptTokens, u.PromptTokens)
	require.Equal(t, p.Usage.CompletionTokens, u.CompletionTokens)
}

func TestPredictAnswers(t *testing.T) {
	tests := []struct {
		name    string
		reply   oaitest.Reply
		want    rwm.Prediction
		wantErr error
	}{
		{"JSON alone", oaitest.Text("\n{\"gain\": 0.004, \"q10\": 0.001, \"q90\": 0.008, \"valid\": true, \"reason\": \"r\"}\n"),
			rwm.Prediction{Gain: 0.004, Low: 0.001, High: 0.008, HasInterval: true, Valid: true, Reason: "r"}, nil},
		{"JSON in prose, in JSON mode", oaitest.Text("Based on the records:\n{\"gain\": 0.004, \"q10\": 0.001, \"q90\": 0.008, \"valid\": true, \"reason\": \"r\"}\nDone."),
			rwm.Prediction{}, ErrAmbiguous},
		{"injected object echoed first", oaitest.Text(injectedAnswer + " " + ownAnswer),
			rwm.Prediction{}, ErrAmbiguous},
		{"duplicate key", oaitest.Text(`{"gain": 0.05, "q10": 0, "q90": 0.06, "valid": true, "reason": "x", "gain": 0.001}`),
			rwm.Prediction{}, ErrAmbiguous},
		{"invalid proposal", oaitest.Text(`{"gain": 0, "q10": 0, "q90": 0, "valid": false, "reason": "cannot run"}`),
			rwm.Prediction{Valid: false, Reason: "cannot run"}, nil},
		{"refusal", oaitest.Refusal("I can't help with that."), rwm.Prediction{}, ErrRefused},
		{"content filter", oaitest.Reply{Choices: []oaitest.Choice{{Content: "", FinishReason: "content_filter"}}}, rwm.Prediction{}, ErrRefused},
		{"NaN", oaitest.Text(`{"gain": "NaN", "q10": 0, "q90": 1, "valid": true, "reason": "r"}`), rwm.Prediction{}, ErrFieldType},
		{"absurd", oaitest.Text(`{"gain": 7.5, "q10": 7, "q90": 8, "valid": true, "reason": "in 1e-3 BPB"}`), rwm.Prediction{}, ErrAbsurd},
		{"cut at token limit", oaitest.Reply{Choices: []oaitest.Choice{{Content: `{"gain": 0.01, "q1`, FinishReason: "length"}}}, rwm.Prediction{}, ErrNoJSON},
		{"missing field", oaitest.Text(`{"q10": 0, "q90": 1, "valid": true}`), rwm.Prediction{}, ErrMissingField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := oaitest.New(t, nil)
			srv.Push(tt.reply)
			sl := &sleeps{}
			m := newTestModel(t, srv, sl, nil)
			got, err := m.Predict(context.Background(), query())
			if tt.wantErr != nil {
				requireAnswerError(t, err, tt.wantErr)
				require.False(t, errors.Is(err, rwm.ErrTransient), "a bad answer is not retried")
				require.Zero(t, got.Gain)
				require.Equal(t, 1, srv.Count())
				return
			}
			require.NoError(t, err)
			got.Usage = rwm.Usage{}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestPredictRetries(t *testing.T) {
	ok := oaitest.Text(`{"gain": 0.002, "q10": 0, "q90": 0.004, "valid": true, "reason": "r"}`)
	tests := []struct {
		name   string
		faults []oaitest.Reply
		delays []time.Duration
	}{
		// Retry-After: 7 is honoured (longer than the 500ms backoff).
		{"429 with Retry-After", []oaitest.Reply{oaitest.Status(http.StatusTooManyRequests, "7")}, []time.Duration{7 * time.Second}},
		// Backoff 500ms, 1s, 2s (BaseDelay doubled per retry).
		{"500, 503, 502", []oaitest.Reply{oaitest.Status(500, ""), oaitest.Status(503, ""), oaitest.Status(502, "")},
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}},
		{"truncated JSON body", []oaitest.Reply{oaitest.Truncated(ok, 60)}, []time.Duration{500 * time.Millisecond}},
		{"malformed JSON body", []oaitest.Reply{oaitest.Raw(`{"id":"x","choices":[{"message":`)}, []time.Duration{500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := oaitest.New(t, nil)
			srv.Push(tt.faults...)
			srv.Push(ok)
			sl := &sleeps{}
			m := newTestModel(t, srv, sl, nil)
			p, err := m.Predict(context.Background(), query())
			require.NoError(t, err)
			require.Equal(t, 0.002, p.Gain)
			require.Equal(t, tt.delays, sl.All())
			require.Equal(t, int64(len(tt.faults)+1), m.Usage().Attempts)
		})
	}
}

func TestPredictTransientExhausted(t *testing.T) {
	srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Status(429, "4") })
	sl := &sleeps{}
	m := newTestModel(t, srv, sl, func(c *Config) { c.MaxRetries = 2 })
	_, err := m.Predict(context.Background(), query())
	require.ErrorIs(t, err, rwm.ErrTransient)
	var te *rwm.TransientError
	require.ErrorAs(t, err, &te)
	require.Equal(t, 4*time.Second, te.After, "the server's Retry-After reaches rwm.Retry")
	require.Equal(t, 3, srv.Count())
	require.Equal(t, []time.Duration{4 * time.Second, 4 * time.Second}, sl.All())
}

func TestPredictHungConnection(t *testing.T) {
	t.Run("attempt timeout is retried", func(t *testing.T) {
		srv := oaitest.New(t, fakeWorld)
		srv.Push(oaitest.Hang())
		// Generous timeout and retries: a loaded machine must not turn the
		// answered attempt into a second timeout.
		m := newTestModel(t, srv, &sleeps{}, func(c *Config) { c.Timeout = 300 * time.Millisecond; c.MaxRetries = 5 })
		p, err := m.Predict(context.Background(), query())
		require.NoError(t, err)
		require.True(t, p.Valid)
		require.GreaterOrEqual(t, srv.Count(), 2, "the hung attempt was abandoned and retried")
	})
	t.Run("every attempt hangs", func(t *testing.T) {
		srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Hang() })
		m := newTestModel(t, srv, &sleeps{}, func(c *Config) { c.Timeout = 50 * time.Millisecond; c.MaxRetries = 1 })
		_, err := m.Predict(context.Background(), query())
		require.ErrorIs(t, err, rwm.ErrTransient)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("caller cancels", func(t *testing.T) {
		srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Hang() })
		m := newTestModel(t, srv, &sleeps{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := m.Predict(ctx, query())
			done <- err
		}()
		require.True(t, srv.WaitFor(1, 10*time.Second))
		cancel()
		err := <-done
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, errors.Is(err, rwm.ErrTransient))
	})
}

func TestPredictFallsBackToText(t *testing.T) {
	// A server that rejects response_format with 400 is asked again
	// without it, and later requests go without it at once.
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		if r.ResponseFormat != nil {
			return oaitest.Status(400, "")
		}
		return fakeWorld(r)
	})
	m := newTestModel(t, srv, &sleeps{}, nil)
	for range 2 {
		_, err := m.Predict(context.Background(), query())
		require.NoError(t, err)
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, "json_schema", reqs[0].ResponseFormatType())
	require.Equal(t, "", reqs[1].ResponseFormatType())
	require.Equal(t, "", reqs[2].ResponseFormatType())
}

func TestPredictPermanentErrors(t *testing.T) {
	srv := oaitest.New(t, nil)
	srv.Push(oaitest.Status(401, ""))
	m := newTestModel(t, srv, &sleeps{}, func(c *Config) { c.Format = FormatText })
	_, err := m.Predict(context.Background(), query())
	require.Error(t, err)
	require.False(t, errors.Is(err, rwm.ErrTransient))
	require.False(t, errors.Is(err, rwm.ErrBadPrediction))
	require.Equal(t, 1, srv.Count())
}

func TestPredictRejectsInvalidQuery(t *testing.T) {
	srv := oaitest.New(t, fakeWorld)
	m := newTestModel(t, srv, &sleeps{}, nil)
	q := query()
	q.Proposal.Mechanism = " "
	_, err := m.Predict(context.Background(), q)
	require.ErrorIs(t, err, records.ErrInvalid)
	require.Zero(t, srv.Count())
}

func TestNewConfiguration(t *testing.T) {
	env := map[string]string{"OPENAI_BASE_URL": "http://env.example/v1", "OPENAI_API_KEY": "env-key", "LM2LM_MODEL": "env-model"}
	cfg := DefaultConfig()
	cfg.Getenv = func(k string) string { return env[k] }
	m, err := New(cfg)
	require.NoError(t, err)
	require.Equal(t, "env-model", m.Config().Model)
	require.Equal(t, "http://env.example/v1", m.Config().BaseURL)
	require.NotContains(t, m.ID(), "env-key", "the identity never holds the key")
	require.Contains(t, m.ID(), "env-model")

	cfg.Model, cfg.BaseURL = "explicit", "http://explicit/v1"
	m, err = New(cfg)
	require.NoError(t, err)
	require.Equal(t, "explicit", m.Config().Model, "explicit settings win over the environment")
	require.Equal(t, "http://explicit/v1", m.Config().BaseURL)

	cfg = DefaultConfig()
	cfg.Getenv = func(string) string { return "" }
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrNotConfigured)

	cfg.Temperature = -1
	_, err = New(cfg)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrNotConfigured))
}

func TestIDDiffersBySettings(t *testing.T) {
	srv := oaitest.New(t, fakeWorld)
	a := newTestModel(t, srv, &sleeps{}, nil)
	b := newTestModel(t, srv, &sleeps{}, func(c *Config) { c.Temperature = 0.7 })
	c := newTestModel(t, srv, &sleeps{}, func(c *Config) { c.Model = "other" })
	require.NotEqual(t, a.ID(), b.ID())
	require.NotEqual(t, a.ID(), c.ID())
	require.True(t, strings.HasPrefix(a.ID(), "rwm/openai "))
}

func TestPredictBadRequestIsNotAFormatProblem(t *testing.T) {
	// A 400 for another reason fails both ways and does not switch the
	// model to text mode.
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply { return oaitest.Status(400, "") })
	m := newTestModel(t, srv, &sleeps{}, nil)
	_, err := m.Predict(context.Background(), query())
	require.Error(t, err)
	require.False(t, errors.Is(err, rwm.ErrTransient))
	require.Equal(t, 2, srv.Count())
	require.Equal(t, FormatJSONSchema, m.format())
}

func TestPredictJSONObjectFormat(t *testing.T) {
	srv := oaitest.New(t, fakeWorld)
	m := newTestModel(t, srv, &sleeps{}, func(c *Config) { c.Format = FormatJSONObject; c.MaxTokens = 300 })
	_, err := m.Predict(context.Background(), query())
	require.NoError(t, err)
	require.Equal(t, "json_object", srv.Requests()[0].ResponseFormatType())
	require.Equal(t, 300, srv.Requests()[0].MaxTokens)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	for name, edit := range map[string]func(*Config){
		"temperature": func(c *Config) { c.Temperature = 2.5 },
		"max tokens":  func(c *Config) { c.MaxTokens = -1 },
		"format":      func(c *Config) { c.Format = "yaml" },
		"records":     func(c *Config) { c.MaxRecords = -1 },
		"text":        func(c *Config) { c.ProposalTextChars = -1 },
		"retries":     func(c *Config) { c.MaxRetries = -1 },
		"timeout":     func(c *Config) { c.Timeout = -time.Second },
	} {
		c := DefaultConfig()
		edit(&c)
		require.Error(t, c.Validate(), name)
	}
}
