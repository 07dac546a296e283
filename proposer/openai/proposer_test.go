package openai

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

func state() records.State { return proposertest.DefaultStates(testCatalogue)[1] }

func newTestProposer(t *testing.T, srv *oaitest.Server, sl *sleeps, edit func(*Config)) *Proposer {
	t.Helper()
	cfg := testConfig(srv, sl)
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

func TestProposeNChoicesWithLogprobs(t *testing.T) {
	srv := oaitest.New(t, fakePolicy)
	p := newTestProposer(t, srv, &sleeps{}, func(c *Config) { c.TopLogprobs = 2 })
	rng := rand.New(rand.NewPCG(1, 2))
	got, err := p.Propose(context.Background(), state(), 8, rng)
	require.NoError(t, err)
	require.Len(t, got, 8)

	reqs := srv.Requests()
	require.Len(t, reqs, 1, "one request with n = 8")
	r := reqs[0]
	require.Equal(t, 8, r.N)
	require.True(t, r.Logprobs)
	require.Equal(t, 2, r.TopLogprobs)
	require.Equal(t, 1.0, *r.Temperature, "METHOD.md §1 Policy optimisation: temperature 1.0")
	require.Equal(t, rand.New(rand.NewPCG(1, 2)).Int64(), *r.Seed, "the seed is the rng's first Int64")
	require.Equal(t, 512, r.MaxTokens)

	for i, s := range got {
		require.False(t, s.Invalid, "sample %d: %s", i, s.Reason)
		require.NoError(t, proposertest.CheckSample(s, proposertest.Options{Catalogue: testCatalogue, RequireLogProbs: true, AllowNoChange: true}))
		require.Equal(t, s.Proposal.Text, strings.Join(s.Tokens, ""), "tokens are the completion's")
		require.Len(t, s.LogProbs, len(s.Tokens))
		for j, tok := range s.Tokens {
			require.Equal(t, oaitest.LogprobOf(tok, j), s.LogProbs[j])
		}
		require.Equal(t, 1.0, s.Temperature)
	}
	u := p.Usage()
	require.Equal(t, int64(1), u.Calls)
	require.Greater(t, u.CompletionTokens, int64(0))
}

func TestProposeWithoutLogprobs(t *testing.T) {
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		rep := fakePolicy(r)
		rep.OmitLogprobs = true
		return rep
	})
	p := newTestProposer(t, srv, &sleeps{}, nil)
	got, err := p.Propose(context.Background(), state(), 3, rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, s := range got {
		require.False(t, s.Invalid, s.Reason)
		require.Empty(t, s.Tokens)
		require.Empty(t, s.LogProbs)
		require.NoError(t, proposertest.CheckSample(s, proposertest.Options{Catalogue: testCatalogue}))
	}

	// Logprobs switched off: the request does not ask for them.
	p = newTestProposer(t, srv, &sleeps{}, func(c *Config) { c.Logprobs = false })
	_, err = p.Propose(context.Background(), state(), 1, rand.New(rand.NewPCG(3, 4)))
	require.NoError(t, err)
	require.False(t, srv.Requests()[1].Logprobs)
}

func TestProposeServerIgnoresN(t *testing.T) {
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		r.N = 1
		return fakePolicy(r)
	})
	p := newTestProposer(t, srv, &sleeps{}, nil)
	got, err := p.Propose(context.Background(), state(), 5, rand.New(rand.NewPCG(5, 6)))
	require.NoError(t, err)
	require.Len(t, got, 5)
	reqs := srv.Requests()
	require.Len(t, reqs, 5)
	require.Equal(t, []int{5, 4, 3, 2, 0}, []int{reqs[0].N, reqs[1].N, reqs[2].N, reqs[3].N, reqs[4].N},
		"each request asks for the samples still missing (n omitted when 1)")
	require.NotEqual(t, *reqs[0].Seed, *reqs[1].Seed, "each request draws its own seed")

	srv2 := oaitest.New(t, fakePolicy)
	p = newTestProposer(t, srv2, &sleeps{}, func(c *Config) { c.UseN = false })
	got, err = p.Propose(context.Background(), state(), 3, rand.New(rand.NewPCG(5, 6)))
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, 3, srv2.Count(), "UseN false: one request per sample")
}

