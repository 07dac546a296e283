package verdict

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// Config parameterises a Model. Endpoint fields left empty are read from
// the environment when the model is built ($OPENAI_BASE_URL,
// $OPENAI_API_KEY, $LM2LM_MODEL; an explicit field always wins).
type Config struct {
	// Settings: the endpoint (BaseURL, APIKey and Model, each read from
	// the environment when empty), the Transport (retries, timeouts, the
	// response body limit) and the hooks (HTTPClient, Sleep, Now, Getenv)
	// that rwm/openai, rwm/verdict and proposer/openai share; its fields are
	// promoted (cfg.MaxRetries names the retries). Defaults in
	// DefaultSettings; a Transport.MaxBodyBytes of 0 means the default
	// 4 MiB here, so that a Config written out without Transport keeps the
	// limit it had (a longer body is ErrBodyTooLarge, not retried).
	Settings
	// Temperature; default 0 (library choice: WMRL's world model is frozen
	// and prompted only, METHOD.md §2, so the same solution should get the
	// same verdict). Seed is sent with every request; default 0.
	Temperature float64
	Seed        int64
	// MaxTokens caps the answer; 0 = the server's limit.
	MaxTokens int
	// JSONSchema asks for structured output with ResponseSchema; default
	// true. A server that rejects it with 400 is asked again without it,
	// and the model keeps to plain text after that succeeds. An answer to
	// the schema must be exactly one JSON object (ParseJSON); a text answer
	// may hold exactly one, prose around it aside (ParseText); both are
	// read strictly after that.
	JSONSchema bool
	// Checks is the battery; default DefaultChecks (WMRL's eight).
	Checks []Check
	// Quality maps predicted buckets to leaderboard percentiles; default
	// reward.DefaultQualityTable (library choice).
	Quality reward.QualityTable
	// MinConfidence is the confidence from which a failing prediction
	// decides the verdict (Aggregate); default 0.5 (library choice: the
	// model must think a failure more likely than not).
	MinConfidence float64
	// MaxCodeBytes is the most of a solution shown; default 32000 (library
	// choice: about 8k tokens). Longer code is cut with a marker.
	MaxCodeBytes int
}

// Settings are the endpoint, transport and hooks that rwm/openai,
// rwm/verdict and proposer/openai share: one type for the three clients,
// embedded in each Config; see its fields.
type Settings = oaichat.Settings

// Transport is the transport part of Settings (retries, timeouts, the
// response body limit); see its fields.
type Transport = oaichat.Transport

// DefaultSettings returns the defaults documented on Settings.
func DefaultSettings() Settings { return oaichat.DefaultSettings() }

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{JSONSchema: true, Checks: DefaultChecks(), Quality: reward.DefaultQualityTable(), MinConfidence: 0.5,
		MaxCodeBytes: 32000, Settings: DefaultSettings()}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.Temperature) || c.Temperature < 0 || c.Temperature > 2:
		return fmt.Errorf("rwm/verdict: Temperature = %g, want in [0, 2]", c.Temperature)
	case c.MaxTokens < 0 || c.MaxCodeBytes < 0:
		return fmt.Errorf("rwm/verdict: MaxTokens %d, MaxCodeBytes %d, want ≥ 0", c.MaxTokens, c.MaxCodeBytes)
	case len(c.Checks) == 0:
		return errors.New("rwm/verdict: no checks")
	case !(c.MinConfidence >= 0 && c.MinConfidence <= 1):
		return fmt.Errorf("rwm/verdict: MinConfidence = %g, want in [0, 1]", c.MinConfidence)
	}
	if err := c.transport().Validate(); err != nil {
		return fmt.Errorf("rwm/verdict: %w", err)
	}
	seen := map[string]bool{}
	for i, ch := range c.Checks {
		if strings.TrimSpace(ch.Name) == "" || strings.TrimSpace(ch.Instruction) == "" || seen[ch.Name] {
			return fmt.Errorf("rwm/verdict: check %d (%q): want a unique name and an instruction", i, ch.Name)
		}
		seen[ch.Name] = true
	}
	return c.Quality.Validate()
}

// transport is c.Transport with MaxBodyBytes 0 read as the default.
func (c Config) transport() Transport {
	t := c.Transport
	if t.MaxBodyBytes == 0 {
		t.MaxBodyBytes = DefaultSettings().MaxBodyBytes
	}
	return t
}

