package openai

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// The conformance suite against the fake server, whose deterministic
// in-context answer (fakeWorld) depends on the records in the prompt.
func TestConformance(t *testing.T) {
	rwmtest.Run(t, func(t *testing.T) rwm.WorldModel {
		srv := oaitest.New(t, fakeWorld)
		return newTestModel(t, srv, &sleeps{}, nil)
	}, rwmtest.Options{Deterministic: true})
}

// The wrappers of package rwm compose with the model: a cache in front
// serves repeated queries without calls, and the ledger counts tokens.
func TestWithWrappers(t *testing.T) {
	srv := oaitest.New(t, fakeWorld)
	m := newTestModel(t, srv, &sleeps{}, nil)
	rwmtest.Run(t, func(t *testing.T) rwm.WorldModel {
		l, err := rwm.NewLimit(m, 2)
		require.NoError(t, err)
		c, err := rwm.NewCache(l, rwm.DefaultCacheConfig())
		require.NoError(t, err)
		return rwm.NewLedger(c)
	}, rwmtest.Options{Deterministic: true})
}

// rwm.Ledger reads the tokens each prediction reports.
func TestLedgerCountsTokens(t *testing.T) {
	srv := oaitest.New(t, fakeWorld)
	srv.Push(oaitest.Text("no json here"))
	m := newTestModel(t, srv, &sleeps{}, nil)
	l := rwm.NewLedger(m)
	ctx := t.Context()
	q := query()
	_, err := l.Predict(ctx, q)
	requireAnswerError(t, err, ErrNoJSON)
	_, err = l.Predict(ctx, q)
	require.NoError(t, err)
	st := l.Stats()
	u := m.Usage()
	require.Equal(t, int64(2), st.Calls)
	require.Equal(t, int64(1), st.Errors)
	require.Equal(t, u.PromptTokens, st.PromptTokens, "tokens of the bad answer are counted too")
	require.Equal(t, u.CompletionTokens, st.CompletionTokens)
	require.Greater(t, st.PromptTokens, int64(0))
}
