//go:build amd64 && !purego

package kernel

import (
	"github.com/lm2lm/lm2lm/lab/model/kernel/internal/asm"
	"golang.org/x/sys/cpu"
)

// asmImpls returns the assembly backends this CPU can run, fastest first:
// "avx512" needs AVX-512F (with the operating system saving zmm state),
// "avx2" needs AVX2 and FMA. cpu.X86 reports both.
func asmImpls() []impl {
	var out []impl
	if cpu.X86.HasAVX512F {
		out = append(out, asmImpl{avx512Blocks})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		out = append(out, asmImpl{avx2Blocks})
	}
	return out
}

// gemmFunc is one generated register-block kernel (see internal/asm and
// its generator internal/asmgen): C[r×nr] (+)= A·B with byte strides.
type gemmFunc func(c *float32, ldc int, a *float32, sa int, sp int, b *float32, ldb int, k int, acc bool)

// blocks describes one instruction set's kernels: wide[r-1] computes r
// rows by wideCols columns, narrow[r-1] r rows by narrowCols columns.
type blocks struct {
	name                 string
	wideCols, narrowCols int
	wide, narrow         []gemmFunc
	lanes                int // float32s per vector of the element-wise kernels
	addTo, tanh, tanhBwd func(x, y *float32, n int)
	expShift             func(z *float32, n int, shift float32, sums *[8]float64)
	adam                 func(p, g, m, v *float32, n int, a, ivc2, b1, b2, c1, c2, eps float32)
}

// avx512Blocks: up to 8 rows × 32 columns (16 zmm accumulators, the A
// value broadcast from memory inside the FMA).
var avx512Blocks = &blocks{
	name: "avx512", wideCols: 32, narrowCols: 16,
	wide: []gemmFunc{asm.Gemm512R1N32, asm.Gemm512R2N32, asm.Gemm512R3N32, asm.Gemm512R4N32,
		asm.Gemm512R5N32, asm.Gemm512R6N32, asm.Gemm512R7N32, asm.Gemm512R8N32},
	narrow: []gemmFunc{asm.Gemm512R1N16, asm.Gemm512R2N16, asm.Gemm512R3N16, asm.Gemm512R4N16,
		asm.Gemm512R5N16, asm.Gemm512R6N16, asm.Gemm512R7N16, asm.Gemm512R8N16},
	lanes: 16, addTo: asm.AddTo512, tanh: asm.Tanh512, tanhBwd: asm.TanhBwd512,
	expShift: asm.ExpShift512, adam: asm.Adam512,
}

// avx2Blocks: up to 6 rows × 16 columns (12 ymm accumulators, 2 for B and
// one for the broadcast A value: 15 of the 16 registers).
var avx2Blocks = &blocks{
	name: "avx2", wideCols: 16, narrowCols: 8,
	wide: []gemmFunc{asm.Gemm256R1N16, asm.Gemm256R2N16, asm.Gemm256R3N16, asm.Gemm256R4N16,
		asm.Gemm256R5N16, asm.Gemm256R6N16},
	narrow: []gemmFunc{asm.Gemm256R1N8, asm.Gemm256R2N8, asm.Gemm256R3N8, asm.Gemm256R4N8,
		asm.Gemm256R5N8, asm.Gemm256R6N8},
	lanes: 8, addTo: asm.AddTo256, tanh: asm.Tanh256, tanhBwd: asm.TanhBwd256,
	expShift: asm.ExpShift256, adam: asm.Adam256,
}

// asmImpl multiplies with the generated kernels and runs the generated
// element-wise loops, which give the same bits as the scalar ones
// (ExpShift's sum to float64 rounding); tails shorter than a vector use the
// scalar code.
type asmImpl struct{ bl *blocks }

func (x asmImpl) name() string { return x.bl.name }

func (x asmImpl) nn(c, a, b []float32, m, k, n int, acc bool, sc *scratch) {
	x.bl.gemm(c, a, b, m, k, n, k, 1, acc, sc)
}

// tn reads Aᵀ through strides: A(i,p) = a[p·m+i].
func (x asmImpl) tn(c, a, b []float32, m, k, n int, acc bool, sc *scratch) {
	x.bl.gemm(c, a, b, m, k, n, 1, m, acc, sc)
}

