package buildertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// BuilderOptions say what RunBuilder may build.
type BuilderOptions struct {
	// Task is a task the builder accepts.
	Task records.Task
	// Feasible are proposals the builder must build (at least one).
	Feasible []records.Proposal
	// Infeasible are proposals it must refuse with ErrInfeasible; a
	// proposal of an unknown mechanism is always added.
	Infeasible []records.Proposal
	// Seed seeds the suite's random choices (marker file names); default 1.
	Seed uint64
}

// RunBuilder is the conformance suite of builder.Builder (METHOD.md §1
// Builder): a built job carries the task and the proposal (text included)
// it was built from; building twice gives the same job; an unknown
// mechanism and every BuilderOptions.Infeasible proposal fail with an error
// wrapping builder.ErrInfeasible; Build is safe for concurrent use and
// agrees with sequential builds; and proposal text carrying shell
// metacharacters is kept as data (nothing it names is executed).
func RunBuilder(t *testing.T, b builder.Builder, opts BuilderOptions) {
	if len(opts.Feasible) == 0 {
		t.Fatal("buildertest: RunBuilder needs at least one feasible proposal")
	}
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	ctx := context.Background()
	build := func(t *testing.T, p records.Proposal) builder.Job {
		t.Helper()
		j, err := b.Build(ctx, opts.Task, p)
		require.NoError(t, err, "Build(%s)", p.Key())
		return j
	}
	t.Run("CarriesTaskAndProposal", func(t *testing.T) {
		for _, p := range opts.Feasible {
			j := build(t, p)
			require.Equal(t, opts.Task.ID, j.Task.ID)
			require.Equal(t, p.Key(), j.Proposal.Key())
			require.Equal(t, p.Text, j.Proposal.Text)
			require.GreaterOrEqual(t, j.Slots, int64(0))
		}
	})
	t.Run("Deterministic", func(t *testing.T) {
		for _, p := range opts.Feasible {
			require.Equal(t, build(t, p), build(t, p), "two builds of %s", p.Key())
		}
	})
	t.Run("Infeasible", func(t *testing.T) {
		bad := append([]records.Proposal{{Mechanism: "buildertest-no-such-mechanism", Params: map[string]string{"x": "1"}}}, opts.Infeasible...)
		for _, p := range bad {
			_, err := b.Build(ctx, opts.Task, p)
			require.ErrorIs(t, err, builder.ErrInfeasible, "Build(%s)", p.Key())
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		want := make([]builder.Job, len(opts.Feasible))
		for i, p := range opts.Feasible {
			want[i] = build(t, p)
		}
		got := make([]builder.Job, 4*len(want))
		errs := make([]error, len(got))
		var wg sync.WaitGroup
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = b.Build(ctx, opts.Task, opts.Feasible[i%len(want)])
			}()
		}
		wg.Wait()
		for i := range got {
			require.NoError(t, errs[i])
			require.Equal(t, want[i%len(want)], got[i], "concurrent build %d", i)
		}
	})
	t.Run("ProposalTextIsData", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 0x6275696c64))
		marker := fmt.Sprintf("/tmp/lm2lm-pwned-build-%d-%d", os.Getpid(), rng.Uint32())
		p := opts.Feasible[0]
		p.Text = "$(touch " + marker + "); `touch " + marker + "`; touch " + marker
		j := build(t, p)
		require.Equal(t, p.Text, j.Proposal.Text)
		_, err := os.Stat(marker)
		require.True(t, errors.Is(err, os.ErrNotExist), "%s was created: proposal text was executed", marker)
	})
}
