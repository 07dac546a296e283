package labsetup_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/labsetup"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func TestNewWorld(t *testing.T) {
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	w, err := labsetup.NewWorld(l, labsetup.World{})
	require.NoError(t, err)
	plain, ok := w.(*rwm.Embedded)
	require.True(t, ok, "untuned: the embedded model itself")
	c := plain.Config()
	require.Zero(t, c.DescriptorWeight)
	require.Nil(t, c.Effects)
	require.Equal(t, lab.Catalogue(), c.Cards)
	require.Len(t, c.Priors, len(rwm.PriorsFromCards(lab.Catalogue())))

	w, err = labsetup.NewWorld(l, labsetup.ValidatedWorld)
	require.NoError(t, err)
	tuned, ok := w.(*rwm.Tuned)
	require.True(t, ok, "Tune: rwm.Tuned")
	b := tuned.Base()
	require.Equal(t, 1.0, b.DescriptorWeight)
	require.Equal(t, l.Effects().ID(), b.Effects.ID())
	want := rwm.DefaultEmbeddedConfig()
	want.DescriptorWeight = 1
	want = rwm.WithEffects(want, l.Effects())
	require.Equal(t, want.EffectSigmas, b.EffectSigmas)
	require.Equal(t, want.LossSigmas, b.LossSigmas)
	require.True(t, strings.HasPrefix(tuned.ID(), "rwm.Tuned/"))
}

func TestHiddenSourceFollowsTheSeed(t *testing.T) {
	a, b, c := labsetup.HiddenSource(3), labsetup.HiddenSource(3), labsetup.HiddenSource(4)
	x, y, z := a.Uint64(), b.Uint64(), c.Uint64()
	require.Equal(t, x, y)
	require.NotEqual(t, x, z)
}

// A world whose descriptor weight is out of range, and a bad config given
// to NewModel, are errors wrapping rwm.ErrConfig, tuned or not.
func TestNewWorldRejectsBadConfig(t *testing.T) {
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	for _, tune := range []bool{false, true} {
		_, err := labsetup.NewWorld(l, labsetup.World{Descriptors: 1.5, Tune: tune})
		require.ErrorIs(t, err, rwm.ErrConfig)
		bad := rwm.DefaultEmbeddedConfig()
		bad.NoiseSigmas = 0
		m, err := labsetup.NewModel(bad, tune)
		require.ErrorIs(t, err, rwm.ErrConfig)
		require.Nil(t, m, "no typed nil inside the interface")
	}
}
