package model

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// opticks loads the Opticks text that ships with Go, folds bytes simply
// (printable ASCII 32..126 → 1..95, everything else → 0: 96 symbols) and
// splits it 90/10 by interleaved blocks of 1000 symbols.
func opticks(tb testing.TB) Data {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "testdata", "Isaac.Newton-Opticks.txt"))
	if err != nil {
		tb.Skipf("Opticks text not found: %v", err)
	}
	var d Data
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

// BenchmarkReferenceRun reports seconds per reference run (DefaultConfig,
// 1000 steps, 4096 evaluation windows) for each objective with this
// build's kernel backend.
func BenchmarkReferenceRun(b *testing.B) {
	d := opticks(b)
	for _, obj := range []Objective{Autoregressive, CentreMasked, MaskedDiffusion} {
		b.Run(string(obj), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Objective = obj
			var r Result
			cpu0 := cpuSeconds()
			for b.Loop() {
				var err error
				r, err = Train(context.Background(), cfg, d, 1)
				require.NoError(b, err)
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
			b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/run")
			b.ReportMetric(r.Loss, "loss")
			b.ReportMetric(r.FLOPs/1e9/(b.Elapsed().Seconds()/float64(b.N)), "GFLOP/s")
		})
	}
}

// cpuSeconds is the process's user+system CPU time: on a shared machine it
// is a steadier measure of a run's cost than wall time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
