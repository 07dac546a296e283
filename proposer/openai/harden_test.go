package openai

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
)

// TestProposeHugeResponseBodyBoundedMemory: a 256 MB answer fails with
// ErrBodyTooLarge, having allocated a small multiple of MaxBodyBytes.
func TestProposeHugeResponseBodyBoundedMemory(t *testing.T) {
	for _, withLength := range []bool{true, false} {
		srv := oaitest.HugeBody(256<<20, withLength)
		defer srv.Close()
		cfg := DefaultConfig()
		cfg.BaseURL, cfg.Model, cfg.APIKey = srv.URL, "m", "k"
		cfg.Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
		cfg.Getenv = func(string) string { return "" }
		p, err := New(cfg)
		require.NoError(t, err)
		task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1, SeedNoise: 0.01}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = p.Propose(context.Background(), records.State{Task: task}, 1, rand.New(rand.NewPCG(1, 2)))
		runtime.ReadMemStats(&after)
		require.ErrorIs(t, err, oaichat.ErrBodyTooLarge)
		require.NotErrorIs(t, err, ErrTransient)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8*cfg.MaxBodyBytes), "allocated (with Content-Length: %v)", withLength)
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