func TestProposeMalformedAnswers(t *testing.T) {
	srv := oaitest.New(t, nil)
	srv.Push(oaitest.Reply{Choices: []oaitest.Choice{
		{Content: `Sure: {"mechanism": "warmup", "params": {"steps": 100}, "rationale": "longer warmup"} hope it helps`},
		{Content: "I would try a larger learning rate."},
		{Content: `{"mechanism": "dropout", "params": {"p": "0.1"}}`},
		{Content: `{"mechanism": "lr-scale", "params": {"factor": "3"}}`},
		{Content: `{"mechanism": "lr-scale", "params": {"factor": "2"`, FinishReason: "length"},
		{Refusal: "I cannot help with that."},
		{Content: `{"mechanism": "none"}`},
		{Content: `{"mechanism": ["x"]}`},
	}})
	p := newTestProposer(t, srv, &sleeps{}, nil)
	got, err := p.Propose(context.Background(), state(), 8, rand.New(rand.NewPCG(7, 8)))
	require.NoError(t, err, "unparseable answers never stop training")
	require.Len(t, got, 8)

	require.False(t, got[0].Invalid)
	require.Equal(t, "warmup{steps=100}", got[0].Proposal.Key())
	require.Contains(t, got[0].Proposal.Text, "longer warmup")

	wantReason := []string{"", "no JSON object", "not in the catalogue", "not one of", "cut at the token limit", "refusal", "", "bad field"}
	for i, w := range wantReason {
		if w == "" {
			continue
		}
		require.True(t, got[i].Invalid, "sample %d", i)
		require.Contains(t, got[i].Reason, w, "sample %d", i)
		require.NoError(t, proposertest.CheckSample(got[i], proposertest.Options{}))
	}
	require.False(t, got[6].Invalid)
	require.True(t, got[6].Proposal.IsNoChange())
}

