// Package oaichat is the transport shared by rwm/openai and proposer/openai:
// one chat-completions call through the official OpenAI Go SDK with the
// library's own retry policy (429 honouring Retry-After, 408/409/5xx,
// per-attempt timeouts, connection errors, truncated or malformed bodies),
// endpoint resolution from the environment, extraction of a JSON object from
// free text, and fences for data in prompts.
//
// The SDK's built-in retries are switched off (option.WithMaxRetries(0)):
// the library's loop sleeps through an injectable function, so tests run
// fast and deterministic, and it tells a cancelled caller apart from a timed
// out attempt. The package does network I/O; a Client is safe for concurrent
// use.
package oaichat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/lm2lm/lm2lm/internal/wait"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Environment variables read when a setting is empty (explicit settings
// always win; see Resolve).
const (
	EnvBaseURL = "OPENAI_BASE_URL"
	EnvAPIKey  = "OPENAI_API_KEY"
	EnvModel   = "LM2LM_MODEL"
	// DefaultBaseURL is used when neither the settings nor OPENAI_BASE_URL
	// name a server but an API key is known.
	DefaultBaseURL = "https://api.openai.com/v1"
)

// Errors of the package.
var (
	// ErrTransient marks failures worth retrying; after the retries are
	// exhausted the returned error still wraps it.
	ErrTransient = errors.New("transient failure")
	// ErrNotConfigured is returned when no server or no model is known.
	ErrNotConfigured = errors.New("not configured")
	// ErrBodyTooLarge: a response body exceeded Transport.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("response body too large")
)

// Transport holds the transport part of Settings, which rwm/openai,
// rwm/verdict and proposer/openai share: retries of one call, their waits,
// and limits.
type Transport struct {
	// MaxRetries after the first attempt of a call; default 3 (library
	// choice: rides out a short outage; rwm.Retry can add more).
	MaxRetries int
	// Timeout of one attempt; default 2m (library choice: a long reasoning
	// answer fits, a hung connection does not stall a rollout). 0 = none.
	Timeout time.Duration
	// BaseDelay is the first backoff wait, doubled per retry and capped at
	// MaxDelay; defaults 500ms and 30s (library choice: the usual HTTP
	// client backoff). MaxDelay also caps an honoured Retry-After: a server
	// asking for a longer wait fails the call at once with the transient
	// error (carrying the wait, for a caller that wants to honour it).
	BaseDelay, MaxDelay time.Duration
	// MaxBodyBytes bounds a response body: a longer one (by Content-Length
	// or as read) fails the attempt with ErrBodyTooLarge, not transient,
	// having buffered at most this much. Default 4 MiB (library choice: a
	// chat completion with several long samples and log-probabilities is
	// well under 1 MiB). Must be > 0.
	MaxBodyBytes int64
}

// DefaultTransport returns the defaults documented on Transport.
func DefaultTransport() Transport {
	return Transport{MaxRetries: 3, Timeout: 2 * time.Minute, BaseDelay: 500 * time.Millisecond,
		MaxDelay: 30 * time.Second, MaxBodyBytes: 4 << 20}
}

// Validate reports the first problem with t (without a package prefix).
func (t Transport) Validate() error {
	switch {
	case t.MaxRetries < 0:
		return fmt.Errorf("MaxRetries = %d, want ≥ 0", t.MaxRetries)
	case t.Timeout < 0 || t.BaseDelay < 0 || t.MaxDelay < 0:
		return fmt.Errorf("negative duration (Timeout %v, BaseDelay %v, MaxDelay %v)", t.Timeout, t.BaseDelay, t.MaxDelay)
	case t.MaxBodyBytes <= 0:
		return fmt.Errorf("MaxBodyBytes = %d, want > 0", t.MaxBodyBytes)
	}
	return nil
}

