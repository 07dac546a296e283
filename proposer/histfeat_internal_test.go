package proposer

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

func histRecord(task records.Task, mech, dir string, gain float64, infeasible string) records.Record {
	return records.Record{Task: task, Proposal: records.Proposal{Mechanism: mech, Params: map[string]string{"dir": dir}},
		Gain: gain, Infeasible: infeasible, Source: records.Real}
}

func TestHistoryProposalFeatures(t *testing.T) {
	task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.NatsPerToken, RefLoss: 1, SeedNoise: 1}
	l := &layout{hpOff: 100, hpN: 1 << 16}
	up := histRecord(task, "x", "up", 1, "")
	down := histRecord(task, "x", "down", 1, "")
	upLost := histRecord(task, "x", "up", -1, "")
	upFailed := histRecord(task, "x", "up", 0, "diverged")
	one := l.historyProposalFeatures([]records.Record{up})
	require.Len(t, one, 1)
	require.GreaterOrEqual(t, one[0], 100)
	require.Less(t, one[0], 100+1<<16)
	// The direction, the outcome and nothing else decide the feature.
	for _, other := range []records.Record{down, upLost, upFailed} {
		require.NotEqual(t, one, l.historyProposalFeatures([]records.Record{other}))
	}
	again := up
	again.Gain = 3
	require.Equal(t, one, l.historyProposalFeatures([]records.Record{again}), "another positive gain is the same outcome")
	all := l.historyProposalFeatures([]records.Record{down, up, upLost, up, upFailed})
	require.Len(t, all, 4, "repeats collapse")
	require.IsIncreasing(t, all)
	require.Equal(t, all, l.historyProposalFeatures([]records.Record{upFailed, upLost, up, down}), "order does not matter")
	require.Empty(t, (&layout{hpOff: 100}).historyProposalFeatures([]records.Record{up}), "0 buckets = off")
	require.Empty(t, l.historyProposalFeatures(nil))
}

// The card features say only that card x helped; with the history-proposal
// features a parameter head can learn to repeat the direction that helped.
// Without them both directions stay at probability ½.
func TestHistoryProposalFeaturesLetTheParameterFollowTheHistory(t *testing.T) {
	cat := []records.Card{
		{Mechanism: "x", Description: "directional", Params: []records.ParamSpec{{Name: "dir", Kind: "enum", Choices: []string{"up", "down"}}}},
		{Mechanism: "y", Description: "other"},
	}
	task := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.NatsPerToken, RefLoss: 1, SeedNoise: 1}
	state := func(dir string) records.State {
		return records.State{Task: task, History: []records.Record{histRecord(task, "x", dir, 1, "")}}
	}
	sample := func(dir string) Sample {
		return Sample{Proposal: records.Proposal{Mechanism: "x", Params: map[string]string{"dir": dir}}, Temperature: 1}
	}
	pDir := func(p *Policy, dir string) float64 {
		lp, err := p.Score(context.Background(), state(dir), sample(dir))
		require.NoError(t, err)
		require.Len(t, lp, 2)
		return math.Exp(lp[1])
	}
	for _, buckets := range []int{0, 64} {
		cfg := DefaultPolicyConfig()
		cfg.HistoryProposalBuckets = buckets
		p, err := NewPolicy(cat, cfg, nil)
		require.NoError(t, err)
		batch := []Item{{State: state("up"), Sample: sample("up")}, {State: state("down"), Sample: sample("down")}}
		for range 200 {
			_, err := p.Supervise(context.Background(), batch)
			require.NoError(t, err)
		}
		if buckets == 0 {
			require.InDelta(t, 0.5, pDir(p, "up"), 1e-9)
			require.InDelta(t, 0.5, pDir(p, "down"), 1e-9)
			continue
		}
		require.Greater(t, pDir(p, "up"), 0.95)
		require.Greater(t, pDir(p, "down"), 0.95)
	}
}

func TestHistoryProposalBucketsValidated(t *testing.T) {
	for _, n := range []int{-1, maxFamilyBuckets + 1} {
		cfg := DefaultPolicyConfig()
		cfg.HistoryProposalBuckets = n
		require.ErrorIs(t, cfg.Validate(), ErrConfig, "%d", n)
	}
}
