package proposertest_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

var cat = []records.Card{
	{Mechanism: "lr-scale", Params: []records.ParamSpec{{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}}}},
	{Mechanism: "warmup", Params: []records.ParamSpec{{Name: "steps", Kind: "int", Choices: []string{"10", "100"}}}},
	{Mechanism: "tie-embeddings"},
}

func scripted() *proposertest.Scripted {
	return proposertest.FromProposals(
		records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}},
		records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "10"}},
		records.Proposal{Mechanism: "tie-embeddings"},
	)
}

func TestScriptedConforms(t *testing.T) {
	proposertest.RunTrainable(t, func(t *testing.T) proposer.Trainable { return scripted() },
		proposertest.Options{Deterministic: true, RequireLogProbs: true, Catalogue: cat})
}

func TestScriptedWithInvalidConforms(t *testing.T) {
	s := scripted()
	s.Script = append(s.Script, proposer.Sample{Tokens: []string{"garbage"}, Invalid: true, Reason: "no JSON object"})
	proposertest.Run(t, func(t *testing.T) proposer.Proposer { return s }, proposertest.Options{Deterministic: true, Catalogue: cat})
}

func TestScriptedRecords(t *testing.T) {
	s := scripted()
	st := proposertest.DefaultStates(cat)[1]
	got, err := s.Propose(context.Background(), st, 5, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Len(t, got, 5)
	require.Len(t, s.States(), 1)
	require.Equal(t, st.Task.ID, s.States()[0].Task.ID)

	items := []proposer.Item{{State: st, Sample: got[0], Advantage: 0.5}, {State: st, Sample: got[1], Advantage: -0.5}}
	stats, err := s.Update(context.Background(), items)
	require.NoError(t, err)
	require.Equal(t, 2, stats.Tokens)
	require.Len(t, s.Updates(), 1)
	require.Equal(t, 0.5, s.Updates()[0][0].Advantage)
	items[0].Sample.Tokens[0] = "changed after the call"
	require.NotEqual(t, "changed after the call", s.Updates()[0][0].Sample.Tokens[0], "Scripted must keep a copy")

	_, err = s.Supervise(context.Background(), items[:1])
	require.NoError(t, err)
	require.Len(t, s.Supervised(), 1)

	boom := errors.New("boom")
	s.Err = boom
	_, err = s.Propose(context.Background(), st, 1, rand.New(rand.NewPCG(1, 2)))
	require.ErrorIs(t, err, boom)
	_, err = s.Update(context.Background(), items)
	require.ErrorIs(t, err, boom)
}

func TestDefaultStatesValid(t *testing.T) {
	for _, c := range [][]records.Card{nil, cat} {
		for i, s := range proposertest.DefaultStates(c) {
			require.NoError(t, s.Validate(), "state %d", i)
		}
	}
}

func TestCheckSample(t *testing.T) {
	ok := proposer.Sample{Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2.0"}},
		Tokens: []string{"lr-scale", "factor=2"}, LogProbs: []float64{-0.5, 0}, Temperature: 1}
	opts := proposertest.Options{Catalogue: cat, RequireLogProbs: true}
	tests := []struct {
		name    string
		edit    func(s *proposer.Sample)
		opts    proposertest.Options
		wantErr bool
	}{
		{"valid", func(*proposer.Sample) {}, opts, false},
		{"positive log-prob", func(s *proposer.Sample) { s.LogProbs[0] = 0.1 }, opts, true},
		{"NaN log-prob", func(s *proposer.Sample) { s.LogProbs[1] = math.NaN() }, opts, true},
		{"log-probs not one per token", func(s *proposer.Sample) { s.LogProbs = s.LogProbs[:1] }, opts, true},
		{"missing log-probs", func(s *proposer.Sample) { s.LogProbs = nil }, opts, true},
		{"missing log-probs allowed", func(s *proposer.Sample) { s.LogProbs = nil }, proposertest.Options{Catalogue: cat}, false},
		{"negative temperature", func(s *proposer.Sample) { s.Temperature = -1 }, opts, true},
		{"empty mechanism", func(s *proposer.Sample) { s.Proposal.Mechanism = " " }, opts, true},
		{"invalid with reason", func(s *proposer.Sample) { s.Proposal = records.Proposal{}; s.Invalid, s.Reason = true, "bad" }, opts, false},
		{"invalid without reason", func(s *proposer.Sample) { s.Invalid = true }, opts, true},
		{"unknown card", func(s *proposer.Sample) { s.Proposal.Mechanism = "dropout" }, opts, true},
		{"unknown card, no catalogue", func(s *proposer.Sample) { s.Proposal.Mechanism = "dropout" }, proposertest.Options{}, false},
		{"off-grid value", func(s *proposer.Sample) { s.Proposal.Params["factor"] = "3" }, opts, true},
		{"extra param", func(s *proposer.Sample) { s.Proposal.Params["x"] = "1" }, opts, true},
		{"no-change refused", func(s *proposer.Sample) { s.Proposal = records.Proposal{Mechanism: records.NoChange} }, opts, true},
		{"no-change allowed", func(s *proposer.Sample) { s.Proposal = records.Proposal{Mechanism: records.NoChange} },
			proposertest.Options{Catalogue: cat, AllowNoChange: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			s.Proposal.Params = map[string]string{"factor": "2.0"}
			s.LogProbs = append([]float64(nil), ok.LogProbs...)
			tt.edit(&s)
			err := proposertest.CheckSample(s, tt.opts)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}