// Settings are the endpoint, transport and hooks of an OpenAI-format
// client: the one settings type of rwm/openai, rwm/verdict and
// proposer/openai, each of which embeds it in its Config and re-exports it
// as the alias Settings (with DefaultSettings), so that its fields are
// promoted (cfg.BaseURL, cfg.MaxRetries) and written once, here. Endpoint
// fields left empty are read from the environment when a client is built
// (Resolve; an explicit field always wins).
type Settings struct {
	// BaseURL of the OpenAI-compatible API, e.g. "http://localhost:8000/v1".
	// Default "": $OPENAI_BASE_URL, else https://api.openai.com/v1 when an
	// API key is known (library choice: the SDK's own convention).
	BaseURL string
	// APIKey sent as a bearer token. Default "": $OPENAI_API_KEY; empty
	// sends none (local servers).
	APIKey string
	// Model name sent with every request. Default "": $LM2LM_MODEL;
	// required.
	Model string
	// Transport: retries of one call, their waits and the response body
	// limit; defaults in DefaultTransport (3 retries, 2 min per attempt,
	// backoff 500 ms doubling to 30 s, a Retry-After beyond MaxDelay fails
	// the call at once with the transient error carrying it, bodies up to
	// 4 MiB).
	Transport
	// HTTPClient carries the requests; nil = the SDK's default client.
	HTTPClient *http.Client
	// Sleep waits d between retries or until ctx is done, returning ctx's
	// error then; nil = a timer honouring ctx. Tests inject a recorder so
	// that Retry-After is checked without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock used to read an HTTP-date Retry-After; nil =
	// time.Now.
	Now func() time.Time
	// Getenv reads the environment for the empty endpoint fields; nil =
	// os.Getenv.
	Getenv func(string) string
}

// DefaultSettings returns the defaults documented on Settings: no endpoint
// (the environment's), DefaultTransport, no hooks.
func DefaultSettings() Settings { return Settings{Transport: DefaultTransport()} }

// Resolve fills empty BaseURL, APIKey and Model from getenv (nil =
// os.Getenv): an explicit setting wins over OPENAI_BASE_URL, OPENAI_API_KEY
// and LM2LM_MODEL. With no base URL anywhere but an API key, BaseURL becomes
// DefaultBaseURL. It returns an error wrapping ErrNotConfigured when there is
// neither a base URL nor an API key, or no model.
func Resolve(s Settings, getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if s.BaseURL == "" {
		s.BaseURL = strings.TrimSpace(getenv(EnvBaseURL))
	}
	if s.APIKey == "" {
		s.APIKey = strings.TrimSpace(getenv(EnvAPIKey))
	}
	if s.Model == "" {
		s.Model = strings.TrimSpace(getenv(EnvModel))
	}
	if s.BaseURL == "" {
		if s.APIKey == "" {
			return s, fmt.Errorf("%w: no server: set BaseURL or %s (or %s for %s)", ErrNotConfigured, EnvBaseURL, EnvAPIKey, DefaultBaseURL)
		}
		s.BaseURL = DefaultBaseURL
	}
	if s.Model == "" {
		return s, fmt.Errorf("%w: no model: set Model or %s", ErrNotConfigured, EnvModel)
	}
	return s, nil
}

// Client performs chat-completions calls with retries.
type Client struct {
	s   Settings
	sdk openai.Client

	calls, attempts, promptTokens, completionTokens atomic.Int64
}

// New returns a client for resolved settings (see Resolve).
func New(s Settings) *Client {
	opts := []option.RequestOption{
		option.WithBaseURL(s.BaseURL),
		option.WithAPIKey(s.APIKey),
		option.WithMaxRetries(0),
		option.WithMiddleware(limitBody(s.MaxBodyBytes)),
	}
	if s.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(s.HTTPClient))
	}
	if s.Sleep == nil {
		s.Sleep = wait.Sleep
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return &Client{s: s, sdk: openai.NewClient(opts...)}
}

// Model returns the model name the client sends.
func (c *Client) Model() string { return c.s.Model }

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.s.BaseURL }

// RedactURL returns u without user information (credentials), for
// identities and logs.
func RedactURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		return u
	}
	pu.User = nil
	return pu.String()
}

