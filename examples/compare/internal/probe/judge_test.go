package probe

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
)

// noRegion puts every task in no region: one judgement, over all states.
func noRegion(string) string { return "" }

// Judge on a hand-made evaluation of a proposer that is not the policy:
// each state's distribution is the share of each mechanism among its
// proposals. State 0 (task a, best lr) proposes lr, lr, width, (invalid);
// state 1 (task b, best width) lr, lr. Ranks: 1 and 2 of 2; mass 2/3 and
// 0; spread ½·(|2/3−1| + 1/3) = 1/3 of 1.
func TestJudgeSamples(t *testing.T) {
	land := landscape.Gains{"a": {"lr": 2, "width": -1}, "b": {"lr": 0, "width": 1}}
	smp := func(keys ...string) []lm2lm.SampleEval {
		var out []lm2lm.SampleEval
		for _, k := range keys {
			out = append(out, lm2lm.SampleEval{Key: k, Invalid: k == ""})
		}
		return out
	}
	ev := lm2lm.EvalReport{States: []lm2lm.StateEval{
		{State: records.State{Task: records.Task{ID: "a"}}, Samples: smp("lr{k=2}", "lr{k=0.5}", "width{m=2}", "")},
		{State: records.State{Task: records.Task{ID: "b"}}, Samples: smp("lr{k=2}", "lr{k=2}")},
		{State: records.State{Task: records.Task{ID: "not-in-landscape"}}, Samples: smp("lr{k=2}")},
	}}
	js, err := Judge(noRegion, land, ev, nil, nil)
	require.NoError(t, err)
	require.NotEmpty(t, js)
	j := js[0]
	require.Equal(t, 2, j.States)
	require.InDelta(t, 1.5, j.BestRank, 1e-12)
	require.InDelta(t, 1.5, j.ChanceRank, 1e-12)
	require.InDelta(t, 1.0/3, j.BestMass, 1e-12)
	require.InDelta(t, 1.0/3, j.PolicySpread, 1e-12)
	require.Equal(t, 1.0, j.BestSpread)

	js, err = Judge(noRegion, nil, ev, nil, nil)
	require.NoError(t, err)
	require.Nil(t, js, "no landscape, no diagnostic")
}

// Judge on the policy itself reads its exact card probabilities: the mass
// on the best mechanism is the policy's probability of that card.
func TestJudgePolicy(t *testing.T) {
	pol, err := setting.Validated().NewPolicy(1)
	require.NoError(t, err)
	mechs := pol.Mechanisms()
	cat := lab.Catalogue()
	require.NotEmpty(t, cat)
	task := lab.SuiteV2(1).TestIn[0]
	st := records.State{Task: records.Task{ID: task.ID, Family: task.Family, Split: records.HeldOut, RefLoss: 3, SeedNoise: 0.1}}
	best := records.CanonicalName(mechs[3])
	land := landscape.Gains{task.ID: {best: 5, records.CanonicalName(mechs[0]): 1, records.CanonicalName(mechs[1]): -2}}
	ev := lm2lm.EvalReport{States: []lm2lm.StateEval{{State: st}}}
	js, err := Judge(noRegion, land, ev, pol, pol)
	require.NoError(t, err)
	probs := pol.CardProbs(st)
	require.InDelta(t, probs[3], js[0].BestMass, 1e-12)
	// The untrained policy is uniform over the cards: the best ties with
	// the two others measured and takes their mean rank, 2.
	rank := 1.0
	for _, i := range []int{0, 1} {
		switch {
		case probs[i] > probs[3]:
			rank++
		case probs[i] == probs[3]:
			rank += 0.5
		}
	}
	require.Equal(t, rank, js[0].BestRank)
	require.Equal(t, 2.0, rank)
}
