package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The element-wise kernels do the same float32 operations in the same
// order as package kernel's scalar loops (no fused multiply-adds), so they
// give the same bits; ExpShift's sum is the exception (float64 lanes
// instead of one float64 running sum). Each processes n floats, n a
// multiple of the vector's lanes; the Go side does the tail.

// isa is one vector width: 64 bytes (zmm, AVX-512F: compares into mask
// registers) or 32 bytes (ymm, AVX2: compares into vector masks).
type isa struct {
	suffix string
	vbytes int
	vec    func() reg.VecVirtual
}

var (
	isa512 = isa{"512", 64, ZMM}
	isa256 = isa{"256", 32, YMM}
)

func (s isa) lanes() int { return s.vbytes / 4 }

// Comparison predicates (ordered, quiet: false for NaN).
const (
	cmpLT    = 0x11
	cmpGE    = 0x1d
	cmpGT    = 0x1e
	cmpUnord = 0x03
	floorImm = 0x09 // round down, inexact suppressed
)

// cmp returns the mask of a <pred> b.
func (s isa) cmp(pred int, b Op, a reg.VecVirtual) reg.Register {
	if s.vbytes == 64 {
		k := K()
		VCMPPS(U8(pred), b, a, k)
		return k
	}
	m := s.vec()
	VCMPPS(U8(pred), b, a, m)
	return m
}

func (s isa) and(m1, m2 reg.Register) reg.Register {
	if s.vbytes == 64 {
		k := K()
		KANDW(m1, m2, k)
		return k
	}
	VANDPS(m1, m2, m1)
	return m1
}

// blend returns mask ? t : f lane by lane.
func (s isa) blend(mask reg.Register, t, f reg.VecVirtual) reg.VecVirtual {
	d := s.vec()
	if s.vbytes == 64 {
		VBLENDMPS(t, f, mask, d)
	} else {
		VBLENDVPS(mask, t, f, d)
	}
	return d
}

func (s isa) floor(x reg.VecVirtual) reg.VecVirtual {
	d := s.vec()
	if s.vbytes == 64 {
		VRNDSCALEPS(U8(floorImm), x, d)
	} else {
		VROUNDPS(U8(floorImm), x, d)
	}
	return d
}

// consts lays out vectors of the given float32 constants (each repeated
// across the lanes) in read-only data; c(i) addresses the i-th.
func (s isa) consts(name string, vals []float32) func(i int) Mem {
	m := GLOBL(name+s.suffix, RODATA|NOPTR)
	for i, v := range vals {
		for l := 0; l < s.lanes(); l++ {
			DATA(i*s.vbytes+4*l, U32(math.Float32bits(v)))
		}
	}
	return func(i int) Mem { return m.Offset(i * s.vbytes) }
}

// bcast loads the float32 parameter name into every lane.
func (s isa) bcast(name string) reg.VecVirtual {
	x := XMM()
	Load(Param(name), x)
	v := s.vec()
	VBROADCASTSS(x, v)
	return v
}

func (s isa) mul(a Op, b reg.VecVirtual) reg.VecVirtual { d := s.vec(); VMULPS(a, b, d); return d }
func (s isa) add(a Op, b reg.VecVirtual) reg.VecVirtual { d := s.vec(); VADDPS(a, b, d); return d }

// sub returns a − b.
func (s isa) sub(a reg.VecVirtual, b Op) reg.VecVirtual { d := s.vec(); VSUBPS(b, a, d); return d }

// div returns a / b.
func (s isa) div(a reg.VecVirtual, b Op) reg.VecVirtual { d := s.vec(); VDIVPS(b, a, d); return d }

// loop emits the loop over n floats (a multiple of the lanes); body gets
// the byte offset of the current vector. after runs once at the end.
func (s isa) loop(n reg.Register, body func(i reg.GPVirtual), after ...func()) {
	i := GP64()
	XORQ(i, i)
	SHLQ(U8(2), n) // bytes
	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	body(i)
	ADDQ(U32(s.vbytes), i)
	CMPQ(i, n)
	JB(LabelRef("loop"))
	Label("done")
	for _, f := range after {
		f()
	}
	VZEROUPPER()
	RET()
}

