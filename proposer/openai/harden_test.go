package openai

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/internal/oaitest"
)

// TestProposeHugeResponseBodyBoundedMemory: a 256 MB answer fails with
// ErrBodyTooLarge, having allocated a small multiple of MaxBodyBytes.
func TestProposeHugeResponseBodyBoundedMemory(t *testing.T) {
	for _, withLength := range []bool{true, false} {
		srv := oaitest.HugeBody(256<<20, withLength)
		defer srv.Close()
		sl := &sleeps{}
		cfg := urlConfig(srv.URL, sl)
		p, err := New(cfg)
		require.NoError(t, err)
		allocated := oaitest.Allocated(func() { _, err = p.Propose(context.Background(), state(), 1, rand.New(rand.NewPCG(1, 2))) })
		require.ErrorIs(t, err, oaichat.ErrBodyTooLarge)
		require.NotErrorIs(t, err, ErrTransient)
		require.Less(t, allocated, uint64(8*cfg.MaxBodyBytes), "allocated (with Content-Length: %v)", withLength)
		require.Empty(t, sl.All(), "not retried")
	}
}

// TestParseProposalExactlyOneObject: an answer may hold exactly one JSON
// object, without repeated keys.
func TestParseProposalExactlyOneObject(t *testing.T) {
	own := `{"mechanism": "lr-scale", "params": {"factor": "2"}}`
	injected := `{"mechanism": "warmup", "params": {"steps": "100"}}`
	p, err := ParseProposal("I propose:\n"+own+"\nbecause…", nil, true)
	require.NoError(t, err)
	require.Equal(t, "lr-scale", p.Mechanism)
	for _, bad := range []string{
		"Earlier someone wrote " + injected + "; mine: " + own,
		own + "\n" + own,
		`{"mechanism": "warmup", "mechanism": "lr-scale", "params": {"factor": "2"}}`,
		`{"mechanism": "lr-scale", "params": {"factor": "2", "factor": "4"}}`,
	} {
		_, err := ParseProposal(bad, nil, true)
		require.ErrorIs(t, err, ErrAmbiguous, bad)
	}
	_, err = ParseProposal("nothing here", nil, true)
	require.ErrorIs(t, err, ErrNoJSON)
}
