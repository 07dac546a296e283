package openai

import (
	"testing"

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
		return rwm.NewLedger(rwm.NewCache(rwm.NewLimit(m, 2), rwm.DefaultCacheConfig()))
	}, rwmtest.Options{Deterministic: true})
}
