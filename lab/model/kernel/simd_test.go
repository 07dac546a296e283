//go:build goexperiment.simd && amd64

package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
	"time"
)

// fmaPeak runs iters rounds of 12 independent 16-lane fused multiply-adds
// (enough chains to cover the FMA latency on both FMA pipes) and returns a
// value depending on all of them.
func fmaPeak(iters int) float32 {
	x := archsimd.BroadcastFloat32x16(0.999)
	y := archsimd.BroadcastFloat32x16(1e-3)
	// Distinct starting values keep the compiler from merging the chains.
	c0, c1, c2 := archsimd.BroadcastFloat32x16(0), archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(2)
	c3, c4, c5 := archsimd.BroadcastFloat32x16(3), archsimd.BroadcastFloat32x16(4), archsimd.BroadcastFloat32x16(5)
	c6, c7, c8 := archsimd.BroadcastFloat32x16(6), archsimd.BroadcastFloat32x16(7), archsimd.BroadcastFloat32x16(8)
	c9, c10, c11 := archsimd.BroadcastFloat32x16(9), archsimd.BroadcastFloat32x16(10), archsimd.BroadcastFloat32x16(11)
	for range iters {
		c0 = x.MulAdd(c0, y)
		c1 = x.MulAdd(c1, y)
		c2 = x.MulAdd(c2, y)
		c3 = x.MulAdd(c3, y)
		c4 = x.MulAdd(c4, y)
		c5 = x.MulAdd(c5, y)
		c6 = x.MulAdd(c6, y)
		c7 = x.MulAdd(c7, y)
		c8 = x.MulAdd(c8, y)
		c9 = x.MulAdd(c9, y)
		c10 = x.MulAdd(c10, y)
		c11 = x.MulAdd(c11, y)
	}
	s := c0.Add(c1).Add(c2).Add(c3).Add(c4).Add(c5).Add(c6).Add(c7).Add(c8).Add(c9).Add(c10).Add(c11)
	var out [16]float32
	s.Store(&out)
	archsimd.ClearAVXUpperBits()
	return out[0]
}

var sink float32

// BenchmarkPeakFMA measures the core's attainable float32 FMA throughput
// (the denominator of the kernel's "fraction of peak").
func BenchmarkPeakFMA(b *testing.B) {
	if !archsimd.X86.AVX512() {
		b.Skip("no AVX-512")
	}
	const iters = 1 << 16
	for b.Loop() {
		sink += fmaPeak(iters)
	}
	flop := float64(iters) * 12 * 16 * 2 * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkFractionOfPeak reports, for each benchmark shape, the best
// (least disturbed) kernel throughput and the same for the FMA-peak loop,
// measured alternately in one loop so that both see the same load on a
// shared machine; %peak is their ratio.
func BenchmarkFractionOfPeak(b *testing.B) {
	if !archsimd.X86.AVX512() {
		b.Skip("no AVX-512")
	}
	for _, s := range benchShapes {
		b.Run(fmt.Sprintf("%s/%dx%dx%d", s.op, s.m, s.k, s.n), func(b *testing.B) {
			kern := New()
			rng := rand.New(rand.NewPCG(1, 2))
			x, y := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
			c := make([]float32, s.m*s.n)
			const peakIters = 1 << 12
			bestK, bestP := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			for b.Loop() {
				t0 := time.Now()
				switch s.op {
				case "nn":
					kern.MulNN(c, x, y, s.m, s.k, s.n, false)
				case "tn":
					kern.MulTN(c, x, y, s.m, s.k, s.n, false)
				case "nt":
					kern.MulNT(c, x, y, s.m, s.k, s.n, false)
				}
				t1 := time.Now()
				sink += fmaPeak(peakIters)
				t2 := time.Now()
				bestK, bestP = min(bestK, t1.Sub(t0)), min(bestP, t2.Sub(t1))
			}
			kg := 2 * float64(s.m*s.k*s.n) / bestK.Seconds() / 1e9
			pg := peakIters * 12 * 16 * 2 / bestP.Seconds() / 1e9
			b.ReportMetric(kg, "best-GFLOP/s")
			b.ReportMetric(pg, "peak-GFLOP/s")
			b.ReportMetric(100*kg/pg, "%peak")
		})
	}
}
