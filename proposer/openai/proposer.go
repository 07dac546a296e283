package openai

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	sdk "github.com/openai/openai-go/v3"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Errors of the package.
var (
	// ErrNotConfigured: no server or no model name is known.
	ErrNotConfigured = oaichat.ErrNotConfigured
	// ErrTransient marks transport failures that outlived the retries.
	ErrTransient = oaichat.ErrTransient
	// ErrBadBatch marks a batch that cannot be exported or decoded.
	ErrBadBatch = errors.New("proposer/openai: bad batch")
	// ParseProposal wraps one of the next four in a *ParseError.
	// ErrNoJSON: the answer holds no valid JSON object.
	ErrNoJSON = errors.New("proposer/openai: no JSON object in the answer")
	// ErrAmbiguous: the answer holds more than one JSON object (such as an
	// echo of injected data), or an object repeats a key.
	ErrAmbiguous = errors.New("proposer/openai: ambiguous answer")
	// ErrBadField: a field is missing or has the wrong type.
	ErrBadField = errors.New("proposer/openai: bad field")
	// ErrNotInCatalogue: the proposal does not instantiate a card.
	ErrNotInCatalogue = errors.New("proposer/openai: not in the catalogue")
	// ErrInvalidProposal: the proposal fails records.Proposal.Validate.
	ErrInvalidProposal = errors.New("proposer/openai: invalid proposal")
)

// Config parameterises a Proposer. Endpoint fields left empty are read from
// the environment when the proposer is built (an explicit field wins).
type Config struct {
	// Settings: the endpoint (BaseURL, APIKey and Model, each read from
	// the environment when empty), the Transport (retries, timeouts, the
	// response body limit) and the hooks (HTTPClient, Sleep, Now, Getenv)
	// that rwm/openai, rwm/verdict and proposer/openai share; its fields are
	// promoted. Defaults in DefaultSettings.
	Settings
	// Temperature of sampling; default 1 (METHOD.md §1 Policy optimisation:
	// rollouts at temperature 1.0).
	Temperature float64
	// MaxTokens caps each completion (max_completion_tokens); default 512
	// (library choice: a JSON proposal with a rationale fits in ~200).
	// 0 = the server's limit.
	MaxTokens int
	// Logprobs asks for the completion tokens' log-probs; default true
	// (DAPO needs the old log-probs, METHOD.md §1 Policy optimisation).
	Logprobs bool
	// TopLogprobs asks for that many alternatives per token; default 0.
	TopLogprobs int
	// UseN asks for all samples in one request with the n parameter;
	// default true. When false, or when the server returns fewer choices,
	// further requests (one per missing sample when false) fill the rest.
	UseN bool
	// Catalogue, when non-empty, restricts proposals to its cards: the
	// mechanism must be a card's, and every parameter of the card must be
	// given one of its Choices (METHOD.md §1 Vocabulary: proposals
	// instantiate mechanism cards). Empty = free-form proposals.
	Catalogue []records.Card
	// AllowNoChange admits the no-change proposal (records.NoChange), which
	// earns the no-change reward rather than −c; default true.
	AllowNoChange bool
	// HistoryTextChars truncates each history record's text in the prompt;
	// default 300.
	HistoryTextChars int
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
		Temperature: 1, MaxTokens: 512, Logprobs: true, UseN: true, AllowNoChange: true,
		HistoryTextChars: 300, Settings: DefaultSettings(),
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.Temperature) || c.Temperature < 0 || c.Temperature > 2:
		return fmt.Errorf("proposer/openai: Temperature = %g, want in [0, 2]", c.Temperature)
	case c.MaxTokens < 0:
		return fmt.Errorf("proposer/openai: MaxTokens = %d, want ≥ 0", c.MaxTokens)
	case c.TopLogprobs < 0 || c.TopLogprobs > 20:
		return fmt.Errorf("proposer/openai: TopLogprobs = %d, want in [0, 20]", c.TopLogprobs)
	case c.TopLogprobs > 0 && !c.Logprobs:
		return fmt.Errorf("proposer/openai: TopLogprobs needs Logprobs")
	case c.HistoryTextChars < 0:
		return fmt.Errorf("proposer/openai: HistoryTextChars = %d, want ≥ 0", c.HistoryTextChars)
	}
	if err := c.Transport.Validate(); err != nil {
		return fmt.Errorf("proposer/openai: %w", err)
	}
	for i, card := range c.Catalogue {
		if strings.TrimSpace(card.Mechanism) == "" {
			return fmt.Errorf("proposer/openai: catalogue card %d has no mechanism", i)
		}
		for _, ps := range card.Params {
			if len(ps.Choices) == 0 {
				return fmt.Errorf("proposer/openai: card %s: parameter %s has no choices", card.Mechanism, ps.Name)
			}
		}
	}
	return nil
}

// Proposer samples proposals from an LLM. It is safe for concurrent use.
type Proposer struct {
	cfg    Config
	client *oaichat.Client
}

var _ proposer.Proposer = (*Proposer)(nil)

