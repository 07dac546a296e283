package labenv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/labenv"
	"github.com/lm2lm/lm2lm/internal/labtest"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// tiny returns a lab of two training tasks, one diverging twin of the
// first and one test task.
func tiny() lab.Config {
	s := lab.SuiteV2(1)
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{s.Train[1], s.Train[2], labtest.DivergingTwin(s.Train[1]), s.TestIn[0]}
	return cfg
}

// Prepare on the lab: the diverged task is left out with lab.ErrReference,
// the rest split by their split, M_0 has the draws asked for (distinct
// pairs over the training tasks, from the catalogue), and a second Prepare
// over the same store draws the same M_0 and pays for nothing.
func TestPrepareOnTheLab(t *testing.T) {
	ctx := context.Background()
	store := records.NewMemStore()
	cfg := tiny()
	env, err := labenv.Open(cfg, store)
	require.NoError(t, err)
	o := environment.Options{M0: 4, Seed: 3, Parallel: 2}
	p, err := environment.Prepare(ctx, env, o)
	require.NoError(t, err)
	require.Len(t, p.Train, 2)
	require.Len(t, p.HeldOut, 1)
	require.Len(t, p.LeftOut, 1)
	require.Equal(t, cfg.Tasks[2].ID, p.LeftOut[0].ID)
	require.True(t, errors.Is(p.LeftOut[0].Err, lab.ErrReference), "%v", p.LeftOut[0].Err)
	require.Equal(t, 4, p.M0.Len())
	require.Equal(t, 4, p.M0Spent.Runs)
	require.Equal(t, 0, p.M0Spent.Reused)
	draws := environment.DrawM0(o.Seed, p.Train, lab.Catalogue(), o.M0)
	for i, r := range p.M0.Records() {
		require.Equal(t, draws[i].Task.ID, r.Task.ID)
		require.Equal(t, draws[i].Proposal.Key(), r.Proposal.Key())
		require.Equal(t, records.Train, r.Task.Split)
	}

	env2, err := labenv.Open(cfg, store)
	require.NoError(t, err)
	q, err := environment.Prepare(ctx, env2, o)
	require.NoError(t, err)
	require.Equal(t, 0, q.M0Spent.Runs, "nothing paid twice")
	require.Equal(t, 4, q.M0Spent.Reused)
	require.Equal(t, p.M0.Records(), q.M0.Records())
}

// Without training tasks there is no M_0, and Parallel must be ≥ 1.
func TestPrepareRefuses(t *testing.T) {
	ctx := context.Background()
	s := lab.SuiteV2(1)
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{s.TestIn[0]}
	env, err := labenv.Open(cfg, records.NewMemStore())
	require.NoError(t, err)
	_, err = environment.Prepare(ctx, env, environment.Options{M0: 2, Parallel: 0})
	require.ErrorContains(t, err, "Parallel = 0")
	_, err = environment.Prepare(ctx, env, environment.Options{M0: 2, Parallel: 1})
	require.ErrorContains(t, err, "no training task")
	p, err := environment.Prepare(ctx, env, environment.Options{Parallel: 1})
	require.NoError(t, err)
	require.Len(t, p.HeldOut, 1)
	require.Zero(t, p.M0.Len())
}

// The lab as an environment: reference runs, the split and M_0 in one
// call.
func Example() {
	s := lab.SuiteV2(1)
	cfg := lab.DefaultConfig()
	cfg.Tasks = []lab.TaskSpec{s.Train[1], s.Train[2], s.TestIn[0]}
	env, err := labenv.Open(cfg, records.NewMemStore())
	if err != nil {
		panic(err)
	}
	p, err := environment.Prepare(context.Background(), env, environment.Options{M0: 3, Seed: 1, Parallel: 2})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d training, %d held-out tasks; M_0 %d records, %d runs paid\n", len(p.Train), len(p.HeldOut), p.M0.Len(), p.M0Spent.Runs)
	// Output: 2 training, 1 held-out tasks; M_0 3 records, 3 runs paid
}
