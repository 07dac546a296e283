package probe

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// liftWorld predicts a fixed gain per proposal key (rejecting keys it
// lacks), and proposal lift 3 higher for each record of the queried task
// in the evidence.
type liftWorld struct {
	gain map[string]float64
	lift string
}

func (w liftWorld) Predict(_ context.Context, q rwm.Query) (rwm.Prediction, error) {
	g, ok := w.gain[q.Proposal.Key()]
	if !ok {
		return rwm.Prediction{Reason: "unknown"}, nil
	}
	for i := 0; i < q.Evidence.Len() && q.Proposal.Key() == w.lift; i++ {
		if q.Evidence.At(i).Task.ID == q.Task.ID {
			g += 3
		}
	}
	return rwm.Prediction{Gain: g, Valid: true}, nil
}

// rankOf by hand: scores (a 3, b 1, c 2, d unscored) against gains (a 0,
// b 5, c 1, d −6): the best, b, is third of four (a and c above it; d, at
// −Inf, below); the top-ranked, a, gained 0.
func TestRankOf(t *testing.T) {
	r := rankOf(map[string]float64{"a": 3, "b": 1, "c": 2}, map[string]float64{"a": 0, "b": 5, "c": 1, "d": -6})
	require.Equal(t, 3.0, r.BestRank)
	require.Equal(t, 0.0, r.TopGain)
	require.NotNil(t, r.Spearman)
	// Keys in order a, b, c, d: score ranks 4, 2, 3, 1; gain ranks 2, 4,
	// 3, 1. Centred (mean 2.5): (1.5, −0.5, 0.5, −1.5) and (−0.5, 1.5,
	// 0.5, −1.5): Σ = −0.75 − 0.75 + 0.25 + 2.25 = 1; each Σ² = 5; ρ = 0.2.
	require.InDelta(t, 0.2, *r.Spearman, 1e-12)

	// A constant score has no correlation and ties everything: the best
	// takes the mean rank of the four, 2.5.
	r = rankOf(map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1}, map[string]float64{"a": 0, "b": 5, "c": 1, "d": -6})
	require.Nil(t, r.Spearman)
	require.Equal(t, 2.5, r.BestRank)

	half := 0.5
	m := MeanRanking([]Ranking{{BestRank: 1, Spearman: &half, TopGain: 2}, {BestRank: 3, TopGain: -1}})
	require.Equal(t, 2.0, m.BestRank)
	require.Equal(t, 0.5, m.TopGain)
	require.Equal(t, 0.5, *m.Spearman, "ρ over the tasks where it is defined")
	require.True(t, math.IsNaN(MeanRanking(nil).BestRank))
}

// The teacher probe on a table world model over two catalogue changes of
// different mechanisms: under M_u the task's own calibration record lifts
// the worse mechanism above the better one, unless the state is judged
// without its task's records (HeldOutTask), as the trainer judges it.
func TestTeacherMeasure(t *testing.T) {
	ctx := context.Background()
	pol, err := setting.Validated().NewPolicy(1)
	require.NoError(t, err)
	mechs := pol.Mechanisms()
	cat := lab.Catalogue()
	var pa, pb records.Proposal
	for _, c := range cat {
		if c.Mechanism == mechs[0] && pa.Mechanism == "" {
			pa = records.Proposal{Mechanism: c.Mechanism}
		}
		if c.Mechanism == mechs[1] && pb.Mechanism == "" {
			pb = records.Proposal{Mechanism: c.Mechanism}
		}
	}
	require.NotEmpty(t, pa.Mechanism)
	require.NotEmpty(t, pb.Mechanism)
	a, b := records.CanonicalName(pa.Mechanism), records.CanonicalName(pb.Mechanism)
	task, other := rwmtest.Task(4), rwmtest.Task(1) // M_0 holds records of tasks 0–3
	land := landscape.Gains{task.ID: {a: 4, b: 1}}
	// a is rated 2 and b 1.5, b 4.5 once the evidence holds a record of
	// the task.
	w := liftWorld{gain: map[string]float64{pa.Key(): 2, pb.Key(): 1.5}, lift: pb.Key()}
	rec := records.Record{Task: task, Proposal: pb, Source: records.Real, Loss: task.RefLoss - task.SeedNoise, Gain: task.SeedNoise,
		Seeds: []uint64{1}, Time: time.Unix(1, 0).UTC()}
	m0 := rwmtest.Evidence(4)
	mu, err := m0.AddReal(rec)
	require.NoError(t, err)
	require.Less(t, m0.WithoutTask(other.ID).Len(), m0.Len(), "M_0 holds records of the other training task")

	for _, held := range []bool{false, true} {
		tw := &teacher{cfg: TeacherConfig{Land: land, Catalogue: []records.Proposal{pa, pb}, HeldOutTask: held},
			world: w, pol: pol, train: []records.Task{task, other}}
		p, err := tw.measure(ctx, 40, mu, m0)
		require.NoError(t, err)
		require.Equal(t, 40, p.Step)
		require.Equal(t, 1, p.Tasks, "only the landscape's tasks")
		require.Equal(t, 1.0, p.World0.BestRank, "on M_0 the better mechanism is rated first")
		require.Equal(t, 4.0, p.World0.TopGain)
		if held {
			require.Equal(t, p.World0, p.World, "without the task's records M_u is M_0 here")
		} else {
			require.Equal(t, 2.0, p.World.BestRank, "the task's own record lifts b above a")
			require.Equal(t, 1.0, p.World.TopGain)
			require.Equal(t, -1.0, *p.World.Spearman)
		}
		// The untrained policy is uniform: a and b tie at rank 1.5.
		require.Equal(t, 1.5, p.Policy.BestRank)
	}
}
