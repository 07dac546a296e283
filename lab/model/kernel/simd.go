//go:build goexperiment.simd && amd64

package kernel

import (
	"simd/archsimd"
	"unsafe"
)

// simdImpl is the AVX-512 backend: a 4×32 register-blocked micro-kernel
// (8 zmm accumulators, 2 loads of B and 4 broadcasts of A per 8 fused
// multiply-adds); Aᵀ is read through strides and Bᵀ is transposed into
// scratch first.
type simdImpl struct{}

func (simdImpl) name() string { return "simd" }

func (simdImpl) nn(c, a, b []float32, m, k, n int, acc bool, sc *scratch) {
	gemmSIMD(c, a, b, m, k, n, k, 1, acc, sc)
	archsimd.ClearAVXUpperBits()
}

// tn needs no transpose: A(i,p) = a[p·m+i] is addressed through strides.
func (simdImpl) tn(c, a, b []float32, m, k, n int, acc bool, sc *scratch) {
	gemmSIMD(c, a, b, m, k, n, 1, m, acc, sc)
	archsimd.ClearAVXUpperBits()
}

func (simdImpl) nt(c, a, b []float32, m, k, n int, acc bool, sc *scratch) {
	bt := grow(&sc.t, k*n)
	transpose(bt, b, n, k)
	gemmSIMD(c, a, bt, m, k, n, k, 1, acc, sc)
	archsimd.ClearAVXUpperBits()
}

// at16 returns the 16 floats of s starting at i without a bounds check;
// callers guarantee i+16 ≤ len(s).
func at16(s []float32, i int) *[16]float32 {
	return (*[16]float32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), uintptr(i)*4))
}

func at(s []float32, i int) float32 {
	return *(*float32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), uintptr(i)*4))
}

// gemmSIMD: C[m×n] (+)= A·B[k×n] where A(i,p) = a[i·sa + p·sp] (sa = k,
// sp = 1 for A; sa = 1, sp = m for Aᵀ). Shapes were checked by the caller.
func gemmSIMD(c, a, b []float32, m, k, n, sa, sp int, acc bool, sc *scratch) {
	j := 0
	for ; j+32 <= n; j += 32 {
		i := 0
		for ; i+4 <= m; i += 4 {
			block4x32(c, a, b, i, j, k, n, sa, sp, acc)
		}
		for ; i < m; i++ {
			block1x32(c, a, b, i, j, k, n, sa, sp, acc)
		}
	}
	for ; j+16 <= n; j += 16 {
		for i := 0; i < m; i++ {
			block1x16(c, a, b, i, j, k, n, sa, sp, acc)
		}
	}
	if j < n {
		tailCols(c, a, b, m, k, n, j, sa, sp, acc, sc)
	}
}

