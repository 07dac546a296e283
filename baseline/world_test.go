package baseline_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// A synthetic world whose answers are known: two families, five catalogue
// proposals, and a true gain per (family, proposal) in σ_e units (NaN =
// infeasible). σ_e are powers of two so that gain/σ_e is exact.

var cat = []records.Card{
	{Mechanism: "lr", Params: []records.ParamSpec{{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}}}},
	{Mechanism: "warm", Params: []records.ParamSpec{{Name: "steps", Kind: "int", Choices: []string{"50", "100"}}}},
	{Mechanism: "qk"},
}

func prop(mech, param, value string) records.Proposal {
	p := records.Proposal{Mechanism: mech}
	if param != "" {
		p.Params = map[string]string{param: value}
	}
	return p
}

var (
	lr2     = prop("lr", "factor", "2")
	lrHalf  = prop("lr", "factor", "0.5")
	warm100 = prop("warm", "steps", "100")
	warm50  = prop("warm", "steps", "50")
	qk      = prop("qk", "", "")
	all     = []records.Proposal{lr2, lrHalf, warm100, warm50, qk}
)

const infeasible = -99 // marks an infeasible proposal in truth

// truth is the gain in σ_e units of each proposal on each family.
var truth = map[string]map[string]float64{
	"fa": {lr2.Key(): 3, warm100.Key(): 1, qk.Key(): -1, lrHalf.Key(): -2, warm50.Key(): infeasible},
	"fb": {qk.Key(): 4, lr2.Key(): -3, warm100.Key(): 0, lrHalf.Key(): 0, warm50.Key(): 0},
}

func task(id, family string, sigma float64) records.Task {
	return records.Task{ID: id, Family: family, Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 4, SeedNoise: sigma, Budget: 100}
}

var (
	a1, a2, a3 = task("a1", "fa", 0.5), task("a2", "fa", 0.25), task("a3", "fa", 0.5)
	b1, b2     = task("b1", "fb", 0.25), task("b2", "fb", 0.5)
)

// record is the real record of p on t under truth.
func record(t records.Task, p records.Proposal) records.Record {
	g := truth[t.Family][p.Key()]
	if g == infeasible {
		return records.Record{Task: t, Proposal: p, Source: records.Real, Infeasible: "diverged", Seeds: []uint64{1}}
	}
	return records.Record{Task: t, Proposal: p, Source: records.Real, Gain: g * t.SeedNoise,
		Loss: t.RefLoss - g*t.SeedNoise, Seeds: []uint64{1}}
}

// evidence holds every proposal's record on a1, a2 and b1.
func evidence() records.Evidence {
	var rs []records.Record
	for _, t := range []records.Task{a1, a2, b1} {
		for _, p := range all {
			rs = append(rs, record(t, p))
		}
	}
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		panic(err)
	}
	return ev
}

// oracle is a world model that knows truth; it counts its calls and checks
// that it is given evidence.
type oracle struct {
	calls    atomic.Int64
	evidence int
	negate   bool
}

func (o *oracle) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if err := ctx.Err(); err != nil {
		return rwm.Prediction{}, err
	}
	o.calls.Add(1)
	if q.Evidence.Len() != o.evidence {
		return rwm.Prediction{}, fmt.Errorf("oracle: %d records in context, want %d", q.Evidence.Len(), o.evidence)
	}
	g, ok := truth[q.Task.Family][q.Proposal.Key()]
	if !ok || g == infeasible {
		return rwm.Prediction{Valid: false, Reason: "infeasible"}, nil
	}
	if o.negate {
		g = -g
	}
	return rwm.Prediction{Gain: g * q.Task.SeedNoise, Valid: true}, nil
}

// lab builds and runs proposals under truth, counting executions.
type lab struct{ runs atomic.Int64 }

func (l *lab) Build(ctx context.Context, t records.Task, p records.Proposal) (builder.Job, error) {
	return builder.Job{Task: t, Proposal: p, Seed: 1}, nil
}

func (l *lab) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	l.runs.Add(1)
	r := record(j.Task, j.Proposal)
	out := builder.Outcome{Loss: r.Loss, Gain: r.Gain, Seeds: []uint64{j.Seed}, Cost: records.Cost{DeviceSeconds: 2, WallSeconds: 1}}
	if r.Infeasible != "" {
		out.Infeasible = r.Infeasible
		return out, &builder.RunError{Class: builder.ErrInfeasible, Reason: r.Infeasible}
	}
	return out, nil
}
