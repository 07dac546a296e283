package main

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

func prop1(mech, k, v string) records.Proposal {
	return records.Proposal{Mechanism: mech, Params: map[string]string{k: v}}
}

// A landscape store by hand: a proposal's gain is its mean over seeds in
// σ_e units, an infeasible run counts infeasibleGain, a mechanism takes its
// best proposal.
func TestLoadLandscape(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "land.records")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	task := records.Task{ID: "t1", Family: "f", Split: records.HeldOut, Metric: records.BitsPerByte, RefLoss: 3, SeedNoise: 0.1}
	add := func(p records.Proposal, seed uint64, gain float64, infeasible string) {
		r := records.Record{Task: task, Proposal: p, Source: records.Real, Loss: 3 - gain, Gain: gain, Seeds: []uint64{seed},
			Infeasible: infeasible, Time: time.Unix(1, 0).UTC()}
		if infeasible != "" {
			r.Loss, r.Gain = 0, 0
		}
		require.NoError(t, s.Append(ctx, r))
	}
	add(prop1("lr", "k", "2"), 1, 0.2, "")
	add(prop1("lr", "k", "2"), 2, 0.4, "")
	add(prop1("lr", "k", "0.5"), 1, -0.1, "")
	add(prop1("Width", "m", "2"), 1, 0, "diverged")
	require.NoError(t, s.Close())
	land, err := loadLandscape(ctx, path)
	require.NoError(t, err)
	require.Len(t, land.gains, 1)
	require.InDelta(t, 3.0, land.gains["t1"]["lr"], 1e-12)
	require.Equal(t, infeasibleGain, land.gains["t1"]["width"])
	// Seed by seed: seed 1 ran every proposal (lr's best 0.2/0.1 = 2 of 2
	// and −1, width infeasible); seed 2 ran lr k=2 alone (0.4/0.1 = 4).
	require.Equal(t, map[string]float64{"lr": 2, "width": infeasibleGain}, roundMap(land.bySeed[0]["t1"]))
	require.Equal(t, map[string]float64{"lr": 4}, roundMap(land.bySeed[1]["t1"]))
	require.Equal(t, "f", land.tasks["t1"].Family)

	_, err = loadLandscape(ctx, filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

// judge on a hand-made evaluation of a proposer that is not the policy:
// each state's distribution is the share of each mechanism among its
// proposals. State 0 (task a, best lr) proposes lr, lr, width, (invalid);
// state 1 (task b, best width) lr, lr. Ranks: 1 and 2 of 2; mass 2/3 and
// 0; spread ½·(|2/3−1| + 1/3) = 1/3 of 1.
func TestJudgeSamples(t *testing.T) {
	land := landscape{"a": {"lr": 2, "width": -1}, "b": {"lr": 0, "width": 1}}
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
	js, err := judge("v1", land, ev, nil, nil)
	require.NoError(t, err)
	require.NotEmpty(t, js)
	j := js[0]
	require.Equal(t, 2, j.States)
	require.InDelta(t, 1.5, j.BestRank, 1e-12)
	require.InDelta(t, 1.5, j.ChanceRank, 1e-12)
	require.InDelta(t, 1.0/3, j.BestMass, 1e-12)
	require.InDelta(t, 1.0/3, j.PolicySpread, 1e-12)
	require.Equal(t, 1.0, j.BestSpread)

	js, err = judge("v1", nil, ev, nil, nil)
	require.NoError(t, err)
	require.Nil(t, js, "no landscape, no diagnostic")
}

// judge on the policy itself reads its exact card probabilities: the mass
// on the best mechanism is the policy's probability of that card.
func TestJudgePolicy(t *testing.T) {
	pol, err := newPolicy(options{}, 1)
	require.NoError(t, err)
	mechs := pol.Mechanisms()
	cat := lab.Catalogue()
	require.NotEmpty(t, cat)
	task := lab.SuiteV2(1).TestIn[0]
	st := records.State{Task: records.Task{ID: task.ID, Family: task.Family, Split: records.HeldOut, RefLoss: 3, SeedNoise: 0.1}}
	best := records.CanonicalName(mechs[3])
	land := landscape{task.ID: {best: 5, records.CanonicalName(mechs[0]): 1, records.CanonicalName(mechs[1]): -2}}
	ev := lm2lm.EvalReport{States: []lm2lm.StateEval{{State: st}}}
	js, err := judge("v1", land, ev, pol, pol)
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

// judgementRows averages over seeds, a NaN dependence left out of its mean.
func TestJudgementRows(t *testing.T) {
	rs := []Result{
		{Method: "m", Judgement: []evalstat.Judgement{{States: 4, BestRank: 2, ChanceRank: 3, BestMass: 0.2, PolicySpread: 0.1, BestSpread: 0.5, Dependence: 0.2},
			{Region: "starved", States: 1, BestRank: 1, ChanceRank: 3, BestMass: 0.5, Dependence: math.NaN()}}},
		{Method: "m", Judgement: []evalstat.Judgement{{States: 4, BestRank: 4, ChanceRank: 3, BestMass: 0.4, PolicySpread: 0.3, BestSpread: 0.5, Dependence: 0.6},
			{Region: "starved", States: 2, BestRank: 3, ChanceRank: 3, BestMass: 0.1, PolicySpread: 0.2, BestSpread: 0.5, Dependence: 0.4}}},
	}
	rows := judgementRows(rs)
	require.Len(t, rows, 2)
	require.Equal(t, JudgementRow{Method: "m", Part: "all", Seeds: 2, States: 8, BestRank: 3, ChanceRank: 3, BestMass: 0.30000000000000004,
		PolicySpread: 0.2, BestSpread: 0.5, Dependence: 0.4}, rows[0])
	require.Equal(t, "starved", rows[1].Part)
	require.InDelta(t, 0.4, rows[1].Dependence, 1e-12, "the NaN seed is left out")
	require.True(t, slices.ContainsFunc(rows, func(r JudgementRow) bool { return r.States == 3 }))
}

// -hold-out-family: the family's training tasks leave training, and the
// evaluation is the family's tasks of the suite's test split only.
func TestHoldOutFamily(t *testing.T) {
	o := options{suite: lab.V3ValName, holdOut: "mdm"}
	specs, isTest, err := o.tasks()
	require.NoError(t, err)
	sp, _ := lab.SplitNamed(lab.V3ValName)
	train, test := 0, 0
	for _, s := range specs {
		task := records.Task{ID: s.ID, Family: s.Family, Split: s.Split}
		if s.Family == "mdm" {
			require.NotEqual(t, records.Train, s.Split, s.ID)
		} else if s.Split == records.Train {
			train++
		}
		if isTest(task) {
			test++
			require.Equal(t, "mdm", s.Family)
			require.True(t, sp.Contains(s.ID), "only the split's tasks: %s", s.ID)
		}
	}
	require.Equal(t, 48, train, "the other three families' 16 training tasks each")
	require.Equal(t, 12, test)
	o.holdOut = "no-such-family"
	_, _, err = o.tasks()
	require.ErrorIs(t, err, lab.ErrUnknownFamily)
	require.Error(t, o.validate())
}

// roundMap rounds each value to 1e-9, for exact comparisons of sums.
func roundMap(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = math.Round(v*1e9) / 1e9
	}
	return out
}

// Within a part the rows follow the methods' row order, whatever order the
// results came in.
func TestJudgementRowsInMethodOrder(t *testing.T) {
	j := []evalstat.Judgement{{States: 1, BestRank: 1, ChanceRank: 2}, {Region: "in-distribution", States: 1, BestRank: 1, ChanceRank: 2}}
	rows := judgementRows([]Result{{Method: "lm2lm", Judgement: j}, {Method: "rerank", Judgement: j}, {Method: "base", Judgement: j}})
	var got []string
	for _, r := range rows {
		got = append(got, r.Part+" "+r.Method)
	}
	require.Equal(t, []string{"all base", "all rerank", "all lm2lm", "in-distribution base", "in-distribution rerank", "in-distribution lm2lm"}, got)
}
