package kernel_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/lab/model/kernel"
	"github.com/lm2lm/lm2lm/records"
	"github.com/stretchr/testify/require"
)

// opticks folds the Opticks text that ships with Go the way lab/model's
// tests do (printable ASCII → 1..95, the rest → 0) and splits it 90/10 by
// interleaved blocks of 1000 symbols.
func opticks(tb testing.TB) model.Data {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "testdata", "Isaac.Newton-Opticks.txt"))
	if err != nil {
		tb.Skipf("Opticks text not found: %v", err)
	}
	var d model.Data
	for i := 0; i < len(b); i += 1000 {
		blk := b[i:min(i+1000, len(b))]
		f := make([]byte, len(blk))
		for j, c := range blk {
			if c >= 32 && c < 127 {
				f[j] = c - 31
			}
		}
		if (i/1000)%10 == 9 {
			d.Val = append(d.Val, f...)
		} else {
			d.Train = append(d.Train, f...)
		}
	}
	return d
}

// TestReferenceLossesAgree: on the reference configuration of each
// objective (model.DefaultConfig), every backend of this build and CPU
// reaches the pure-Go loss to 1e-4 relative, the tolerance the lab uses,
// with the same FLOP count.
func TestReferenceLossesAgree(t *testing.T) {
	names := kernel.Available()
	if len(names) == 1 {
		t.Skip("this build has only the portable backend")
	}
	t.Cleanup(func() { _ = kernel.Use("") })
	d := opticks(t)
	for _, obj := range []model.Objective{model.Autoregressive, model.CentreMasked, model.MaskedDiffusion} {
		cfg := model.DefaultConfig()
		cfg.Objective = obj
		if testing.Short() {
			cfg.Steps, cfg.EvalWindows = 100, 512
		}
		require.NoError(t, kernel.Use("go"))
		ref, err := model.Train(context.Background(), cfg, d, 5)
		require.NoError(t, err)
		for _, name := range names[:len(names)-1] {
			t.Run(string(obj)+"/"+name, func(t *testing.T) {
				require.NoError(t, kernel.Use(name))
				got, err := model.Train(context.Background(), cfg, d, 5)
				require.NoError(t, err)
				t.Logf("%s: go %.6f, %s %.6f", obj, ref.Loss, name, got.Loss)
				require.InDelta(t, 0, (got.Loss-ref.Loss)/ref.Loss, 1e-4)
				require.Equal(t, ref.FLOPs, got.FLOPs)
			})
		}
	}
}

// BenchmarkLabRun times one executed proposal ("lr-scale factor=2", a
// full training run and evaluation) on the lab's base-300 AR task with
// every backend of this build, side by side: each iteration runs the same
// seed once per backend, so all see the same machine load. It reports each
// backend's thread CPU seconds per run (mean and least) and the speedup of
// the least over "go" (go-best / backend-best).
func BenchmarkLabRun(b *testing.B) {
	const id = "ar-prose/opticks/base-300"
	b.Cleanup(func() { _ = kernel.Use("") })
	ctx := context.Background()
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(b, err)
	task, err := l.Task(ctx, id)
	require.NoError(b, err)
	j, err := l.Build(ctx, task, records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}})
	require.NoError(b, err)
	names := kernel.Available()
	sum, best := make([]float64, len(names)), make([]float64, len(names))
	for i := range best {
		best[i] = math.Inf(1)
	}
	for i := 0; b.Loop(); i++ {
		j.Seed = uint64(i) + 1
		for ni, name := range names {
			require.NoError(b, kernel.Use(name))
			out, err := l.Execute(ctx, j)
			require.NoError(b, err)
			sum[ni] += out.Cost.DeviceSeconds
			best[ni] = min(best[ni], out.Cost.DeviceSeconds)
		}
	}
	goBest := best[len(best)-1] // "go" is last
	for ni, name := range names {
		b.ReportMetric(sum[ni]/float64(b.N), name+"-cpu-s/run")
		b.ReportMetric(best[ni], name+"-best-cpu-s")
		if ni < len(names)-1 {
			b.ReportMetric(goBest/best[ni], "speedup-"+name)
		}
	}
}
