package rwm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// The embedded model cannot featurise a free-form proposal (no card, no
// parameters): it refuses with ErrCannotFeaturise, not a guess, while free
// records in the context do not stop it from predicting catalogue
// proposals.
func TestEmbeddedRefusesFreeForm(t *testing.T) {
	m := newEmbedded(t, exact())
	a := task("a", "fam", records.BitsPerByte)
	ff := records.Proposal{Mechanism: records.FreeForm, Text: "Add label smoothing of 0.1."}
	_, err := m.Predict(context.Background(), rwm.Query{Task: a, Proposal: ff})
	require.ErrorIs(t, err, rwm.ErrCannotFeaturise)
	require.NotErrorIs(t, err, rwm.ErrTransient)

	p := prop("lr-scale", "factor", "2")
	got := predict(t, m, rwm.Query{Task: a, Proposal: p, Evidence: evidence(t, real(a, ff, 3, 1), real(a, p, 3, 1))})
	require.True(t, got.Valid)
}