// New validates cfg, fills empty endpoint fields from the environment and
// returns a proposer; the error wraps ErrNotConfigured when no server or
// model is known.
func New(cfg Config) (*Proposer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := oaichat.Resolve(cfg.Settings, cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("proposer/openai: %w", err)
	}
	cfg.BaseURL, cfg.APIKey, cfg.Model = s.BaseURL, s.APIKey, s.Model
	cfg.Catalogue = append([]records.Card(nil), cfg.Catalogue...)
	return &Proposer{cfg: cfg, client: oaichat.New(s)}, nil
}

// Config returns the proposer's configuration with the endpoint resolved.
func (p *Proposer) Config() Config { return p.cfg }

// Usage is the running total of a proposer's calls (one type with the other
// OpenAI-format clients'): completions received, HTTP attempts (failed
// ones and retries included) and tokens.
type Usage = oaichat.Usage

// Usage returns the totals since the proposer was built.
func (p *Proposer) Usage() Usage { return p.client.Total() }

// Propose samples n proposals for s. Each request carries a seed drawn
// from rng (rng.Int64()), so a server that honours seeds reproduces a
// seeded call. Errors: n < 0 or an invalid state; a done ctx (wrapped
// ctx.Err()); transport failures after retries (wrapping ErrTransient) and
// permanent HTTP errors. Unusable answers are Invalid samples, not errors.
func (p *Proposer) Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("proposer/openai: propose: %w", err)
	}
	if n < 0 {
		return nil, fmt.Errorf("proposer/openai: propose: n = %d, want ≥ 0", n)
	}
	if n == 0 {
		return nil, nil
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("proposer/openai: propose: %w", err)
	}
	msgs, err := p.Messages(s)
	if err != nil {
		return nil, err
	}
	out := make([]proposer.Sample, 0, n)
	for len(out) < n {
		want := n - len(out)
		if !p.cfg.UseN {
			want = 1
		}
		comp, _, err := p.client.Complete(ctx, p.params(msgs, want, rng.Int64()))
		if err != nil {
			return nil, fmt.Errorf("proposer/openai: propose: %w", err)
		}
		for _, ch := range comp.Choices {
			if len(out) == n {
				break
			}
			out = append(out, p.sample(ch))
		}
	}
	return out, nil
}

func (p *Proposer) params(msgs []Message, n int, seed int64) sdk.ChatCompletionNewParams {
	ps := sdk.ChatCompletionNewParams{
		Model:       p.cfg.Model,
		Temperature: sdk.Float(p.cfg.Temperature),
		Seed:        sdk.Int(seed),
	}
	for _, m := range msgs {
		switch m.Role {
		case "system":
			ps.Messages = append(ps.Messages, sdk.SystemMessage(m.Content))
		default:
			ps.Messages = append(ps.Messages, sdk.UserMessage(m.Content))
		}
	}
	if n > 1 {
		ps.N = sdk.Int(int64(n))
	}
	if p.cfg.MaxTokens > 0 {
		ps.MaxCompletionTokens = sdk.Int(int64(p.cfg.MaxTokens))
	}
	if p.cfg.Logprobs {
		ps.Logprobs = sdk.Bool(true)
		if p.cfg.TopLogprobs > 0 {
			ps.TopLogprobs = sdk.Int(int64(p.cfg.TopLogprobs))
		}
	}
	return ps
}

// sample turns one choice into a Sample. Proposal.Text holds the whole
// completion (the LLM's wording, records.Proposal), so that ExportBatch can
// hand the exact completion to a trainer.
func (p *Proposer) sample(ch sdk.ChatCompletionChoice) proposer.Sample {
	smp := proposer.Sample{Temperature: p.cfg.Temperature}
	text := ch.Message.Content
	if ch.Message.Refusal != "" {
		text = ch.Message.Refusal
	}
	smp.Tokens, smp.LogProbs = tokenLogprobs(ch.Logprobs.Content)
	switch {
	case ch.Message.Refusal != "":
		smp.Invalid, smp.Reason = true, "refusal: "+oaichat.Truncate(ch.Message.Refusal, 200)
		smp.Proposal = records.Proposal{Text: text}
		return smp
	case ch.FinishReason == "content_filter":
		smp.Invalid, smp.Reason = true, "refusal: finish_reason content_filter"
		smp.Proposal = records.Proposal{Text: text}
		return smp
	}
	prop, err := ParseProposal(text, p.cfg.Catalogue, p.cfg.AllowNoChange)
	if err != nil {
		smp.Invalid, smp.Reason = true, err.Error()
		if ch.FinishReason == "length" {
			smp.Reason += " (the answer was cut at the token limit)"
		}
		smp.Proposal = records.Proposal{Text: text}
		return smp
	}
	prop.Text = text
	smp.Proposal = prop
	return smp
}

// tokenLogprobs returns the tokens and log-probs of logprobs.content, or
// nil, nil when they are absent or unusable (a non-finite value, or a
// log-prob above 1e-6: a server bug; values in (0, 1e-6] are rounding and
// become 0).
func tokenLogprobs(lps []sdk.ChatCompletionTokenLogprob) ([]string, []float64) {
	if len(lps) == 0 {
		return nil, nil
	}
	toks := make([]string, len(lps))
	vals := make([]float64, len(lps))
	for i, lp := range lps {
		v := lp.Logprob
		if math.IsNaN(v) || math.IsInf(v, 0) || v > 1e-6 {
			return nil, nil
		}
		toks[i], vals[i] = lp.Token, min(v, 0)
	}
	return toks, vals
}
