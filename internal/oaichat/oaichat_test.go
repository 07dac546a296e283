package oaichat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/internal/oaitest"
)

func TestResolvePrecedence(t *testing.T) {
	env := map[string]string{EnvBaseURL: "http://env/v1", EnvAPIKey: "env-key", EnvModel: "env-model"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		in      Settings
		env     func(string) string
		want    Settings
		wantErr bool
	}{
		{"explicit wins", Settings{BaseURL: "http://x/v1", APIKey: "k", Model: "m"}, getenv, Settings{BaseURL: "http://x/v1", APIKey: "k", Model: "m"}, false},
		{"env fills", Settings{}, getenv, Settings{BaseURL: "http://env/v1", APIKey: "env-key", Model: "env-model"}, false},
		{"key only means official endpoint", Settings{APIKey: "k", Model: "m"}, func(string) string { return "" }, Settings{BaseURL: DefaultBaseURL, APIKey: "k", Model: "m"}, false},
		{"nothing", Settings{Model: "m"}, func(string) string { return "" }, Settings{}, true},
		{"no model", Settings{BaseURL: "http://x/v1"}, func(string) string { return "" }, Settings{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.in, tt.env)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrNotConfigured)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.BaseURL, got.BaseURL)
			require.Equal(t, tt.want.APIKey, got.APIKey)
			require.Equal(t, tt.want.Model, got.Model)
		})
	}
}

func TestFirstJSONObject(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`{"a":1}`, `{"a":1}`, true},
		{"Sure! Here it is:\n```json\n{\"gain\": 0.01, \"r\": \"a } b\"}\n```\nHope it helps {", `{"gain": 0.01, "r": "a } b"}`, true},
		{`{bad} then {"x":{"y":[1,2]}}`, `{"x":{"y":[1,2]}}`, true},
		{`{"s":"quote \" and { brace"}`, `{"s":"quote \" and { brace"}`, true},
		{`{"gain": NaN}`, ``, false},
		{`{"gain": 1`, ``, false},
		{`no json at all`, ``, false},
		{``, ``, false},
	}
	for _, tt := range tests {
		got, ok := FirstJSONObject(tt.in)
		require.Equal(t, tt.ok, ok, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}

func FuzzFirstJSONObject(f *testing.F) {
	for _, s := range []string{`{"a":1}`, "x {\"a\": \"}\"} y", `{{{`, `}{"b":[{}]}`, `"{"`, `{"a":"\"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := FirstJSONObject(s)
		if !ok {
			return
		}
		if !json.Valid([]byte(got)) || got[0] != '{' || !strings.Contains(s, got) {
			t.Fatalf("FirstJSONObject(%q) = %q, not a valid object inside the input", s, got)
		}
	})
}

func TestFenceAbsentFromData(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		data := rapid.String().Draw(t, "data")
		tok := Fence(data)
		if strings.Contains(data, tok) {
			t.Fatalf("fence %q occurs in %q", tok, data)
		}
		if Fence(data) != tok {
			t.Fatalf("fence not deterministic")
		}
	})
}

func TestJSONDataHasNoAngleBracketsOrNewlines(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		out, err := JSONData(map[string]string{"text": s})
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(out, "<>\n\r") {
			t.Fatalf("JSONData(%q) = %q holds a fence or line character", s, out)
		}
	})
}

func TestBackoff(t *testing.T) {
	// base·2^attempt, capped.
	require.Equal(t, 500*time.Millisecond, Backoff(500*time.Millisecond, 30*time.Second, 0))
	require.Equal(t, 2*time.Second, Backoff(500*time.Millisecond, 30*time.Second, 2))
	require.Equal(t, 30*time.Second, Backoff(500*time.Millisecond, 30*time.Second, 10))
	require.Equal(t, 30*time.Second, Backoff(500*time.Millisecond, 30*time.Second, 5000))
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	res := func(k, v string) *http.Response {
		h := http.Header{}
		h.Set(k, v)
		return &http.Response{Header: h}
	}
	require.Equal(t, 7*time.Second, RetryAfter(res("Retry-After", "7"), now))
	require.Equal(t, 1500*time.Millisecond, RetryAfter(res("Retry-After", "1.5"), now))
	require.Equal(t, 250*time.Millisecond, RetryAfter(res("Retry-After-Ms", "250"), now))
	require.Equal(t, 10*time.Second, RetryAfter(res("Retry-After", now.Add(10*time.Second).Format(http.TimeFormat)), now))
	require.Zero(t, RetryAfter(res("Retry-After", "soon"), now))
	require.Zero(t, RetryAfter(res("Retry-After", "-3"), now))
	require.Zero(t, RetryAfter(nil, now))
}

// recorder is an injected Sleep that records the waits without waiting.
type recorder struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.delays = append(r.delays, d)
	r.mu.Unlock()
	return ctx.Err()
}

func newClient(srv *oaitest.Server, rec *recorder, retries int) *Client {
	return New(Settings{BaseURL: srv.URL(), Model: "m", Transport: Transport{MaxRetries: retries, Timeout: 5 * time.Second,
		BaseDelay: 100 * time.Millisecond, MaxDelay: 20 * time.Second}, Sleep: rec.sleep})
}

func params() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
}

func TestCompleteRetries(t *testing.T) {
	tests := []struct {
		name       string
		faults     []oaitest.Reply
		wantDelays []time.Duration
	}{
		// Retry-After (seconds) is honoured when longer than the backoff.
		{"429 retry-after", []oaitest.Reply{oaitest.Status(429, "3")}, []time.Duration{3 * time.Second}},
		// backoff 100ms, 200ms when the server gives no hint.
		{"500 then 503", []oaitest.Reply{oaitest.Status(500, ""), oaitest.Status(503, "")}, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"truncated body", []oaitest.Reply{oaitest.Truncated(oaitest.Text("hello"), 40)}, []time.Duration{100 * time.Millisecond}},
		{"malformed body", []oaitest.Reply{oaitest.Raw(`{"id": "x", "choices": [`)}, []time.Duration{100 * time.Millisecond}},
		{"no choices", []oaitest.Reply{oaitest.Raw(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[]}`)}, []time.Duration{100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Text("ok") })
			srv.Push(tt.faults...)
			rec := &recorder{}
			c := newClient(srv, rec, 3)
			comp, u, err := c.Complete(context.Background(), params())
			require.NoError(t, err)
			require.Equal(t, "ok", comp.Choices[0].Message.Content)
			require.Equal(t, tt.wantDelays, rec.delays)
			require.Equal(t, int64(len(tt.faults)+1), u.Attempts)
			require.Equal(t, int64(1), u.Calls)
			require.Equal(t, len(tt.faults)+1, srv.Count())
		})
	}
}