func (x asmImpl) nt(c, a, b []float32, m, k, n int, acc bool, sc *scratch) {
	bt := grow(&sc.t, k*n)
	transpose(bt, b, n, k)
	x.bl.gemm(c, a, bt, m, k, n, k, 1, acc, sc)
}

// vec returns the length of the vector part of a loop over n floats.
func (x asmImpl) vec(n int) int { return n &^ (x.bl.lanes - 1) }

func (x asmImpl) addTo(dst, src []float32) {
	if n := x.vec(len(dst)); n > 0 {
		x.bl.addTo(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	addToGo(dst, src)
}

func (x asmImpl) tanh(dst, src []float32) {
	if n := x.vec(len(dst)); n > 0 {
		x.bl.tanh(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	tanhGo(dst, src)
}

func (x asmImpl) tanhBwd(d, a []float32) {
	if n := x.vec(len(d)); n > 0 {
		x.bl.tanhBwd(&d[0], &a[0], n)
		d, a = d[n:], a[n:]
	}
	tanhBwdGo(d, a)
}

func (x asmImpl) expShift(z []float32, shift float32) float64 {
	var sum float64
	if n := x.vec(len(z)); n > 0 {
		var sums [8]float64
		x.bl.expShift(&z[0], n, shift, &sums)
		for _, s := range sums {
			sum += s
		}
		z = z[n:]
	}
	return sum + expShiftGo(z, shift)
}

func (x asmImpl) adam(p, g, m, v []float32, a, ivc2, b1, b2, eps float32) {
	if n := x.vec(len(p)); n > 0 {
		x.bl.adam(&p[0], &g[0], &m[0], &v[0], n, a, ivc2, b1, b2, 1-b1, 1-b2, eps)
		p, g, m, v = p[n:], g[n:], m[n:], v[n:]
	}
	adamGo(p, g, m, v, a, ivc2, b1, b2, eps)
}

// gemm: C[m×n] (+)= A·B[k×n] where A(i,p) = a[i·sa + p·sp]. Shapes were
// checked by the caller and m, k, n ≥ 1. Column panels of wideCols, then
// narrowCols, go through the kernels in place; the last n mod narrowCols
// columns go through zero-padded copies, so no kernel reads or writes
// outside its slice.
func (bl *blocks) gemm(c, a, b []float32, m, k, n, sa, sp int, acc bool, sc *scratch) {
	j := 0
	for ; j+bl.wideCols <= n; j += bl.wideCols {
		bl.panel(bl.wide, c[j:], n, a, m, k, sa, sp, b[j:], n, acc)
	}
	for ; j+bl.narrowCols <= n; j += bl.narrowCols {
		bl.panel(bl.narrow, c[j:], n, a, m, k, sa, sp, b[j:], n, acc)
	}
	if j == n {
		return
	}
	w, nc := n-j, bl.narrowCols
	bt := grow(&sc.tail, k*nc)
	for p := range k {
		row := bt[p*nc : p*nc+nc]
		copy(row, b[p*n+j:p*n+n])
		clear(row[w:])
	}
	ct := grow(&sc.ctail, m*nc)
	if acc {
		for i := range m {
			copy(ct[i*nc:i*nc+w], c[i*n+j:i*n+n])
		}
	}
	bl.panel(bl.narrow, ct, nc, a, m, k, sa, sp, bt, nc, acc)
	for i := range m {
		copy(c[i*n+j:i*n+n], ct[i*nc:i*nc+w])
	}
}

// panel runs the kernels ks down one column panel: C rows ldc floats
// apart, B rows ldb floats apart, len(ks) rows per call.
func (bl *blocks) panel(ks []gemmFunc, c []float32, ldc int, a []float32, m, k, sa, sp int, b []float32, ldb int, acc bool) {
	for i := 0; i < m; i += len(ks) {
		r := min(len(ks), m-i)
		ks[r-1](&c[i*ldc], ldc*4, &a[i*sa], sa*4, sp*4, &b[0], ldb*4, k, acc)
	}
}
