package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// naive is the obvious triple loop in float64, the reference for every
// backend. The operands are first copied into row-major float64 A (m×k)
// and B (k×n).
func naive(op string, c, a, b []float32, m, k, n int, acc bool) []float64 {
	af, bf := make([]float64, m*k), make([]float64, k*n)
	for i := range m {
		for p := range k {
			if op == "tn" {
				af[i*k+p] = float64(a[p*m+i])
			} else {
				af[i*k+p] = float64(a[i*k+p])
			}
		}
	}
	for p := range k {
		for j := range n {
			if op == "nt" {
				bf[p*n+j] = float64(b[j*k+p])
			} else {
				bf[p*n+j] = float64(b[p*n+j])
			}
		}
	}
	out := make([]float64, m*n)
	for i := range m {
		row := out[i*n : i*n+n]
		for p := range k {
			x := af[i*k+p]
			for j, y := range bf[p*n : p*n+n] {
				row[j] += x * y
			}
		}
		if acc {
			for j := range row {
				row[j] += float64(c[i*n+j])
			}
		}
	}
	return out
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func checkShape(t require.TestingT, kern *Kernel, op string, m, k, n int, acc bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	a, b := randSlice(rng, m*k), randSlice(rng, k*n)
	c := randSlice(rng, m*n)
	want := naive(op, c, a, b, m, k, n, acc)
	switch op {
	case "nn":
		kern.MulNN(c, a, b, m, k, n, acc)
	case "tn":
		kern.MulTN(c, a, b, m, k, n, acc)
	case "nt":
		kern.MulNT(c, a, b, m, k, n, acc)
	}
	for i := range want {
		// float32 accumulation of k products of N(0,1) entries.
		tol := 1e-5 * (math.Sqrt(float64(k)) + math.Abs(want[i])) * 4
		if d := math.Abs(want[i] - float64(c[i])); !(d <= tol) {
			require.InDelta(t, want[i], float64(c[i]), tol, "%s %s m=%d k=%d n=%d acc=%v at %d", kern.Name(), op, m, k, n, acc, i)
		}
	}
}

func TestKernelsMatchNaive(t *testing.T) {
	shapes := [][3]int{
		{64, 128, 128}, {64, 128, 96}, {64, 96, 128}, {128, 64, 128}, {128, 64, 96}, {256, 128, 768},
		{1, 1, 1}, {3, 5, 7}, {5, 17, 33}, {7, 3, 47}, {9, 31, 16}, {4, 4, 100},
	}
	for _, kern := range allKernels(t) {
		for _, op := range []string{"nn", "tn", "nt"} {
			for si, s := range shapes {
				for _, acc := range []bool{false, true} {
					if testing.Short() && s[0]*s[1]*s[2] > 1<<21 {
						continue // the float64 reference is slow under -race
					}
					t.Run(fmt.Sprintf("%s/%s/%dx%dx%d/%v", kern.Name(), op, s[0], s[1], s[2], acc), func(t *testing.T) {
						checkShape(t, kern, op, s[0], s[1], s[2], acc, uint64(si))
					})
				}
			}
		}
	}
}

// allKernels returns one Kernel per backend of this build and CPU.
func allKernels(t testing.TB) []*Kernel {
	var ks []*Kernel
	for _, name := range Available() {
		k, err := Named(name)
		require.NoError(t, err)
		ks = append(ks, k)
	}
	return ks
}

func TestKernelsProperty(t *testing.T) {
	// Random shapes against the float64 reference, for every backend: row
	// counts that are not multiples of the register block (8 or 6 rows),
	// columns that leave wide, narrow and padded tail panels (up to 70 =
	// 2·32 + 6), k from 1.
	for _, kern := range allKernels(t) {
		t.Run(kern.Name(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				m := rapid.IntRange(1, 40).Draw(t, "m")
				k := rapid.IntRange(1, 40).Draw(t, "k")
				n := rapid.IntRange(1, 70).Draw(t, "n")
				op := rapid.SampledFrom([]string{"nn", "tn", "nt"}).Draw(t, "op")
				acc := rapid.Bool().Draw(t, "acc")
				checkShape(t, kern, op, m, k, n, acc, uint64(m*k*n))
			})
		})
	}
}

func TestFLOPsCounted(t *testing.T) {
	kern := Generic()
	a, b, c := make([]float32, 6), make([]float32, 12), make([]float32, 8)
	kern.MulNN(c, a, b, 2, 3, 4, false)
	kern.MulNT(c, a, b, 2, 3, 4, true)
	require.Equal(t, 2*2*(2.0*3*4), kern.FLOPs())
}

func TestShortSlicePanics(t *testing.T) {
	require.PanicsWithValue(t, "kernel: MulNN: shape 2×3·3×4 with len(a)=5 len(b)=12 len(c)=8", func() {
		Generic().MulNN(make([]float32, 8), make([]float32, 5), make([]float32, 12), 2, 3, 4, false)
	})
}

// Benchmark shapes are the default model's multiplies (batch 64, context·
// embed 128, hidden 128, vocab 96; 768 = 8·96 for masked diffusion).
var benchShapes = []struct {
	op      string
	m, k, n int
}{
	{"nn", 64, 128, 128}, {"nn", 64, 128, 96}, {"nn", 64, 128, 768}, {"nn", 256, 128, 128},
	{"tn", 128, 64, 128}, {"tn", 128, 64, 96}, {"nt", 64, 128, 128}, {"nt", 64, 96, 128},
}

func BenchmarkKernel(b *testing.B) {
	for _, kern := range allKernels(b) {
		for _, s := range benchShapes {
			b.Run(fmt.Sprintf("%s/%s/%dx%dx%d", kern.Name(), s.op, s.m, s.k, s.n), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
				c := make([]float32, s.m*s.n)
				best := time.Duration(math.MaxInt64)
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
					best = min(best, time.Since(t0))
				}
				// best: the least disturbed call, a steadier figure than the
				// mean on a shared machine.
				b.ReportMetric(2*float64(s.m*s.k*s.n)/best.Seconds()/1e9, "best-GFLOP/s")
				flop := 2 * float64(s.m*s.k*s.n) * float64(b.N)
				b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func BenchmarkTranspose(b *testing.B) {
	src, dst := make([]float32, 128*128), make([]float32, 128*128)
	for b.Loop() {
		transpose(dst, src, 128, 128)
	}
}

func TestTranspose(t *testing.T) {
	for _, s := range [][2]int{{1, 1}, {3, 5}, {17, 9}, {128, 96}, {33, 70}} {
		r, c := s[0], s[1]
		src, dst := make([]float32, r*c), make([]float32, r*c)
		for i := range src {
			src[i] = float32(i)
		}
		transpose(dst, src, r, c)
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				require.Equal(t, src[i*c+j], dst[j*r+i])
			}
		}
	}
}

func TestAvailable(t *testing.T) {
	names := Available()
	t.Logf("available backends: %v", names)
	require.Equal(t, "go", names[len(names)-1])
	require.Equal(t, names[0], Default())
	for _, name := range names {
		k, err := Named(name)
		require.NoError(t, err)
		require.Equal(t, name, k.Name())
	}
	_, err := Named("vax")
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, Use("vax"), ErrUnavailable)
	require.Equal(t, names[0], Default())
	t.Cleanup(func() { _ = Use("") })
	require.NoError(t, Use("go"))
	require.Equal(t, "go", Default())
	require.Equal(t, "go", New().Name())
	require.NoError(t, Use(""))
	require.Equal(t, names[0], New().Name())
}