func TestCompleteExhausted(t *testing.T) {
	srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Status(429, "2") })
	rec := &recorder{}
	c := newClient(srv, rec, 2)
	_, _, err := c.Complete(context.Background(), params())
	require.ErrorIs(t, err, ErrTransient)
	var ae *AttemptError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 429, ae.Status)
	require.Equal(t, 2*time.Second, ae.RetryAfter)
	require.Equal(t, 3, srv.Count())
}

func TestCompleteRetryAfterTooLong(t *testing.T) {
	srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Status(429, "3600") })
	rec := &recorder{}
	c := newClient(srv, rec, 5)
	_, _, err := c.Complete(context.Background(), params())
	require.ErrorIs(t, err, ErrTransient)
	require.Empty(t, rec.delays, "must not wait beyond MaxDelay")
	require.Equal(t, 1, srv.Count())
}

func TestCompletePermanent(t *testing.T) {
	for _, code := range []int{400, 401, 404} {
		srv := oaitest.New(t, nil)
		srv.Push(oaitest.Status(code, ""))
		rec := &recorder{}
		_, _, err := newClient(srv, rec, 3).Complete(context.Background(), params())
		require.Error(t, err)
		require.False(t, errors.Is(err, ErrTransient), "status %d is not transient", code)
		require.Equal(t, 1, srv.Count())
	}
}

func TestCompleteHungConnection(t *testing.T) {
	srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Text("ok") })
	srv.Push(oaitest.Hang())
	rec := &recorder{}
	c := New(Settings{BaseURL: srv.URL(), Model: "m", Transport: Transport{MaxRetries: 5, Timeout: 300 * time.Millisecond, BaseDelay: time.Millisecond}, Sleep: rec.sleep})
	comp, _, err := c.Complete(context.Background(), params())
	require.NoError(t, err, "a timed-out attempt is retried")
	require.Equal(t, "ok", comp.Choices[0].Message.Content)
	require.GreaterOrEqual(t, srv.Count(), 2)
}

func TestCompleteCancelledWhileHung(t *testing.T) {
	srv := oaitest.New(t, nil)
	srv.Push(oaitest.Hang())
	c := New(Settings{BaseURL: srv.URL(), Model: "m", Transport: Transport{MaxRetries: 3}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Complete(ctx, params())
		done <- err
	}()
	require.True(t, srv.WaitFor(1, 10*time.Second))
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, ErrTransient))
}

func TestRedactURL(t *testing.T) {
	require.Equal(t, "http://host:8000/v1", RedactURL("http://user:secret@host:8000/v1"))
	require.Equal(t, "http://host/v1", RedactURL("http://host/v1"))
}

func TestBudget(t *testing.T) {
	for b, want := range map[int]string{0: "unknown", -3: "unknown", 1: "1", 600: "600"} {
		if got := Budget(b); got != want {
			t.Errorf("Budget(%d) = %q, want %q", b, got, want)
		}
	}
}