// Model is WMRL's verdict world model over an OpenAI-compatible server
// (METHOD.md §2): one call per solution returns a JSON verdict over the
// check battery, aggregated onto the execution ladder. It is an
// rwm.WorldModel whose Gain is the ladder score in [0, 1] (the units of
// builder/grader's outcomes), so WMRL's anchors, debiasing and weighting
// apply unchanged. It is safe for concurrent use.
type Model struct {
	cfg      Config
	client   *oaichat.Client
	textOnly atomic.Bool
	id       string
}

var (
	_ rwm.WorldModel = (*Model)(nil)
	_ rwm.Identifier = (*Model)(nil)
)

// Errors of the transport.
var (
	// ErrNotConfigured: no server or no model name is known.
	ErrNotConfigured = oaichat.ErrNotConfigured
	// ErrBodyTooLarge: a response body exceeded Transport.MaxBodyBytes;
	// the call fails at once (not transient), having buffered at most that
	// much.
	ErrBodyTooLarge = oaichat.ErrBodyTooLarge
)

// New validates cfg, fills empty endpoint fields from the environment and
// returns a model; an error wraps ErrNotConfigured when no server or model
// is known.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st := cfg.Settings
	st.Transport = cfg.transport()
	s, err := oaichat.Resolve(st, cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("rwm/verdict: %w", err)
	}
	cfg.BaseURL, cfg.APIKey, cfg.Model = s.BaseURL, s.APIKey, s.Model
	cfg.Checks = append([]Check(nil), cfg.Checks...)
	battery, _ := json.Marshal(cfg.Checks)
	h := sha256.Sum256(battery)
	m := &Model{cfg: cfg, client: oaichat.New(s)}
	m.id = fmt.Sprintf("rwm/verdict %s@%s temperature=%g seed=%d schema=%t checks=%s quality=%g/%g/%g/%g min-confidence=%g code=%d prompt=%s",
		cfg.Model, oaichat.RedactURL(cfg.BaseURL), cfg.Temperature, cfg.Seed, cfg.JSONSchema, hex.EncodeToString(h[:6]),
		cfg.Quality.Low, cfg.Quality.Fair, cfg.Quality.Mid, cfg.Quality.High, cfg.MinConfidence, cfg.MaxCodeBytes, PromptVersion)
	return m, nil
}

// ID names the model for caches (no key).
func (m *Model) ID() string { return m.id }

// Config returns the configuration with the endpoint resolved.
func (m *Model) Config() Config { return m.cfg }

// ResponseSchema is the JSON schema of the answer (strict structured
// output).
var ResponseSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"reason": map[string]any{"type": "string"},
		"predictions": map[string]any{"type": "array", "items": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"status":         map[string]any{"type": "string", "enum": []string{"malformed", "syntax_err", "runtime_err", "ran_no_sub", "valid"}},
				"error_type":     map[string]any{"type": "string"},
				"error_line":     map[string]any{"type": "integer"},
				"quality_bucket": map[string]any{"type": "string", "enum": []string{"low", "fair", "mid", "high"}},
				"confidence":     map[string]any{"type": "number"},
				"feedback":       map[string]any{"type": "string"},
			},
			"required":             []string{"status", "error_type", "error_line", "quality_bucket", "confidence", "feedback"},
			"additionalProperties": false,
		}},
	},
	"required":             []string{"reason", "predictions"},
	"additionalProperties": false,
}

// Judgement is the verdict on one solution: the parsed verdict (empty when
// the code short-circuited) and its ladder outcome.
type Judgement struct {
	Verdict Verdict
	Outcome Outcome
	// Short is set when no call was made: the code is empty or not text.
	Short bool
	Usage rwm.Usage
}

// Precheck returns the outcome of code that needs no call: empty or blank
// code, invalid UTF-8 or a NUL byte is reward.Malformed (score 0). ok is
// false when the code must be judged by the model.
func Precheck(code string) (o Outcome, reason string, ok bool) {
	switch {
	case strings.TrimSpace(code) == "":
		reason = "empty solution"
	case !utf8.ValidString(code) || strings.ContainsRune(code, 0):
		reason = "the solution is not text (invalid UTF-8 or a NUL byte)"
	default:
		return Outcome{}, "", false
	}
	return Outcome{Status: reward.Malformed, Decider: -1}, reason, true
}