// Usage counts calls and tokens.
type Usage struct {
	Calls            int64 // successful completions
	Attempts         int64 // HTTP attempts, including failed ones and retries
	PromptTokens     int64
	CompletionTokens int64
}

// Add returns u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.Calls + v.Calls, u.Attempts + v.Attempts, u.PromptTokens + v.PromptTokens, u.CompletionTokens + v.CompletionTokens}
}

// Total returns the cumulative usage of c.
func (c *Client) Total() Usage {
	return Usage{c.calls.Load(), c.attempts.Load(), c.promptTokens.Load(), c.completionTokens.Load()}
}

// AttemptError describes one failed attempt.
type AttemptError struct {
	Status     int           // HTTP status; 0 when none was received
	RetryAfter time.Duration // the server's Retry-After; 0 when absent
	Transient  bool
	Err        error
}

// Error implements error.
func (e *AttemptError) Error() string {
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "status %d", e.Status)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	if e.Err != nil {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err and, for a transient failure, ErrTransient.
func (e *AttemptError) Unwrap() []error {
	if e.Transient {
		return []error{e.Err, ErrTransient}
	}
	return []error{e.Err}
}

// Complete sends params (Model is set from the settings when empty) and
// returns the completion and this call's usage. A failure worth retrying is
// retried up to MaxRetries times, waiting max(Retry-After, backoff); when
// the server asks for a wait longer than MaxDelay, or the retries run out,
// the error wraps ErrTransient and the last *AttemptError. A cancelled ctx
// returns ctx.Err() wrapped. Other failures (4xx but 408, 409 and 429) are
// returned at once as *AttemptError without ErrTransient. A completion with
// no choices counts as a malformed (transient) answer.
func (c *Client) Complete(ctx context.Context, params openai.ChatCompletionNewParams) (*openai.ChatCompletion, Usage, error) {
	if params.Model == "" {
		params.Model = c.s.Model
	}
	var u Usage
	var last *AttemptError
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, u, fmt.Errorf("cancelled: %w", err)
		}
		u.Attempts++
		c.attempts.Add(1)
		comp, aerr := c.once(ctx, params)
		if aerr == nil {
			cu := Usage{Calls: 1, PromptTokens: comp.Usage.PromptTokens, CompletionTokens: comp.Usage.CompletionTokens}
			u = u.Add(cu)
			c.calls.Add(1)
			c.promptTokens.Add(cu.PromptTokens)
			c.completionTokens.Add(cu.CompletionTokens)
			return comp, u, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, u, fmt.Errorf("cancelled: %w", err)
		}
		last = aerr
		if !aerr.Transient {
			return nil, u, aerr
		}
		if attempt >= c.s.MaxRetries {
			return nil, u, fmt.Errorf("%d attempts failed: %w", attempt+1, last)
		}
		if c.s.MaxDelay > 0 && aerr.RetryAfter > c.s.MaxDelay {
			return nil, u, fmt.Errorf("server asks to wait %v, more than the %v allowed: %w", aerr.RetryAfter, c.s.MaxDelay, last)
		}
		delay := max(Backoff(c.s.BaseDelay, c.s.MaxDelay, attempt), aerr.RetryAfter)
		if err := c.s.Sleep(ctx, delay); err != nil {
			return nil, u, fmt.Errorf("cancelled while waiting to retry after (%v): %w", last, err)
		}
	}
}

