package probe

import (
	"strings"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Judge returns the judgement diagnostic (evalstat.JudgeRegions) of one
// evaluation: per evaluated state on a task of the landscape, the
// method's distribution over mechanisms there and the task's mechanism
// gains, the state's region named by region. A method that samples from
// pol (Base, SFT, RFT, LM2LM without test-time rerank) has its exact card
// probabilities at the evaluation temperature; any other (the rerank,
// best-known changes) the share of each mechanism among its K proposals.
// nil without a landscape or when no evaluated task is in it.
func Judge(region func(task string) string, land landscape.Gains, ev lm2lm.EvalReport, prop proposer.Proposer, pol *proposer.Policy) ([]evalstat.Judgement, error) {
	if land == nil {
		return nil, nil
	}
	exact := prop == proposer.Proposer(pol)
	var mechs []string
	if exact {
		mechs = canonical(pol.Mechanisms())
	}
	var states []evalstat.Judged
	for _, st := range ev.States {
		gains, ok := land[st.State.Task.ID]
		if !ok {
			continue
		}
		var p map[string]float64
		if exact {
			p = cardShares(pol.CardProbs(st.State), mechs)
		} else if p = sampleShares(st.Samples); p == nil {
			continue
		}
		states = append(states, evalstat.Judged{Region: region(st.State.Task.ID), Policy: p, Gains: gains})
	}
	if len(states) == 0 {
		return nil, nil
	}
	return evalstat.JudgeRegions(states)
}

// cardShares is the policy's probability of each mechanism: its card
// probabilities summed by mechanism (a card past mechs is no change).
func cardShares(probs []float64, mechs []string) map[string]float64 {
	p := map[string]float64{}
	for i, x := range probs {
		m := records.NoChange
		if i < len(mechs) {
			m = mechs[i]
		}
		p[m] += x
	}
	return p
}

// sampleShares is each mechanism's share among a state's valid proposals;
// nil when there is none.
func sampleShares(samples []lm2lm.SampleEval) map[string]float64 {
	n := 0
	for _, smp := range samples {
		if smp.Key != "" {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	p := map[string]float64{}
	for _, smp := range samples {
		if smp.Key != "" {
			mech, _, _ := strings.Cut(smp.Key, "{")
			p[records.CanonicalName(mech)] += 1 / float64(n)
		}
	}
	return p
}