func block4x32(c, a, b []float32, i, j, k, n, sa, sp int, acc bool) {
	var c00, c01, c10, c11, c20, c21, c30, c31 archsimd.Float32x16
	r0, r1, r2, r3 := i*n+j, (i+1)*n+j, (i+2)*n+j, (i+3)*n+j
	if acc {
		c00, c01 = archsimd.LoadFloat32x16(at16(c, r0)), archsimd.LoadFloat32x16(at16(c, r0+16))
		c10, c11 = archsimd.LoadFloat32x16(at16(c, r1)), archsimd.LoadFloat32x16(at16(c, r1+16))
		c20, c21 = archsimd.LoadFloat32x16(at16(c, r2)), archsimd.LoadFloat32x16(at16(c, r2+16))
		c30, c31 = archsimd.LoadFloat32x16(at16(c, r3)), archsimd.LoadFloat32x16(at16(c, r3+16))
	}
	// Pointer walks instead of slice indices: the Go compiler keeps them in
	// registers, which indexing with four row offsets did not. They advance
	// only while another iteration follows, so they never point past the
	// operands (checkptr rejects that).
	pa := unsafe.Pointer(&a[i*sa])
	pb := unsafe.Pointer(&b[j])
	sa4, sp4, n4 := uintptr(sa)*4, uintptr(sp)*4, uintptr(n)*4
	for p := 1; ; p++ {
		b0 := archsimd.LoadFloat32x16((*[16]float32)(pb))
		b1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 64)))
		x := archsimd.BroadcastFloat32x16(*(*float32)(pa))
		c00 = x.MulAdd(b0, c00)
		c01 = x.MulAdd(b1, c01)
		x = archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, sa4)))
		c10 = x.MulAdd(b0, c10)
		c11 = x.MulAdd(b1, c11)
		x = archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, 2*sa4)))
		c20 = x.MulAdd(b0, c20)
		c21 = x.MulAdd(b1, c21)
		x = archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, 3*sa4)))
		c30 = x.MulAdd(b0, c30)
		c31 = x.MulAdd(b1, c31)
		if p == k {
			break
		}
		pa = unsafe.Add(pa, sp4)
		pb = unsafe.Add(pb, n4)
	}
	c00.Store(at16(c, r0))
	c01.Store(at16(c, r0+16))
	c10.Store(at16(c, r1))
	c11.Store(at16(c, r1+16))
	c20.Store(at16(c, r2))
	c21.Store(at16(c, r2+16))
	c30.Store(at16(c, r3))
	c31.Store(at16(c, r3+16))
}

func block1x32(c, a, b []float32, i, j, k, n, sa, sp int, acc bool) {
	var c0, c1 archsimd.Float32x16
	r := i*n + j
	if acc {
		c0, c1 = archsimd.LoadFloat32x16(at16(c, r)), archsimd.LoadFloat32x16(at16(c, r+16))
	}
	bo := j
	for p := 0; p < k; p++ {
		x := archsimd.BroadcastFloat32x16(at(a, i*sa+p*sp))
		c0 = x.MulAdd(archsimd.LoadFloat32x16(at16(b, bo)), c0)
		c1 = x.MulAdd(archsimd.LoadFloat32x16(at16(b, bo+16)), c1)
		bo += n
	}
	c0.Store(at16(c, r))
	c1.Store(at16(c, r+16))
}

func block1x16(c, a, b []float32, i, j, k, n, sa, sp int, acc bool) {
	var c0 archsimd.Float32x16
	r := i*n + j
	if acc {
		c0 = archsimd.LoadFloat32x16(at16(c, r))
	}
	bo := j
	for p := 0; p < k; p++ {
		x := archsimd.BroadcastFloat32x16(at(a, i*sa+p*sp))
		c0 = x.MulAdd(archsimd.LoadFloat32x16(at16(b, bo)), c0)
		bo += n
	}
	c0.Store(at16(c, r))
}

// tailCols handles the last w = n−j (< 16) columns: B's tail is copied,
// zero-padded, into 16-wide rows of scratch and each C row's tail goes
// through a 16-float buffer, so every vector access stays inside its slice.
func tailCols(c, a, b []float32, m, k, n, j, sa, sp int, acc bool, sc *scratch) {
	w := n - j
	bt := grow(&sc.tail, k*16)
	for p := 0; p < k; p++ {
		row := bt[p*16 : p*16+16]
		copy(row, b[p*n+j:p*n+n])
		clear(row[w:])
	}
	var buf [16]float32
	for i := 0; i < m; i++ {
		r := i*n + j
		if acc {
			copy(buf[:w], c[r:r+w])
		} else {
			buf = [16]float32{}
		}
		c0 := archsimd.LoadFloat32x16(&buf)
		for p := 0; p < k; p++ {
			x := archsimd.BroadcastFloat32x16(a[i*sa+p*sp])
			c0 = x.MulAdd(archsimd.LoadFloat32x16(at16(bt, p*16)), c0)
		}
		c0.Store(&buf)
		copy(c[r:r+w], buf[:w])
	}
}
