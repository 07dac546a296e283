package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// peakLoop is a loop of independent fused multiply-adds whose throughput
// is the core's attainable FMA peak for one vector width.
type peakLoop struct {
	name  string
	run   func(iters int) // 12 FMAs per iteration
	lanes int
}

func (p peakLoop) flop(iters int) float64 { return float64(iters) * 12 * float64(p.lanes) * 2 }

// BenchmarkPeakFMA measures the core's float32 FMA throughput per vector
// width (the denominator of BenchmarkFractionOfPeak's %peak).
func BenchmarkPeakFMA(b *testing.B) {
	loops := peakLoops()
	if len(loops) == 0 {
		b.Skip("no FMA-peak loop in this build")
	}
	for _, p := range loops {
		b.Run(p.name, func(b *testing.B) {
			const iters = 1 << 16
			for b.Loop() {
				p.run(iters)
			}
			b.ReportMetric(p.flop(iters)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkFractionOfPeak reports, for each backend and benchmark shape,
// the best (least disturbed) kernel throughput and the same for each
// FMA-peak loop, measured alternately in one loop so that all see the same
// load on a shared machine. %peak is the ratio to the widest loop's peak
// (the core's); with AVX-512 present, %ymm-peak is the ratio to the 256-bit
// peak, the ceiling of the avx2 backend.
func BenchmarkFractionOfPeak(b *testing.B) {
	loops := peakLoops()
	if len(loops) == 0 {
		b.Skip("no FMA-peak loop in this build")
	}
	for _, kern := range allKernels(b) {
		for _, s := range benchShapes {
			b.Run(fmt.Sprintf("%s/%s/%dx%dx%d", kern.Name(), s.op, s.m, s.k, s.n), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
				c := make([]float32, s.m*s.n)
				const peakIters = 1 << 12
				bestK := time.Duration(math.MaxInt64)
				bestP := make([]time.Duration, len(loops))
				for i := range bestP {
					bestP[i] = math.MaxInt64
				}
				for b.Loop() {
					t0 := time.Now()
					mulShape(kern, s.op, c, x, y, s.m, s.k, s.n)
					bestK = min(bestK, time.Since(t0))
					for i, p := range loops {
						t1 := time.Now()
						p.run(peakIters)
						bestP[i] = min(bestP[i], time.Since(t1))
					}
				}
				kg := 2 * float64(s.m*s.k*s.n) / bestK.Seconds() / 1e9
				b.ReportMetric(kg, "best-GFLOP/s")
				for i, p := range loops {
					pg := p.flop(peakIters) / bestP[i].Seconds() / 1e9
					if i == 0 {
						b.ReportMetric(pg, p.name+"-peak-GFLOP/s")
						b.ReportMetric(100*kg/pg, "%peak")
					} else {
						b.ReportMetric(100*kg/pg, "%"+p.name+"-peak")
					}
				}
			})
		}
	}
}

func mulShape(kern *Kernel, op string, c, x, y []float32, m, k, n int) {
	switch op {
	case "nn":
		kern.MulNN(c, x, y, m, k, n, false)
	case "tn":
		kern.MulTN(c, x, y, m, k, n, false)
	case "nt":
		kern.MulNT(c, x, y, m, k, n, false)
	}
}
