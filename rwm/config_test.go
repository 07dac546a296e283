package rwm_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/rwm"
)

// Every constructor answers a bad configuration with an error wrapping
// ErrConfig whose text names the bad field and its value.
func TestConstructorsRejectBadConfig(t *testing.T) {
	inner := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	retry := func(mut func(*rwm.RetryConfig)) rwm.RetryConfig {
		c := rwm.DefaultRetryConfig()
		mut(&c)
		return c
	}
	embedded := func(mut func(*rwm.EmbeddedConfig)) rwm.EmbeddedConfig {
		c := rwm.DefaultEmbeddedConfig()
		mut(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		new  func() error
		want string
	}{
		{"embedded signal", func() error {
			_, err := rwm.NewEmbedded(embedded(func(c *rwm.EmbeddedConfig) { c.SignalSigmas = -1 }))
			return err
		}, "rwm: embedded: SignalSigmas -1, want > 0"},
		{"embedded cache", func() error {
			_, err := rwm.NewEmbedded(embedded(func(c *rwm.EmbeddedConfig) { c.CacheSize = 0 }))
			return err
		}, "rwm: embedded: CacheSize 0, want ≥ 1"},
		{"tuned base", func() error {
			_, err := rwm.NewTuned(embedded(func(c *rwm.EmbeddedConfig) { c.NoiseSigmas = math.Inf(1) }), nil)
			return err
		}, "rwm: embedded: NoiseSigmas +Inf, want > 0"},
		{"tuned empty grid", func() error {
			_, err := rwm.NewTuned(rwm.DefaultEmbeddedConfig(), []rwm.EmbeddedConfig{})
			return err
		}, "rwm: invalid config: tuned: empty grid"},
		{"tuned grid entry", func() error {
			_, err := rwm.NewTuned(rwm.DefaultEmbeddedConfig(), []rwm.EmbeddedConfig{embedded(func(c *rwm.EmbeddedConfig) { c.Mismatch = 2 })})
			return err
		}, "rwm: invalid config: tuned: grid[0]: rwm: embedded: Mismatch 2, want in [0, 1]"},
		{"cache size", func() error {
			_, err := rwm.NewCache(inner, rwm.CacheConfig{Size: -3})
			return err
		}, "rwm: invalid config: cache Size = -3, want > 0"},
		{"cache nil inner", func() error {
			_, err := rwm.NewCache(nil, rwm.DefaultCacheConfig())
			return err
		}, "rwm: invalid config: cache: nil inner model"},
		{"retry attempts", func() error {
			_, err := rwm.NewRetry(inner, retry(func(c *rwm.RetryConfig) { c.Attempts = 0 }))
			return err
		}, "rwm: invalid config: retry Attempts = 0, want ≥ 1"},
		{"retry base", func() error {
			_, err := rwm.NewRetry(inner, retry(func(c *rwm.RetryConfig) { c.Base = -1 }))
			return err
		}, "rwm: invalid config: retry Base = -1ns, want ≥ 0"},
		{"retry max", func() error {
			_, err := rwm.NewRetry(inner, retry(func(c *rwm.RetryConfig) { c.Max = -2 }))
			return err
		}, "rwm: invalid config: retry Max = -2ns, want ≥ 0"},
		{"retry max after", func() error {
			_, err := rwm.NewRetry(inner, retry(func(c *rwm.RetryConfig) { c.MaxAfter = -3 }))
			return err
		}, "rwm: invalid config: retry MaxAfter = -3ns, want ≥ 0"},
		{"retry multiplier", func() error {
			_, err := rwm.NewRetry(inner, retry(func(c *rwm.RetryConfig) { c.Multiplier = math.NaN() }))
			return err
		}, "rwm: invalid config: retry Multiplier = NaN, want ≥ 1"},
		{"retry nil inner", func() error {
			_, err := rwm.NewRetry(nil, rwm.DefaultRetryConfig())
			return err
		}, "rwm: invalid config: retry: nil inner model"},
		{"limit zero", func() error {
			_, err := rwm.NewLimit(inner, 0)
			return err
		}, "rwm: invalid config: concurrency limit n = 0, want ≥ 1"},
		{"limit nil inner", func() error {
			_, err := rwm.NewLimit(nil, 2)
			return err
		}, "rwm: invalid config: limit: nil inner model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			require.ErrorIs(t, err, rwm.ErrConfig)
			require.EqualError(t, err, tc.want)
			require.False(t, errors.Is(err, rwm.ErrTransient))
		})
	}
}

// The constructors accept the defaults and the edges of the valid ranges.
func TestConstructorsAcceptGoodConfig(t *testing.T) {
	inner := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	_, err := rwm.NewTuned(rwm.DefaultEmbeddedConfig(), nil)
	require.NoError(t, err)
	_, err = rwm.NewCache(inner, rwm.CacheConfig{Size: 1})
	require.NoError(t, err)
	_, err = rwm.NewRetry(inner, rwm.RetryConfig{Attempts: 1, Multiplier: 1})
	require.NoError(t, err)
	_, err = rwm.NewLimit(inner, 1)
	require.NoError(t, err)
}