// Judge asks the model for its verdict on code as a solution of task
// (task.ID and task.Description are shown). Errors: a done ctx wraps
// ctx.Err(); exhausted transient failures, and a Retry-After beyond
// MaxDelay (not waited for), are an *rwm.TransientError; a response body
// beyond MaxBodyBytes wraps ErrBodyTooLarge; an unusable answer (refusal,
// not exactly one JSON object, a repeated key, missing fields, unknown
// status) is a *ParseError wrapping rwm.ErrBadPrediction.
func (m *Model) Judge(ctx context.Context, task records.Task, code string) (Judgement, error) {
	if err := ctx.Err(); err != nil {
		return Judgement{}, fmt.Errorf("rwm/verdict: %w", err)
	}
	if o, reason, ok := Precheck(code); ok {
		return Judgement{Verdict: Verdict{Reason: reason}, Outcome: o, Short: true}, nil
	}
	system, user, err := Prompt(task.ID, task.Description, code, m.cfg.Checks, m.cfg.MaxCodeBytes)
	if err != nil {
		return Judgement{}, err
	}
	content, schema, usage, err := m.complete(ctx, system, user)
	j := Judgement{Usage: usage}
	if err != nil {
		return j, err
	}
	read := ParseText
	if schema {
		read = ParseJSON
	}
	if j.Verdict, err = read(content, len(m.cfg.Checks)); err != nil {
		return j, err
	}
	j.Outcome, err = Aggregate(j.Verdict, m.cfg.Quality, m.cfg.MinConfidence)
	return j, err
}

// Predict implements rwm.WorldModel: q.Proposal.Text is the solution's
// code, q.Evidence is not shown (WMRL's world model is prompted only,
// METHOD.md §2). The prediction is Valid with Gain the ladder score of the
// aggregated verdict, Low and High the range of the checks' own scores,
// and Reason "<status> (q …): <reason>". An invalid query wraps
// records.ErrInvalid; other errors are Judge's.
func (m *Model) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if err := ctx.Err(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("rwm/verdict: predict: %w", err)
	}
	if err := q.Validate(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("rwm/verdict: predict: %w", err)
	}
	j, err := m.Judge(ctx, q.Task, q.Proposal.Text)
	if err != nil {
		return rwm.Prediction{Usage: j.Usage}, err
	}
	return j.Prediction(), nil
}

// Prediction is j as an rwm.Prediction.
func (j Judgement) Prediction() rwm.Prediction {
	o := j.Outcome
	reason := string(o.Status)
	if o.Status == reward.ValidSubmission {
		reason += fmt.Sprintf(" (q %.3f)", o.Q)
	}
	if j.Verdict.Reason != "" {
		reason += ": " + j.Verdict.Reason
	}
	p := rwm.Prediction{Gain: o.Score, Valid: true, Reason: oaichat.Truncate(reason, 500), Usage: j.Usage}
	if !j.Short {
		p.Low, p.High, p.HasInterval = o.Low, o.High, true
	}
	return p
}

func (m *Model) params(system, user string, schema bool) sdk.ChatCompletionNewParams {
	p := oaichat.Params(m.cfg.Model, system, user, m.cfg.Temperature, m.cfg.Seed, m.cfg.MaxTokens)
	if schema {
		p.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "verdict", Strict: sdk.Bool(true), Schema: ResponseSchema},
		}}
	}
	return p
}

// complete makes the call (falling back to plain text once when the server
// rejects the schema) and returns the answer's content and whether it was
// asked for with the schema.
func (m *Model) complete(ctx context.Context, system, user string) (string, bool, rwm.Usage, error) {
	schema := m.cfg.JSONSchema && !m.textOnly.Load()
	comp, u, err := m.client.Complete(ctx, m.params(system, user, schema))
	if err != nil && schema && oaichat.IsStatus(err, http.StatusBadRequest) {
		var u2 oaichat.Usage
		comp, u2, err = m.client.Complete(ctx, m.params(system, user, false))
		u = u.Add(u2)
		if err == nil {
			m.textOnly.Store(true)
			schema = false
		}
	}
	usage := rwm.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	if err != nil {
		return "", schema, usage, oaichat.WorldModelError(ctx, "rwm/verdict", m.cfg.Model, err)
	}
	ch := comp.Choices[0]
	if ch.Message.Refusal != "" || ch.FinishReason == "content_filter" {
		msg := ch.Message.Refusal
		if msg == "" {
			msg = "finish_reason content_filter"
		}
		return "", schema, usage, &ParseError{Content: oaichat.Truncate(msg, 200), Err: ErrRefused}
	}
	if ch.FinishReason == "length" {
		return "", schema, usage, &ParseError{Detail: "the answer was cut at the token limit", Content: oaichat.Truncate(ch.Message.Content, 200), Err: ErrNoJSON}
	}
	return ch.Message.Content, schema, usage, nil
}