func at(p reg.Register, i reg.GPVirtual) Mem { return Mem{Base: p, Index: i, Scale: 1} }

func elementwise(s isa) {
	addTo(s)
	tanhBwd(s)
	tanh(s)
	expShift(s)
	adam(s)
}

func addTo(s isa) {
	TEXT("AddTo"+s.suffix, NOSPLIT, "func(dst, src *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("AddTo%s sets dst[i] += src[i] for i < n, n a multiple of %d.", s.suffix, s.lanes()))
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	s.loop(n, func(i reg.GPVirtual) {
		x := s.vec()
		VMOVUPS(at(dst, i), x)
		VMOVUPS(s.add(at(src, i), x), at(dst, i))
	})
}

func tanhBwd(s isa) {
	TEXT("TanhBwd"+s.suffix, NOSPLIT, "func(d, a *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("TanhBwd%s sets d[i] *= 1 − a[i]² for i < n, n a multiple of %d.", s.suffix, s.lanes()))
	d, a, n := Load(Param("d"), GP64()), Load(Param("a"), GP64()), Load(Param("n"), GP64())
	c := s.consts("tanhBwdOne", []float32{1})
	one := s.vec()
	VMOVUPS(c(0), one)
	s.loop(n, func(i reg.GPVirtual) {
		av := s.vec()
		VMOVUPS(at(a, i), av)
		t := s.sub(one, s.mul(av, av))
		VMOVUPS(s.mul(at(d, i), t), at(d, i))
	})
}

func tanh(s isa) {
	TEXT("Tanh"+s.suffix, NOSPLIT, "func(dst, src *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("Tanh%s sets dst[i] = Tanh32(src[i]) for i < n, n a multiple of %d.", s.suffix, s.lanes()))
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	const (
		clampHi = iota
		clampLo
		smallHi
		smallLo
		a13
		a11
		a9
		a7
		a5
		a3
		a1
		b6
		b4
		b2
		b0
	)
	c := s.consts("tanhC", []float32{
		7.90531110763549805, -7.90531110763549805, 0.0004, -0.0004,
		-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
		1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03,
		1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03,
	})
	s.loop(n, func(i reg.GPVirtual) {
		x0 := s.vec()
		VMOVUPS(at(src, i), x0)
		x := s.vec()
		VMAXPS(c(clampLo), x0, x)
		VMINPS(c(clampHi), x, x)
		x2 := s.mul(x, x)
		p := s.add(c(a11), s.mul(c(a13), x2))
		for _, k := range []int{a9, a7, a5, a3, a1} {
			p = s.add(c(k), s.mul(p, x2))
		}
		p = s.mul(p, x)
		q := s.add(c(b4), s.mul(c(b6), x2))
		for _, k := range []int{b2, b0} {
			q = s.add(c(k), s.mul(q, x2))
		}
		r := s.div(p, q)
		small := s.and(s.cmp(cmpGT, c(smallLo), x), s.cmp(cmpLT, c(smallHi), x))
		r = s.blend(small, x, r)
		r = s.blend(s.cmp(cmpUnord, x0, x0), x0, r)
		VMOVUPS(r, at(dst, i))
	})
}

func expShift(s isa) {
	TEXT("ExpShift"+s.suffix, NOSPLIT, "func(z *float32, n int, shift float32, sums *[8]float64)")
	Pragma("noescape")
	Doc(fmt.Sprintf("ExpShift%s sets z[i] = Exp32(z[i] − shift) for i < n, n a multiple of %d, and stores\n"+
		"// the results' sums by lane (mod 8) in float64 into sums.", s.suffix, s.lanes()))
	z, n := Load(Param("z"), GP64()), Load(Param("n"), GP64())
	sums := Load(Param("sums"), GP64())
	sh := s.bcast("shift")
	const (
		log2e = iota
		half
		c1
		c2
		p0
		p1
		p2
		p3
		p4
		p5
		one
		lo
		bias
	)
	c := s.consts("expC", []float32{
		1.44269504088896341, 0.5, 0.693359375, -2.12194440e-4,
		1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
		1.6666665459e-1, 5.0000001201e-1, 1, -87.3, math.Float32frombits(127),
	})
	// Two float64 accumulators of half a vector each (ymm for AVX-512,
	// xmm pairs widened to ymm for AVX2), 8 lanes in all.
	accLo, accHi := YMM(), YMM()
	var accZ reg.VecVirtual
	if s.vbytes == 64 {
		accZ = ZMM()
		VPXORD(accZ, accZ, accZ)
	} else {
		VXORPD(accLo, accLo, accLo)
		VXORPD(accHi, accHi, accHi)
	}
	s.loop(n, func(i reg.GPVirtual) {
		x := s.vec()
		VMOVUPS(at(z, i), x)
		x = s.sub(x, sh)
		nf := s.floor(s.add(c(half), s.mul(c(log2e), x)))
		r := s.sub(s.sub(x, s.mul(c(c1), nf)), s.mul(c(c2), nf))
		p := s.add(c(p1), s.mul(c(p0), r))
		for _, k := range []int{p2, p3, p4, p5} {
			p = s.add(c(k), s.mul(p, r))
		}
		p = s.add(c(one), s.add(r, s.mul(r, s.mul(p, r))))
		sc := s.vec()
		VCVTTPS2DQ(nf, sc)
		VPADDD(c(bias), sc, sc)
		VPSLLD(U8(23), sc, sc)
		e := s.mul(sc, p)
		zero := s.vec()
		if s.vbytes == 64 {
			VPXORD(zero, zero, zero)
		} else {
			VXORPS(zero, zero, zero)
		}
		e = s.blend(s.cmp(cmpGE, c(lo), x), e, zero)
		e = s.blend(s.cmp(cmpUnord, x, x), x, e)
		VMOVUPS(e, at(z, i))
		if s.vbytes == 64 {
			lo8, hi8 := ZMM(), ZMM()
			VCVTPS2PD(e.AsY(), lo8)
			VADDPD(lo8, accZ, accZ)
			h := YMM()
			VEXTRACTF64X4(U8(1), e, h)
			VCVTPS2PD(h, hi8)
			VADDPD(hi8, accZ, accZ)
		} else {
			lo4, hi4 := YMM(), YMM()
			VCVTPS2PD(e.AsX(), lo4)
			VADDPD(lo4, accLo, accLo)
			h := XMM()
			VEXTRACTF128(U8(1), e, h)
			VCVTPS2PD(h, hi4)
			VADDPD(hi4, accHi, accHi)
		}
	}, func() {
		if s.vbytes == 64 {
			VMOVUPD(accZ, Mem{Base: sums})
		} else {
			VMOVUPD(accLo, Mem{Base: sums})
			VMOVUPD(accHi, Mem{Base: sums, Disp: 32})
		}
	})
}

func adam(s isa) {
	TEXT("Adam"+s.suffix, NOSPLIT, "func(p, grad, m, v *float32, n int, a, ivc2, b1, b2, c1, c2, eps float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("Adam%s applies Adam's update to p[i], m[i], v[i] for i < n, n a multiple of %d\n"+
		"// (c1 = 1−b1 and c2 = 1−b2 as the scalar code rounds them).", s.suffix, s.lanes()))
	p, g := Load(Param("p"), GP64()), Load(Param("grad"), GP64())
	m, v := Load(Param("m"), GP64()), Load(Param("v"), GP64())
	n := Load(Param("n"), GP64())
	va, vi, vb1, vb2 := s.bcast("a"), s.bcast("ivc2"), s.bcast("b1"), s.bcast("b2")
	vc1, vc2, ve := s.bcast("c1"), s.bcast("c2"), s.bcast("eps")
	s.loop(n, func(i reg.GPVirtual) {
		gi := s.vec()
		VMOVUPS(at(g, i), gi)
		mi := s.add(s.mul(vc1, gi), s.mul(at(m, i), vb1))
		vv := s.add(s.mul(gi, s.mul(vc2, gi)), s.mul(at(v, i), vb2))
		VMOVUPS(mi, at(m, i))
		VMOVUPS(vv, at(v, i))
		sq := s.vec()
		VSQRTPS(s.mul(vi, vv), sq)
		step := s.div(s.mul(mi, va), s.add(ve, sq))
		pv := s.vec()
		VMOVUPS(at(p, i), pv)
		VMOVUPS(s.sub(pv, step), at(p, i))
	})
}
