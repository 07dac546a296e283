package openai

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/rwm"
)

// Format selects the response_format a request asks for.
type Format string

const (
	// FormatJSONSchema asks for structured output with ResponseSchema
	// (response_format type "json_schema", strict).
	FormatJSONSchema Format = "json_schema"
	// FormatJSONObject asks for JSON mode (type "json_object").
	FormatJSONObject Format = "json_object"
	// FormatText sends no response_format; the prompt alone asks for JSON.
	FormatText Format = "text"
)

// Config parameterises a Model. Endpoint fields left empty are read from
// the environment when the model is built (an explicit field always wins).
type Config struct {
	// Settings: the endpoint (BaseURL, APIKey and Model, each read from
	// the environment when empty), the Transport (retries, timeouts, the
	// response body limit) and the hooks (HTTPClient, Sleep, Now, Getenv)
	// that rwm/openai, rwm/verdict and proposer/openai share; its fields are
	// promoted. Defaults in DefaultSettings.
	Settings
	// Temperature of the world model's sampling; default 0. Library choice:
	// the paper's W is frozen (METHOD.md §1 Research World Model), so the
	// same query should get the same answer.
	Temperature float64
	// Seed sent with every request; default 0 (library choice: servers that
	// honour it answer a repeated query identically even above temperature 0).
	Seed int64
	// MaxTokens caps the answer (max_completion_tokens); default 0 = the
	// server's limit (library choice: reasoning models need room).
	MaxTokens int
	// Format of the requested answer; default FormatJSONSchema. An answer
	// to a JSON format must be exactly one JSON object
	// (ParsePredictionJSON); a text answer must hold exactly one
	// (ParsePrediction). A server that rejects a JSON format with 400 is
	// asked again without it; if that succeeds, the model keeps to
	// FormatText.
	Format Format
	// MaxRecords is the most records of M shown; default 64. ContextChars
	// bounds their encoded size in bytes; default 24000 (library choice:
	// about 6k tokens, room for the rest in an 8k context). The most
	// relevant records come first and the list stops at the first record
	// that does not fit.
	MaxRecords, ContextChars int
	// ShowProposalText puts the proposals' free text (records.Proposal
	// Text: the query's, and each shown record's) in the prompt; default
	// false, so that the model reads the parsed proposal only (mechanism
	// and parameters) and its prediction depends on the proposal key (as
	// rwm.Cache assumes when it keys by records.Proposal.Key). The risk of
	// true: the text is written by the policy being trained, and a
	// proposer trained by RL against an LLM judge learns to write text
	// that persuades the judge (claims of success, appeals, instructions
	// dressed as data) instead of changes that work; the fence keeps the
	// text from escaping the data block, not from swaying the reader.
	ShowProposalText bool
	// RecordTextChars truncates each record's proposal text and
	// ProposalTextChars the query proposal's, when ShowProposalText is
	// set; defaults 240 and 2000; 0 omits that text.
	RecordTextChars, ProposalTextChars int
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
	return Config{
		Format:            FormatJSONSchema,
		MaxRecords:        64,
		ContextChars:      24000,
		RecordTextChars:   240,
		ProposalTextChars: 2000,
		Settings:          DefaultSettings(),
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.Temperature) || c.Temperature < 0 || c.Temperature > 2:
		return fmt.Errorf("rwm/openai: Temperature = %g, want in [0, 2]", c.Temperature)
	case c.MaxTokens < 0:
		return fmt.Errorf("rwm/openai: MaxTokens = %d, want ≥ 0", c.MaxTokens)
	case c.Format != FormatJSONSchema && c.Format != FormatJSONObject && c.Format != FormatText:
		return fmt.Errorf("rwm/openai: unknown Format %q", c.Format)
	case c.MaxRecords < 0 || c.ContextChars < 0:
		return fmt.Errorf("rwm/openai: MaxRecords = %d, ContextChars = %d, want ≥ 0", c.MaxRecords, c.ContextChars)
	case c.RecordTextChars < 0 || c.ProposalTextChars < 0:
		return fmt.Errorf("rwm/openai: RecordTextChars = %d, ProposalTextChars = %d, want ≥ 0", c.RecordTextChars, c.ProposalTextChars)
	}
	if err := c.Transport.Validate(); err != nil {
		return fmt.Errorf("rwm/openai: %w", err)
	}
	return nil
}

// Model is an LLM world model. It is safe for concurrent use.
type Model struct {
	cfg      Config
	client   *oaichat.Client
	textOnly atomic.Bool // set after the server rejected json_schema
	id       string
}

var (
	_ rwm.WorldModel = (*Model)(nil)
	_ rwm.Identifier = (*Model)(nil)
)

