package yamlenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// rec returns a valid record of task id, of source src (failed and
// infeasible as asked) and version v.
func rec(id string, src records.Source, infeasible bool, v string) records.Record {
	r := records.Record{Task: records.Task{ID: id, Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1, SeedNoise: 0.1},
		Proposal: records.Proposal{Mechanism: "m", Params: map[string]string{"v": v + string(src)}}, Source: src, Loss: 1, Seeds: []uint64{1},
		Version: v, Time: time.Unix(1, 0).UTC()}
	if src == records.Failed {
		r.Failure, r.Loss = "exit code 1", 0
	}
	if infeasible {
		r.Infeasible, r.Loss = "diverged", 0
	}
	return r
}

func TestSelectionMatch(t *testing.T) {
	v2, none := "v2", ""
	failedA, infeasB, realA2 := rec("a", records.Failed, false, ""), rec("b", records.Real, true, ""), rec("a", records.Real, false, "v2")
	for _, tt := range []struct {
		sel  Selection
		want [3]bool // failedA, infeasB, realA2
	}{
		{Selection{Failed: true}, [3]bool{true, false, false}},
		{Selection{Infeasible: true}, [3]bool{false, true, false}},
		{Selection{Failed: true, Infeasible: true}, [3]bool{true, true, false}},
		{Selection{Task: "a"}, [3]bool{true, false, true}},
		{Selection{Task: "a", Failed: true}, [3]bool{true, false, false}},
		{Selection{Version: &v2}, [3]bool{false, false, true}},
		{Selection{Version: &none}, [3]bool{true, true, false}},
		{Selection{All: true}, [3]bool{true, true, true}},
	} {
		got := [3]bool{tt.sel.Match(failedA), tt.sel.Match(infeasB), tt.sel.Match(realA2)}
		require.Equal(t, tt.want, got, "%+v", tt.sel)
	}
}

// TestForget: the selected records leave the store for the forgotten
// file, the others stay in order; a locked store is not rewritten; an
// empty selection is refused.
func TestForget(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "records.jsonl")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	all := []records.Record{rec("a", records.Real, false, ""), rec("a", records.Failed, false, ""), rec("b", records.Real, true, ""),
		rec("b", records.Reference, false, "")}
	require.NoError(t, s.Append(ctx, all...))
	_, _, err = Forget(ctx, path, Selection{Failed: true})
	require.ErrorIs(t, err, records.ErrLocked, "a verb holds the store")
	require.NoError(t, s.Close())

	_, _, err = Forget(ctx, path, Selection{})
	require.ErrorIs(t, err, ErrNoSelection)
	forgot, kept, err := Forget(ctx, path, Selection{Failed: true, Infeasible: true})
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 2}, [2]int{forgot, kept})
	require.Equal(t, []records.Record{all[0], all[3]}, scanAll(t, path))
	require.Equal(t, []records.Record{all[1], all[2]}, scanAll(t, ForgottenPath(path)))
	forgot, kept, err = Forget(ctx, path, Selection{Failed: true})
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 2}, [2]int{forgot, kept})
}

func scanAll(t *testing.T, path string) []records.Record {
	t.Helper()
	s, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	defer s.Close()
	rs, err := s.Scan(context.Background(), records.Filter{})
	require.NoError(t, err)
	return rs
}

// failing is an executor that fails every run with ErrFailed, counting
// the runs.
type failing struct{ runs int }

func (f *failing) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	f.runs++
	return builder.Outcome{Cost: records.Cost{DeviceSeconds: 3}, Log: "boom\n"},
		&builder.RunError{Class: builder.ErrFailed, Reason: fmt.Sprintf("exit code %d", 1)}
}

// TestRecorder: a failure is stored once with its cost and log and
// answered from the store after, as reused and ErrFailedBefore; another
// version sees none of it; infeasible outcomes and cancellations are not
// failures.
func TestRecorder(t *testing.T) {
	ctx := context.Background()
	store := records.NewMemStore()
	inner := &failing{}
	r := &recorder{inner: inner, store: View(store, "v1"), minNoise: 0.01, now: time.Now}
	j := buildertest.Job(buildertest.Spec{})
	j.Task.RefLoss, j.Task.SeedNoise = 0, 0 // a reference run's job
	for i := range 3 {
		o, err := r.Execute(ctx, j)
		require.ErrorIs(t, err, builder.ErrFailed)
		require.Equal(t, i > 0, errors.Is(err, ErrFailedBefore), "call %d", i)
		require.Equal(t, i > 0, o.Reused)
		require.Equal(t, 3.0, o.Cost.DeviceSeconds)
	}
	require.Equal(t, 1, inner.runs, "paid once")
	rs, err := store.Scan(ctx, records.Filter{Source: records.Failed})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "builder: run failed: exit code 1", rs[0].Failure)
	require.Equal(t, "boom\n", rs[0].Log)
	require.Equal(t, "v1", rs[0].Version)
	fs := r.take()
	require.Len(t, fs, 3)
	require.Equal(t, [3]bool{false, true, true}, [3]bool{fs[0].Earlier, fs[1].Earlier, fs[2].Earlier})
	require.Empty(t, r.take())

	r2 := &recorder{inner: inner, store: View(store, "v2"), minNoise: 0.01, now: time.Now}
	_, err = r2.Execute(ctx, j)
	require.NotErrorIs(t, err, ErrFailedBefore, "another version runs again")
	require.Equal(t, 2, inner.runs)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r3 := &recorder{inner: builder.Executor(inner), store: View(records.NewMemStore(), ""), now: time.Now}
	_, _ = r3.Execute(cctx, j)
	require.Empty(t, r3.take(), "a cancelled run is no failure")
}