// Backoff returns the wait before retry number attempt+1 (attempt counts
// from 0): base·2^attempt, capped at maxDelay (when > 0). There is no
// jitter, so a run is reproducible; a concurrency limit in front of the
// model keeps retries from bunching.
func Backoff(base, maxDelay time.Duration, attempt int) time.Duration {
	d := float64(base) * math.Pow(2, float64(attempt))
	if maxDelay > 0 && d > float64(maxDelay) {
		return maxDelay
	}
	if d > float64(math.MaxInt64/2) {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(d)
}

func (c *Client) once(ctx context.Context, params openai.ChatCompletionNewParams) (*openai.ChatCompletion, *AttemptError) {
	actx := ctx
	if c.s.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.s.Timeout)
		defer cancel()
	}
	var res *http.Response
	comp, err := c.sdk.Chat.Completions.New(actx, params, option.WithResponseInto(&res))
	if err == nil {
		if comp == nil || len(comp.Choices) == 0 {
			return nil, &AttemptError{Status: statusOf(res), Transient: true, Err: errors.New("malformed completion: no choices")}
		}
		return comp, nil
	}
	if ctx.Err() != nil {
		return nil, &AttemptError{Err: ctx.Err()}
	}
	if actx.Err() != nil {
		return nil, &AttemptError{Transient: true, Err: fmt.Errorf("attempt timed out after %v: %w", c.s.Timeout, actx.Err())}
	}
	if errors.Is(err, ErrBodyTooLarge) {
		// A server that sends more than the limit will do so again.
		return nil, &AttemptError{Status: statusOf(res), Err: err}
	}
	status := statusOf(res)
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		status = apiErr.StatusCode
		if res == nil {
			res = apiErr.Response
		}
	}
	ae := &AttemptError{Status: status, Err: err}
	switch {
	case status == 0:
		ae.Transient = true // connection refused, reset, EOF
	case status < 300:
		ae.Transient = true // truncated or malformed body
		ae.Err = fmt.Errorf("malformed response body: %w", err)
	case status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500:
		ae.Transient = true
		ae.RetryAfter = RetryAfter(res, c.s.Now())
	}
	return nil, ae
}

// limitBody is a middleware that fails a response whose body is longer
// than n bytes (0 or less: no limit) with ErrBodyTooLarge: at once when
// Content-Length says so, otherwise when the reader gets past n bytes, so
// that nothing above n+1 bytes is ever buffered.
func limitBody(n int64) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err != nil || res == nil || res.Body == nil || n <= 0 {
			return res, err
		}
		if res.ContentLength > n {
			res.Body.Close()
			res.Body = io.NopCloser(strings.NewReader(""))
			return res, fmt.Errorf("%w: Content-Length %d, limit %d", ErrBodyTooLarge, res.ContentLength, n)
		}
		res.Body = &limitedBody{rc: res.Body, left: n, limit: n}
		return res, nil
	}
}

// limitedBody reads at most limit bytes of rc and fails past them.
type limitedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(b.rc, one[:]); n > 0 {
			return 0, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, b.limit)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

func statusOf(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}

