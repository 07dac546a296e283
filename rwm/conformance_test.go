package rwm_test

import (
	"testing"

	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func TestEmbeddedConformance(t *testing.T) {
	rwmtest.Run(t, func(*testing.T) rwm.WorldModel {
		return newEmbedded(t, rwm.DefaultEmbeddedConfig())
	}, rwmtest.Options{Deterministic: true})
}

func TestWrappedConformance(t *testing.T) {
	// The full stack of METHOD.md §1 Research World Model wrappers over the
	// embedded model: Ledger → Cache → Limit → Retry → model.
	rwmtest.Run(t, func(*testing.T) rwm.WorldModel {
		m := rwm.WorldModel(newEmbedded(t, rwm.DefaultEmbeddedConfig()))
		m = newRetry(t, m, rwm.DefaultRetryConfig())
		m = newLimit(t, m, 2)
		m = newCache(t, m, rwm.CacheConfig{Size: 16})
		return rwm.NewLedger(m)
	}, rwmtest.Options{Deterministic: true, Parallel: 6})
}

func TestEachWrapperConformance(t *testing.T) {
	emb := func() rwm.WorldModel { return newEmbedded(t, rwm.DefaultEmbeddedConfig()) }
	for name, wrap := range map[string]func(rwm.WorldModel) rwm.WorldModel{
		"Cache":  func(m rwm.WorldModel) rwm.WorldModel { return newCache(t, m, rwm.CacheConfig{Size: 3}) },
		"Limit":  func(m rwm.WorldModel) rwm.WorldModel { return newLimit(t, m, 1) },
		"Retry":  func(m rwm.WorldModel) rwm.WorldModel { return newRetry(t, m, rwm.DefaultRetryConfig()) },
		"Ledger": func(m rwm.WorldModel) rwm.WorldModel { return rwm.NewLedger(m) },
	} {
		t.Run(name, func(t *testing.T) {
			rwmtest.Run(t, func(*testing.T) rwm.WorldModel { return wrap(emb()) }, rwmtest.Options{Deterministic: true})
		})
	}
}
