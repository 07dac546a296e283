package rwm_test

import "github.com/lm2lm/lm2lm/rwm"

// fataler is the part of testing.TB (and rapid.T) that the constructors
// below use.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// The constructors of valid configs, failing the test on an error.

func newEmbedded(t fataler, cfg rwm.EmbeddedConfig) *rwm.Embedded {
	t.Helper()
	m, err := rwm.NewEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newTuned(t fataler, base rwm.EmbeddedConfig, grid []rwm.EmbeddedConfig) *rwm.Tuned {
	t.Helper()
	m, err := rwm.NewTuned(base, grid)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newCache(t fataler, inner rwm.WorldModel, cfg rwm.CacheConfig) *rwm.Cache {
	t.Helper()
	m, err := rwm.NewCache(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newRetry(t fataler, inner rwm.WorldModel, cfg rwm.RetryConfig) *rwm.Retry {
	t.Helper()
	m, err := rwm.NewRetry(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newLimit(t fataler, inner rwm.WorldModel, n int) *rwm.Limit {
	t.Helper()
	m, err := rwm.NewLimit(inner, n)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
