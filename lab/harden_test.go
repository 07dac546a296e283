package lab_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// TestNoChangeThroughAPoolOverTheLabStore: reference runs and proposal
// outcomes never collide in a store lookup. The no-change proposal run
// through a builder.Pool whose store is the lab's own (where the reference
// runs of the same key and seed live) gains exactly 0, as the lab's
// Execute gives, not the reference run's deviation from b_e.
func TestNoChangeThroughAPoolOverTheLabStore(t *testing.T) {
	ctx := context.Background()
	store := records.NewMemStore()
	l := tinyLab(t, store)
	task, err := l.Task(ctx, "tiny-ar")
	require.NoError(t, err)
	ref, err := l.Reference(ctx, "tiny-ar")
	require.NoError(t, err)
	require.NotEqual(t, task.RefLoss, ref.Runs[0].Loss, "the reference run deviates from b_e")

	cfg := builder.DefaultPoolConfig()
	cfg.Store = store
	pool, err := builder.NewPool(l, cfg)
	require.NoError(t, err)
	j, err := l.Build(ctx, task, records.Proposal{Mechanism: records.NoChange})
	require.NoError(t, err)
	for range 2 { // the second is served from the store
		out, err := pool.Execute(ctx, j)
		require.NoError(t, err)
		require.Zero(t, out.Gain)
		require.Equal(t, ref.Runs[0].Loss, out.Loss)
	}
	require.EqualValues(t, 1, pool.Ledger().Totals().Reused)
	// The reference runs are not evidence.
	all, err := store.Scan(ctx, records.Filter{TaskID: "tiny-ar"})
	require.NoError(t, err)
	ev, err := records.RealOnly(all)
	require.NoError(t, err)
	require.Equal(t, 1, ev.Len())
}
