package model

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKnownEffectsOnOpticks(t *testing.T) {
	// On the Opticks text a ×10 learning rate hurts and
	// a wider embedding (16 → 32) helps, with shared seeds (METHOD.md §1
	// Vocabulary: gain g = b_e − ℓ, positive = better).
	if testing.Short() {
		t.Skip("statistical: several full training runs")
	}
	d := opticks(t)
	seeds := []uint64{1, 2, 3}
	mean := func(edit func(*Config)) float64 {
		var s float64
		for _, seed := range seeds {
			cfg := DefaultConfig()
			edit(&cfg)
			r, err := Train(context.Background(), cfg, d, seed)
			require.NoError(t, err)
			require.False(t, r.Diverged, r.Reason)
			s += r.Loss
		}
		return s / float64(len(seeds))
	}
	ref := mean(func(*Config) {})
	lr10 := mean(func(c *Config) { c.LR *= 10 })
	wide := mean(func(c *Config) { c.Embed = 32 })
	t.Log(fmt.Sprintf("reference %.4f, lr×10 %.4f, embed 32 %.4f bits per byte", ref, lr10, wide))
	require.Less(t, ref, 3.3, "reference near the measured 3.133 BPB")
	require.Greater(t, lr10-ref, 0.03, "lr×10 should hurt")
	require.Greater(t, ref-wide, 0.03, "embed 32 should help")
}
