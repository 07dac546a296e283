package kernel

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// impl is one backend's matrix multiplies. Each computes C (+)= op(A)·op(B)
// for row-major matrices, adding into C when acc is true and overwriting it
// otherwise.
type impl interface {
	name() string
	// nn: C[m×n] (+)= A[m×k]·B[k×n].
	nn(c, a, b []float32, m, k, n int, acc bool, sc *scratch)
	// tn: C[m×n] (+)= Aᵀ·B with A stored k×m.
	tn(c, a, b []float32, m, k, n int, acc bool, sc *scratch)
	// nt: C[m×n] (+)= A·Bᵀ with B stored n×k.
	nt(c, a, b []float32, m, k, n int, acc bool, sc *scratch)
	// element-wise kernels, see the Kernel methods of the same names.
	addTo(dst, src []float32)
	tanh(dst, src []float32)
	tanhBwd(d, a []float32)
	expShift(z []float32, shift float32) float64
	adam(p, g, m, v []float32, a, ivc2, b1, b2, eps float32)
}

// Kernel multiplies matrices with one backend and counts the floating-point
// operations it performed. The zero value is not usable; call New or
// Generic. A Kernel is not safe for concurrent use.
type Kernel struct {
	impl    impl
	scratch scratch
	flops   float64
}

// scratch is a Kernel's reusable working memory.
type scratch struct {
	t     []float32 // a transposed operand
	tail  []float32 // zero-padded last columns of B
	ctail []float32 // last columns of C, padded like tail
}

// ErrUnavailable: the named backend is not compiled into this build or
// the CPU lacks its instructions.
var ErrUnavailable = errors.New("kernel: backend not available")

// backends lists the backends usable in this build on this CPU, preferred
// first: a backend chosen at build time ("openblas", then "simd"), then the
// assembly ones ("avx512", then "avx2"), and "go" last.
var backends = sync.OnceValue(func() []impl {
	var bs []impl
	bs = append(bs, openblasImpls()...)
	bs = append(bs, simdImpls()...)
	bs = append(bs, asmImpls()...)
	return append(bs, goImpl{})
})

// chosen holds the backend Use selected; nil means backends()[0].
var chosen atomic.Pointer[impl]

func defaultImpl() impl {
	if p := chosen.Load(); p != nil {
		return *p
	}
	return backends()[0]
}

func lookup(name string) (impl, error) {
	for _, b := range backends() {
		if b.name() == name {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: %q (this build and CPU have %v)", ErrUnavailable, name, Available())
}

// Available names the backends usable in this build on this CPU, the
// build's default first and "go" last, e.g. [avx512 avx2 go] on an
// AVX-512 machine with the default build and [go] with -tags purego.
func Available() []string {
	var names []string
	for _, b := range backends() {
		names = append(names, b.name())
	}
	return names
}

// New returns a Kernel using the default backend (see Default).
func New() *Kernel { return &Kernel{impl: defaultImpl()} }

// Named returns a Kernel using the named backend (one of Available), or an
// error wrapping ErrUnavailable.
func Named(name string) (*Kernel, error) {
	b, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return &Kernel{impl: b}, nil
}

// Use makes New and Default use the named backend from now on, in the
// whole process ("" restores the build's default). It exists to compare
// backends on whole runs in one process (BenchmarkLabRun); Kernels made
// before keep their backend. Safe for concurrent use.
func Use(name string) error {
	if name == "" {
		chosen.Store(nil)
		return nil
	}
	b, err := lookup(name)
	if err != nil {
		return err
	}
	chosen.Store(&b)
	return nil
}

// Generic returns a Kernel using the portable pure-Go backend, whatever the
// build tags; tests compare the fast backends against it.
func Generic() *Kernel { return &Kernel{impl: goImpl{}} }

// Default names the backend New uses: the first of Available unless Use
// chose another.
func Default() string { return defaultImpl().name() }

// Name names k's backend.
func (k *Kernel) Name() string { return k.impl.name() }

// FLOPs returns the floating-point operations (2·m·k·n per multiply) done
// by k so far.
func (k *Kernel) FLOPs() float64 { return k.flops }

func check(op string, c, a, b []float32, m, k, n int) {
	if m < 0 || k < 0 || n < 0 || len(c) < m*n || len(a) < m*k || len(b) < k*n {
		panic(fmt.Sprintf("kernel: %s: shape %d×%d·%d×%d with len(a)=%d len(b)=%d len(c)=%d",
			op, m, k, k, n, len(a), len(b), len(c)))
	}
}

// MulNN sets C (or adds to it when acc) to A·B, with A m×k, B k×n and C m×n,
// all row-major. It panics when a slice is too short for its shape.
func (k *Kernel) MulNN(c, a, b []float32, m, kk, n int, acc bool) {
	k.mul(opNN, c, a, b, m, kk, n, acc)
}

// MulTN sets C (or adds to it when acc) to Aᵀ·B, with A stored k×m, B k×n
// and C m×n. It panics when a slice is too short for its shape.
func (k *Kernel) MulTN(c, a, b []float32, m, kk, n int, acc bool) {
	k.mul(opTN, c, a, b, m, kk, n, acc)
}

// MulNT sets C (or adds to it when acc) to A·Bᵀ, with A m×k, B stored n×k
// and C m×n. It panics when a slice is too short for its shape.
func (k *Kernel) MulNT(c, a, b []float32, m, kk, n int, acc bool) {
	k.mul(opNT, c, a, b, m, kk, n, acc)
}

// mulOp names the three products.
type mulOp int

const (
	opNN mulOp = iota
	opTN
	opNT
)

var mulNames = [...]string{opNN: "MulNN", opTN: "MulTN", opNT: "MulNT"}

// mul checks the shapes, counts the FLOPs, handles empty dimensions and
// hands the product to the backend.
func (k *Kernel) mul(o mulOp, c, a, b []float32, m, kk, n int, acc bool) {
	check(mulNames[o], c, a, b, m, kk, n)
	k.flops += 2 * float64(m) * float64(kk) * float64(n)
	if m == 0 || n == 0 {
		return
	}
	if kk == 0 {
		if !acc {
			clear(c[:m*n])
		}
		return
	}
	c, a, b = c[:m*n], a[:m*kk], b[:kk*n]
	switch o {
	case opNN:
		k.impl.nn(c, a, b, m, kk, n, acc, &k.scratch)
	case opTN:
		k.impl.tn(c, a, b, m, kk, n, acc, &k.scratch)
	default:
		k.impl.nt(c, a, b, m, kk, n, acc, &k.scratch)
	}
}

// transpose writes the r×c row-major matrix src into dst as c×r. Four
// source rows are read together so that each write fills four consecutive
// destination floats.
func transpose(dst, src []float32, r, c int) {
	dst, src = dst[:r*c], src[:r*c]
	i := 0
	for ; i+4 <= r; i += 4 {
		s0 := src[i*c : i*c+c]
		s1 := src[(i+1)*c : (i+1)*c+c]
		s2 := src[(i+2)*c : (i+2)*c+c]
		s3 := src[(i+3)*c : (i+3)*c+c]
		for j := range s0 {
			d := dst[j*r+i : j*r+i+4 : j*r+i+4]
			d[0], d[1], d[2], d[3] = s0[j], s1[j], s2[j], s3[j]
		}
	}
	for ; i < r; i++ {
		for j, v := range src[i*c : i*c+c] {
			dst[j*r+i] = v
		}
	}
}

func grow(s *[]float32, n int) []float32 {
	if cap(*s) < n {
		*s = make([]float32, n)
	}
	return (*s)[:n]
}
