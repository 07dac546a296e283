package rwm

// fataler is the part of testing.TB (and rapid.T) that the constructors
// below use.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// The constructors of valid configs, failing the test on an error.

func testEmbedded(t fataler, cfg EmbeddedConfig) *Embedded {
	t.Helper()
	m, err := NewEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testTuned(t fataler, base EmbeddedConfig, grid []EmbeddedConfig) *Tuned {
	t.Helper()
	m, err := NewTuned(base, grid)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testCache(t fataler, inner WorldModel, cfg CacheConfig) *Cache {
	t.Helper()
	m, err := NewCache(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