// RetryAfter reads Retry-After-Ms (milliseconds) or Retry-After (seconds or
// an HTTP-date, relative to now) from res; 0 when absent, unparseable,
// negative or in the past.
func RetryAfter(res *http.Response, now time.Time) time.Duration {
	if res == nil {
		return 0
	}
	if v := strings.TrimSpace(res.Header.Get("Retry-After-Ms")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e12 {
			return time.Duration(f * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(res.Header.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f > 0 && f < 1e9 {
			return time.Duration(f * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// MaxJSONInput bounds the text FirstJSONObject scans.
const MaxJSONInput = 1 << 20

// FirstJSONObject returns the first balanced, valid JSON object in s (the
// whole answer of a server in JSON mode, or an object inside prose or a
// Markdown code fence). It scans at most MaxJSONInput bytes.
func FirstJSONObject(s string) (string, bool) {
	if len(s) > MaxJSONInput {
		s = s[:MaxJSONInput]
	}
	for start := strings.IndexByte(s, '{'); start >= 0; {
		if end, ok := balanced(s, start); ok {
			cand := s[start:end]
			if json.Valid([]byte(cand)) {
				return cand, true
			}
		}
		next := strings.IndexByte(s[start+1:], '{')
		if next < 0 {
			break
		}
		start += 1 + next
	}
	return "", false
}

// balanced returns the end (exclusive) of the brace group opening at s[i],
// skipping braces inside JSON strings.
func balanced(s string, i int) (int, bool) {
	depth := 0
	inStr, esc := false, false
	for j := i; j < len(s); j++ {
		ch := s[j]
		if inStr {
			switch {
			case esc:
				esc = false
			case ch == '\\':
				esc = true
			case ch == '"':
				inStr = false
			}
			continue
		}
		switch ch {
		case '"':
			inStr = true
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// Fence returns a fence token for data: "DATA-" and 16 hex digits of the
// SHA-256 of data (and a counter, in the impossible case that data already
// holds the token). The token does not occur in data, so data placed between
// "<<<token" and "token>>>" lines cannot close its fence: to do so it would
// have to contain a prefix of its own hash.
func Fence(data string) string {
	for i := 0; ; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s", i, data)))
		tok := "DATA-" + hex.EncodeToString(h[:8])
		if !strings.Contains(data, tok) {
			return tok
		}
	}
}

// JSONData encodes v as JSON with HTML escaping, so that the text holds no
// '<', '>' or '&' and no raw newlines inside strings: a fence made of angle
// brackets cannot appear in it.
func JSONData(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Truncate shortens s to at most n bytes on a rune boundary, marking the cut
// with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Plain makes a short trusted field (a task ID, family or metric) safe to
// print outside a data block: line breaks, control characters and angle
// brackets become spaces, and the result is at most 100 bytes.
func Plain(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == '<' || r == '>' || r == 0x2028 || r == 0x2029 {
			return ' '
		}
		return r
	}, s)
	return Truncate(s, 100)
}

// Budget renders a task's training budget for a prompt: the number, or
// "unknown" when it is not positive (records.Task.Budget 0 = unknown).
func Budget(b int) string {
	if b <= 0 {
		return "unknown"
	}
	return strconv.Itoa(b)
}

// TaskLine is the JSON line that shows a task in both backends' prompts
// (the TASK line of a world model's data block, the task of a proposer's).
type TaskLine struct {
	ID          string  `json:"id"`
	Family      string  `json:"family"`
	Metric      string  `json:"metric"`
	RefLoss     float64 `json:"ref_loss"`
	SeedNoise   float64 `json:"seed_noise"`
	Budget      int     `json:"budget,omitempty"`
	Description string  `json:"description,omitempty"`
}

// MaxDescription is how many bytes of a task description a prompt shows.
const MaxDescription = 2000

// NewTaskLine returns t's line, its description cut to MaxDescription bytes.
func NewTaskLine(t records.Task) TaskLine {
	return TaskLine{ID: t.ID, Family: t.Family, Metric: string(t.Metric), RefLoss: t.RefLoss,
		SeedNoise: t.SeedNoise, Budget: t.Budget, Description: Truncate(t.Description, MaxDescription)}
}

// WorldModelError is the error a world model over a Client returns for a
// failed call err (prefix names the package, model the model): ctx's end
// wrapped as it is, a transient failure as an *rwm.TransientError carrying
// the server's Retry-After, anything else wrapped with the model's name.
func WorldModelError(ctx context.Context, prefix, model string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	if errors.Is(err, ErrTransient) {
		te := &rwm.TransientError{Err: fmt.Errorf("%s: %s: %w", prefix, model, err)}
		var ae *AttemptError
		if errors.As(err, &ae) {
			te.After = ae.RetryAfter
		}
		return te
	}
	return fmt.Errorf("%s: %s: %w", prefix, model, err)
}

// IsStatus reports whether err holds an attempt that failed with the HTTP
// status.
func IsStatus(err error, status int) bool {
	var ae *AttemptError
	return errors.As(err, &ae) && ae.Status == status
}

// Params returns the request of one system and one user message to model
// at temperature with seed, capped at maxTokens completion tokens when
// maxTokens > 0 (else the server's limit); the caller adds any
// response_format.
func Params(model, system, user string, temperature float64, seed int64, maxTokens int) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:       model,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)},
		Temperature: openai.Float(temperature),
		Seed:        openai.Int(seed),
	}
	if maxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(maxTokens))
	}
	return p
}
