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
// the best (least disturbed) kernel throughput and the same for the
// widest FMA-peak loop, measured alternately in one loop so that both see
// the same load on a shared machine; %peak is their ratio.
func BenchmarkFractionOfPeak(b *testing.B) {
	loops := peakLoops()
	if len(loops) == 0 {
		b.Skip("no FMA-peak loop in this build")
	}
	peak := loops[0]
	for _, kern := range allKernels(b) {
		for _, s := range benchShapes {
			b.Run(fmt.Sprintf("%s/%s/%dx%dx%d", kern.Name(), s.op, s.m, s.k, s.n), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
				c := make([]float32, s.m*s.n)
				const peakIters = 1 << 12
				bestK, bestP := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
				for b.Loop() {
					t0 := time.Now()
					mulShape(kern, s.op, c, x, y, s.m, s.k, s.n)
					t1 := time.Now()
					peak.run(peakIters)
					t2 := time.Now()
					bestK, bestP = min(bestK, t1.Sub(t0)), min(bestP, t2.Sub(t1))
				}
				kg := 2 * float64(s.m*s.k*s.n) / bestK.Seconds() / 1e9
				pg := peak.flop(peakIters) / bestP.Seconds() / 1e9
				b.ReportMetric(kg, "best-GFLOP/s")
				b.ReportMetric(pg, peak.name+"-peak-GFLOP/s")
				b.ReportMetric(100*kg/pg, "%peak")
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