// New validates cfg, fills empty endpoint fields from the environment and
// returns a model. It returns an error wrapping ErrNotConfigured when no
// server or no model name is known.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := oaichat.Resolve(cfg.Settings, cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("rwm/openai: %w", err)
	}
	cfg.BaseURL, cfg.APIKey, cfg.Model = s.BaseURL, s.APIKey, s.Model
	m := &Model{cfg: cfg, client: oaichat.New(s)}
	text := "off"
	if cfg.ShowProposalText {
		text = fmt.Sprintf("%d/%d", cfg.RecordTextChars, cfg.ProposalTextChars)
	}
	m.id = fmt.Sprintf("rwm/openai %s@%s temperature=%g seed=%d format=%s records=%d/%d text=%s prompt=%s",
		cfg.Model, oaichat.RedactURL(cfg.BaseURL), cfg.Temperature, cfg.Seed, cfg.Format, cfg.MaxRecords, cfg.ContextChars,
		text, PromptVersion)
	return m, nil
}

// ID names the model for caches: backend, model name, endpoint, the
// settings that change answers and the prompt version. It holds no key.
func (m *Model) ID() string { return m.id }

// Config returns the model's configuration with the endpoint resolved.
func (m *Model) Config() Config { return m.cfg }

// Usage is the running total of a model's calls (one type with the other
// OpenAI-format clients'): completions received, HTTP attempts (failed
// ones and retries included) and tokens.
type Usage = oaichat.Usage

// Usage returns the totals since the model was built.
func (m *Model) Usage() Usage { return m.client.Total() }

// ResponseSchema is the JSON schema of the answer sent with FormatJSONSchema.
var ResponseSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"gain":   map[string]any{"type": "number", "description": "predicted gain b_e - loss, in the task's metric units"},
		"q10":    map[string]any{"type": "number", "description": "10% quantile of the gain"},
		"q90":    map[string]any{"type": "number", "description": "90% quantile of the gain"},
		"valid":  map[string]any{"type": "boolean", "description": "false if the proposal cannot be implemented or run"},
		"reason": map[string]any{"type": "string", "description": "one short sentence"},
	},
	"required":             []string{"gain", "q10", "q90", "valid", "reason"},
	"additionalProperties": false,
}

// format returns the response format in use: Config.Format until the
// server has rejected it, FormatText after.
func (m *Model) format() Format {
	if m.textOnly.Load() {
		return FormatText
	}
	return m.cfg.Format
}

func (m *Model) params(system, user string, format Format) sdk.ChatCompletionNewParams {
	p := oaichat.Params(m.cfg.Model, system, user, m.cfg.Temperature, m.cfg.Seed, m.cfg.MaxTokens)
	switch format {
	case FormatJSONSchema:
		p.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name:   "prediction",
				Strict: sdk.Bool(true),
				Schema: ResponseSchema,
			},
		}}
	case FormatJSONObject:
		p.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	}
	return p
}

// Predict asks the LLM for the gain of q.Proposal on q.Task given the
// records q.Evidence. Errors: an invalid query wraps records.ErrInvalid; a
// done ctx wraps ctx.Err(); exhausted transient failures are an
// *rwm.TransientError; an answer that cannot be read is a *PredictionError
// wrapping ErrUnreadable, one whose prediction is unusable (a refusal, an
// absurd number) a *PredictionError wrapping rwm.ErrBadPrediction; other
// failures (401, 404, a 400 that is not about
// the response format) are returned as they are, wrapped.
func (m *Model) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if err := ctx.Err(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("rwm/openai: predict: %w", err)
	}
	if err := q.Validate(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("rwm/openai: predict: %w", err)
	}
	system, user, err := Prompt(q, m.cfg)
	if err != nil {
		return rwm.Prediction{}, err
	}
	format := m.format()
	comp, u, err := m.client.Complete(ctx, m.params(system, user, format))
	if err != nil && format != FormatText && oaichat.IsStatus(err, http.StatusBadRequest) {
		// The server may not support the response format: ask for JSON in
		// text, which ParsePrediction reads anyway, and keep doing so if
		// that works.
		var u2 oaichat.Usage
		format = FormatText
		comp, u2, err = m.client.Complete(ctx, m.params(system, user, FormatText))
		u = u.Add(u2)
		if err == nil {
			m.textOnly.Store(true)
		}
	}
	if err != nil {
		return rwm.Prediction{}, oaichat.WorldModelError(ctx, "rwm/openai", m.cfg.Model, err)
	}
	usage := rwm.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	ch := comp.Choices[0]
	if ch.Message.Refusal != "" || ch.FinishReason == "content_filter" {
		msg := ch.Message.Refusal
		if msg == "" {
			msg = "finish_reason content_filter"
		}
		return rwm.Prediction{Usage: usage}, &PredictionError{Content: clip(msg), Err: ErrRefused}
	}
	parse := ParsePrediction
	if format != FormatText {
		parse = ParsePredictionJSON
	}
	p, err := parse(ch.Message.Content, q.Task)
	p.Usage = usage
	if err != nil {
		if ch.FinishReason == "length" {
			err = fmt.Errorf("%w (the answer was cut at the token limit)", err)
		}
		return p, err
	}
	return p, nil
}
