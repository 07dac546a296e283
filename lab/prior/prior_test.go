package prior_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/prior"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The embedded file reads back, describes the pretraining corpus and fits
// a world model over a lab of tasks it was not fitted with (the V3
// validation split's), with the lab's effects; without them it does not.
func TestV2(t *testing.T) {
	p, err := prior.V2()
	require.NoError(t, err)
	q, err := prior.Lookup(prior.V2Name)
	require.NoError(t, err)
	require.Equal(t, p.Digest(), q.Digest())
	require.Len(t, p.Digest(), 64)
	require.True(t, p.Terms().Effects, "the prior reads what a proposal does")
	require.Equal(t, len(p.Names()), len(p.Coefficients()))
	require.Positive(t, p.Corpus().Tasks)

	cfg := lab.DefaultConfig()
	cfg.Tasks = append(cfg.Tasks[:0:0], lab.V3Val().Tasks...)
	l, err := lab.New(cfg, records.NewMemStore())
	require.NoError(t, err)
	base := rwm.DefaultEmbeddedConfig()
	base.Priors, base.Cards = rwm.PriorsFromCards(lab.Catalogue()), lab.Catalogue()
	_, err = p.Config(base)
	require.ErrorIs(t, err, rwm.ErrPriorMismatch, "no Effector")
	base.Effects = l.Effects()
	c, err := p.Config(base)
	require.NoError(t, err)
	require.Same(t, p, c.Prior)
	for _, name := range p.Names() {
		require.False(t, strings.Contains(name, "v3-"), "a feature names a split's task: %s", name)
	}
}

// Lookup refuses another name with ErrUnknown, quoting it bounded.
func TestLookupUnknown(t *testing.T) {
	_, err := prior.Lookup("v9")
	require.ErrorIs(t, err, prior.ErrUnknown)
	require.EqualError(t, err, `lab/prior: unknown prior "v9"; valid: v2`)
	_, err = prior.Lookup(strings.Repeat("x", 1000))
	require.True(t, errors.Is(err, prior.ErrUnknown))
	require.Less(t, len(err.Error()), 200)
}

// The lab's prior, read by name; its Config loads it into a world model
// of the validated setting's kind (setting.Validated().WorldConfig(lab)).
func Example() {
	p, err := prior.Lookup(prior.V2Name)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Terms().Effects, len(p.Names()) == len(p.Coefficients()))
	// Output: true true
}