func TestProposeTransportErrors(t *testing.T) {
	t.Run("429 then success", func(t *testing.T) {
		srv := oaitest.New(t, fakePolicy)
		srv.Push(oaitest.Status(429, "3"), oaitest.Status(500, ""))
		sl := &sleeps{}
		p := newTestProposer(t, srv, sl, nil)
		got, err := p.Propose(context.Background(), state(), 2, rand.New(rand.NewPCG(9, 9)))
		require.NoError(t, err)
		require.Len(t, got, 2)
		// Retry-After 3s honoured, then the 1s backoff of the second retry.
		require.Equal(t, []time.Duration{3 * time.Second, time.Second}, sl.All())
		require.Equal(t, 3, srv.Count())
	})
	t.Run("503 exhausted", func(t *testing.T) {
		srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Status(503, "") })
		p := newTestProposer(t, srv, &sleeps{}, func(c *Config) { c.MaxRetries = 2 })
		_, err := p.Propose(context.Background(), state(), 2, rand.New(rand.NewPCG(9, 9)))
		require.ErrorIs(t, err, ErrTransient)
		require.Equal(t, 3, srv.Count())
	})
	t.Run("truncated and malformed bodies are retried", func(t *testing.T) {
		srv := oaitest.New(t, fakePolicy)
		srv.Push(oaitest.Truncated(oaitest.Text(`{"mechanism":"qk-norm"}`), 30), oaitest.Raw(`{"choices": [{`))
		p := newTestProposer(t, srv, &sleeps{}, nil)
		got, err := p.Propose(context.Background(), state(), 2, rand.New(rand.NewPCG(9, 9)))
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, 3, srv.Count())
	})
	t.Run("401 is not retried", func(t *testing.T) {
		srv := oaitest.New(t, nil)
		srv.Push(oaitest.Status(401, ""))
		p := newTestProposer(t, srv, &sleeps{}, nil)
		_, err := p.Propose(context.Background(), state(), 2, rand.New(rand.NewPCG(9, 9)))
		require.Error(t, err)
		require.False(t, errors.Is(err, ErrTransient))
		require.Equal(t, 1, srv.Count())
	})
	t.Run("hung connection then cancel", func(t *testing.T) {
		srv := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Hang() })
		p := newTestProposer(t, srv, &sleeps{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p.Propose(ctx, state(), 2, rand.New(rand.NewPCG(9, 9)))
			done <- err
		}()
		require.True(t, srv.WaitFor(1, 10*time.Second))
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

func TestProposeArguments(t *testing.T) {
	srv := oaitest.New(t, fakePolicy)
	p := newTestProposer(t, srv, &sleeps{}, nil)
	got, err := p.Propose(context.Background(), state(), 0, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = p.Propose(context.Background(), state(), -1, rand.New(rand.NewPCG(1, 1)))
	require.Error(t, err)
	bad := state()
	bad.Task.SeedNoise = 0
	_, err = p.Propose(context.Background(), bad, 1, rand.New(rand.NewPCG(1, 1)))
	require.ErrorIs(t, err, records.ErrInvalid)
	require.Zero(t, srv.Count())
}

func TestNewConfiguration(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Getenv = func(string) string { return "" }
	_, err := New(cfg)
	require.ErrorIs(t, err, ErrNotConfigured)

	env := map[string]string{"OPENAI_BASE_URL": "http://env/v1", "LM2LM_MODEL": "env-model"}
	cfg.Getenv = func(k string) string { return env[k] }
	p, err := New(cfg)
	require.NoError(t, err)
	require.Equal(t, "env-model", p.Config().Model)
	cfg.Model = "explicit"
	p, err = New(cfg)
	require.NoError(t, err)
	require.Equal(t, "explicit", p.Config().Model)

	cfg.TopLogprobs, cfg.Logprobs = 3, false
	_, err = New(cfg)
	require.Error(t, err)
}

// The conformance suite of package proposer, against the fake server with a
// catalogue and in free form.
func TestConformance(t *testing.T) {
	t.Run("catalogue", func(t *testing.T) {
		proposertest.Run(t, func(t *testing.T) proposer.Proposer {
			return newTestProposer(t, oaitest.New(t, fakePolicy), &sleeps{}, nil)
		}, proposertest.Options{Catalogue: testCatalogue, AllowNoChange: true, Deterministic: true, RequireLogProbs: true})
	})
	t.Run("free form", func(t *testing.T) {
		proposertest.Run(t, func(t *testing.T) proposer.Proposer {
			return newTestProposer(t, oaitest.New(t, fakePolicy), &sleeps{}, func(c *Config) { c.Catalogue = nil })
		}, proposertest.Options{Deterministic: true, RequireLogProbs: true})
	})
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	for name, edit := range map[string]func(*Config){
		"temperature":  func(c *Config) { c.Temperature = -0.1 },
		"top logprobs": func(c *Config) { c.TopLogprobs = 21 },
		"history text": func(c *Config) { c.HistoryTextChars = -1 },
		"retries":      func(c *Config) { c.MaxRetries = -1 },
		"delay":        func(c *Config) { c.MaxDelay = -time.Second },
		"empty card":   func(c *Config) { c.Catalogue = []records.Card{{Mechanism: " "}} },
		"no choices": func(c *Config) {
			c.Catalogue = []records.Card{{Mechanism: "m", Params: []records.ParamSpec{{Name: "p", Kind: "enum"}}}}
		},
	} {
		c := DefaultConfig()
		edit(&c)
		require.Error(t, c.Validate(), name)
	}
}
