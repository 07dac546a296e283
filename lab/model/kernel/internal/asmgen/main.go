// Command asmgen generates the amd64 assembly kernels of package
// lab/model/kernel/internal/asm (gemm_amd64.s and its Go declarations
// gemm_amd64.go) with avo. Run it through `go generate` in
// lab/model/kernel; the generated files are committed, so building the
// library needs neither this module nor avo. The kernels live in their own
// package because a package using cgo (the openblas backend) cannot hold
// Go assembly.
//
// Every matrix kernel computes one register block of C (+)= A·B: R rows and
// NR columns of C, held in vector registers for the whole k loop. Row r of
// A is read as A(r,p) = a[r·sa + p·sp] (byte strides), which covers A
// (sa = k·4, sp = 4) and Aᵀ (sa = 4, sp = m·4) without copying; each A
// value is broadcast across a vector and multiplied into the row's
// accumulators with fused multiply-adds. B rows (NR floats) are ldb bytes
// apart and C rows ldc bytes apart. The caller guarantees k ≥ 1 and that
// every addressed float lies inside its slice.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

const signature = "func(c *float32, ldc int, a *float32, sa int, sp int, b *float32, ldb int, k int, acc bool)"

func main() {
	ConstraintExpr("amd64,!purego")
	for _, nr := range []int{32, 16} {
		for r := 1; r <= 8; r++ {
			gemm(fmt.Sprintf("Gemm512R%dN%d", r, nr), r, nr/16, 64, ZMM, fma512)
		}
	}
	for _, nr := range []int{16, 8} {
		for r := 1; r <= 6; r++ {
			gemm(fmt.Sprintf("Gemm256R%dN%d", r, nr), r, nr/8, 32, YMM, fma256)
		}
	}
	elementwise(isa512)
	elementwise(isa256)
	peak("FMAPeak512", 64, ZMM)
	peak("FMAPeak256", 32, YMM)
	Generate()
}

// rowAddr returns the addressing of A rows 0..7 from three base pointers
// a0, a3 = a0+3·sa and a5 = a0+5·sa (index scales are 1, 2, 4 or 8 only).
func rowAddr(r int, a0, a3, a5, sa reg.Register) Mem {
	switch r {
	case 0:
		return Mem{Base: a0}
	case 1:
		return Mem{Base: a0, Index: sa, Scale: 1}
	case 2:
		return Mem{Base: a0, Index: sa, Scale: 2}
	case 3:
		return Mem{Base: a3}
	case 4:
		return Mem{Base: a0, Index: sa, Scale: 4}
	case 5:
		return Mem{Base: a5}
	case 6:
		return Mem{Base: a5, Index: sa, Scale: 1}
	default:
		return Mem{Base: a5, Index: sa, Scale: 2}
	}
}

// fma512 multiplies the broadcast A value at m into accumulator acc
// (embedded broadcast, no extra register).
func fma512(m Mem, b, acc reg.VecVirtual, _ func() reg.VecVirtual) {
	VFMADD231PS_BCST(m, b, acc)
}

// fma256 has no embedded broadcast: the A value goes through a register.
func fma256(m Mem, b, acc reg.VecVirtual, tmp func() reg.VecVirtual) {
	x := tmp()
	VFMADD231PS(b, x, acc)
}

func gemm(name string, rows, nv, vbytes int, vec func() reg.VecVirtual,
	fma func(Mem, reg.VecVirtual, reg.VecVirtual, func() reg.VecVirtual)) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s: C[%d×%d] (+)= A·B, see the package comment of asmgen.", name, rows, nv*vbytes/4))
	c := Load(Param("c"), GP64())
	ldc := Load(Param("ldc"), GP64())
	a0 := Load(Param("a"), GP64())
	sa := Load(Param("sa"), GP64())
	sp := Load(Param("sp"), GP64())
	b := Load(Param("b"), GP64())
	ldb := Load(Param("ldb"), GP64())
	k := Load(Param("k"), GP64())
	accFlag := Load(Param("acc"), GP8())

	acc := make([][]reg.VecVirtual, rows)
	for r := range acc {
		acc[r] = make([]reg.VecVirtual, nv)
		for v := range acc[r] {
			acc[r][v] = vec()
		}
	}
	Comment("Start from C (acc) or from zero.")
	TESTB(accFlag, accFlag)
	JZ(LabelRef("zero"))
	cr := GP64()
	MOVQ(c, cr)
	for r := range acc {
		for v := range acc[r] {
			VMOVUPS(Mem{Base: cr, Disp: v * vbytes}, acc[r][v])
		}
		if r+1 < rows {
			ADDQ(ldc, cr)
		}
	}
	JMP(LabelRef("ready"))
	Label("zero")
	for r := range acc {
		for v := range acc[r] {
			zero(vbytes, acc[r][v])
		}
	}
	Label("ready")
	var a3, a5 reg.GPVirtual
	if rows > 3 {
		a3 = GP64()
		LEAQ(Mem{Base: a0, Index: sa, Scale: 2}, a3)
		ADDQ(sa, a3)
	}
	if rows > 5 {
		a5 = GP64()
		LEAQ(Mem{Base: a3, Index: sa, Scale: 2}, a5)
	}

	Comment("One k step: load a row of B, multiply-add each broadcast A value.")
	Label("loop")
	bv := make([]reg.VecVirtual, nv)
	for v := range bv {
		bv[v] = vec()
		VMOVUPS(Mem{Base: b, Disp: v * vbytes}, bv[v])
	}
	for r := range acc {
		m := rowAddr(r, a0, a3, a5, sa)
		var x reg.VecVirtual
		tmp := func() reg.VecVirtual {
			if x == nil {
				x = vec()
				VBROADCASTSS(m, x)
			}
			return x
		}
		for v := range acc[r] {
			fma(m, bv[v], acc[r][v], tmp)
		}
	}
	ADDQ(sp, a0)
	if rows > 3 {
		ADDQ(sp, a3)
	}
	if rows > 5 {
		ADDQ(sp, a5)
	}
	ADDQ(ldb, b)
	DECQ(k)
	JNZ(LabelRef("loop"))

	Comment("Store the block.")
	for r := range acc {
		for v := range acc[r] {
			VMOVUPS(acc[r][v], Mem{Base: c, Disp: v * vbytes})
		}
		if r+1 < rows {
			ADDQ(ldc, c)
		}
	}
	VZEROUPPER()
	RET()
}

// peak runs iters rounds of 12 independent vector fused multiply-adds, the
// core's attainable FMA throughput for that vector width.
func peak(name string, vbytes int, vec func() reg.VecVirtual) {
	TEXT(name, NOSPLIT, "func(iters int)")
	Doc(name + " runs iters rounds of 12 independent vector fused multiply-adds (the FMA peak).")
	n := Load(Param("iters"), GP64())
	x, y := vec(), vec()
	zero(vbytes, x)
	zero(vbytes, y)
	acc := make([]reg.VecVirtual, 12)
	for i := range acc {
		acc[i] = vec()
		zero(vbytes, acc[i])
	}
	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	for i := range acc {
		VFMADD231PS(x, y, acc[i])
	}
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// zero clears a vector register: VPXORD for zmm (AVX512F; VXORPS on zmm
// would need AVX512DQ), VXORPS for ymm.
func zero(vbytes int, x reg.VecVirtual) {
	if vbytes == 64 {
		VPXORD(x, x, x)
	} else {
		VXORPS(x, x, x)
	}
}
