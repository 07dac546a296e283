//go:build goexperiment.simd && amd64

package kernel

import "simd/archsimd"

// The element-wise kernels below do the same float32 operations in the same
// order as their scalar versions (no fused multiply-adds), so they give
// bit-identical results; ExpShift's sum is the one exception (float32 lanes
// instead of a float64 running sum). Tails shorter than 16 use the scalar
// code.

func (simdImpl) tanh(dst, src []float32) {
	n := len(dst) &^ 15
	clampHi, clampLo := archsimd.BroadcastFloat32x16(7.90531110763549805), archsimd.BroadcastFloat32x16(-7.90531110763549805)
	smallHi, smallLo := archsimd.BroadcastFloat32x16(0.0004), archsimd.BroadcastFloat32x16(-0.0004)
	a13, a11 := archsimd.BroadcastFloat32x16(-2.76076847742355e-16), archsimd.BroadcastFloat32x16(2.00018790482477e-13)
	a9, a7 := archsimd.BroadcastFloat32x16(-8.60467152213735e-11), archsimd.BroadcastFloat32x16(5.12229709037114e-08)
	a5, a3 := archsimd.BroadcastFloat32x16(1.48572235717979e-05), archsimd.BroadcastFloat32x16(6.37261928875436e-04)
	a1 := archsimd.BroadcastFloat32x16(4.89352455891786e-03)
	b6, b4 := archsimd.BroadcastFloat32x16(1.19825839466702e-06), archsimd.BroadcastFloat32x16(1.18534705686654e-04)
	b2, b0 := archsimd.BroadcastFloat32x16(2.26843463243900e-03), archsimd.BroadcastFloat32x16(4.89352518554385e-03)
	for i := 0; i < n; i += 16 {
		x0 := archsimd.LoadFloat32x16(at16(src, i))
		x := x0.Max(clampLo).Min(clampHi)
		x2 := x.Mul(x)
		p := x2.Mul(a13).Add(a11)
		p = x2.Mul(p).Add(a9)
		p = x2.Mul(p).Add(a7)
		p = x2.Mul(p).Add(a5)
		p = x2.Mul(p).Add(a3)
		p = x2.Mul(p).Add(a1)
		p = x.Mul(p)
		q := x2.Mul(b6).Add(b4)
		q = x2.Mul(q).Add(b2)
		q = x2.Mul(q).Add(b0)
		r := p.Div(q)
		small := x.Greater(smallLo).And(x.Less(smallHi))
		r = x.Merge(r, small)       // x where |x| < 0.0004
		r = x0.Merge(r, x0.IsNaN()) // NaN stays NaN
		r.Store(at16(dst, i))
	}
	archsimd.ClearAVXUpperBits()
	tanhGo(dst[n:], src[n:len(dst)])
}

func (simdImpl) addTo(dst, src []float32) {
	n := len(dst) &^ 15
	for i := 0; i < n; i += 16 {
		archsimd.LoadFloat32x16(at16(dst, i)).Add(archsimd.LoadFloat32x16(at16(src, i))).Store(at16(dst, i))
	}
	archsimd.ClearAVXUpperBits()
	addToGo(dst[n:], src[n:len(dst)])
}

func (simdImpl) tanhBwd(d, a []float32) {
	n := len(d) &^ 15
	one := archsimd.BroadcastFloat32x16(1)
	for i := 0; i < n; i += 16 {
		av := archsimd.LoadFloat32x16(at16(a, i))
		dv := archsimd.LoadFloat32x16(at16(d, i))
		dv.Mul(one.Sub(av.Mul(av))).Store(at16(d, i))
	}
	archsimd.ClearAVXUpperBits()
	tanhBwdGo(d[n:], a[n:len(d)])
}

func (simdImpl) expShift(z []float32, shift float32) float64 {
	n := len(z) &^ 15
	sh := archsimd.BroadcastFloat32x16(shift)
	log2e, half := archsimd.BroadcastFloat32x16(1.44269504088896341), archsimd.BroadcastFloat32x16(0.5)
	c1, c2 := archsimd.BroadcastFloat32x16(0.693359375), archsimd.BroadcastFloat32x16(-2.12194440e-4)
	p0, p1 := archsimd.BroadcastFloat32x16(1.9875691500e-4), archsimd.BroadcastFloat32x16(1.3981999507e-3)
	p2, p3 := archsimd.BroadcastFloat32x16(8.3334519073e-3), archsimd.BroadcastFloat32x16(4.1665795894e-2)
	p4, p5 := archsimd.BroadcastFloat32x16(1.6666665459e-1), archsimd.BroadcastFloat32x16(5.0000001201e-1)
	one, lo := archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(-87.3)
	var acc archsimd.Float32x16
	for i := 0; i < n; i += 16 {
		x := archsimd.LoadFloat32x16(at16(z, i)).Sub(sh)
		nf := x.Mul(log2e).Add(half).FloorScaled(0)
		r := x.Sub(nf.Mul(c1)).Sub(nf.Mul(c2))
		p := p0.Mul(r).Add(p1)
		p = p.Mul(r).Add(p2)
		p = p.Mul(r).Add(p3)
		p = p.Mul(r).Add(p4)
		p = p.Mul(r).Add(p5)
		p = p.Mul(r).Mul(r).Add(r).Add(one)
		scale := nf.ConvertToInt32().Add(archsimd.BroadcastInt32x16(127)).ShiftAllLeft(23).AsFloat32x16()
		e := p.Mul(scale).Masked(x.GreaterEqual(lo))
		e = x.Merge(e, x.IsNaN())
		e.Store(at16(z, i))
		acc = acc.Add(e)
	}
	var lanes [16]float32
	acc.Store(&lanes)
	archsimd.ClearAVXUpperBits()
	var sum float64
	for _, v := range lanes {
		sum += float64(v)
	}
	return sum + expShiftGo(z[n:], shift)
}

func (simdImpl) adam(p, g, m, v []float32, a, ivc2, b1, b2, eps float32) {
	n := len(p) &^ 15
	vb1, vb2 := archsimd.BroadcastFloat32x16(b1), archsimd.BroadcastFloat32x16(b2)
	vc1, vc2 := archsimd.BroadcastFloat32x16(1-b1), archsimd.BroadcastFloat32x16(1-b2)
	va, vi, ve := archsimd.BroadcastFloat32x16(a), archsimd.BroadcastFloat32x16(ivc2), archsimd.BroadcastFloat32x16(eps)
	for i := 0; i < n; i += 16 {
		gi := archsimd.LoadFloat32x16(at16(g, i))
		mi := vb1.Mul(archsimd.LoadFloat32x16(at16(m, i))).Add(vc1.Mul(gi))
		vv := vb2.Mul(archsimd.LoadFloat32x16(at16(v, i))).Add(vc2.Mul(gi).Mul(gi))
		mi.Store(at16(m, i))
		vv.Store(at16(v, i))
		step := va.Mul(mi).Div(vv.Mul(vi).Sqrt().Add(ve))
		archsimd.LoadFloat32x16(at16(p, i)).Sub(step).Store(at16(p, i))
	}
	archsimd.ClearAVXUpperBits()
	adamGo(p[n:], g[n:len(p)], m[n:len(p)], v[n:len(p)], a, ivc2, b1, b2, eps)
}
