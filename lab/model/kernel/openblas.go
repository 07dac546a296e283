//go:build openblas && cgo

package kernel

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
*/
import "C"

import "unsafe"

func init() {
	// One thread per product: runs are parallel across runs, not within
	// one.
	C.openblas_set_num_threads(1)
}

// openblasImpls returns the "openblas" backend.
func openblasImpls() []impl { return []impl{openblasImpl{}} }

// openblasImpl multiplies with OpenBLAS's cblas_sgemm through cgo; the
// element-wise kernels are the portable ones.
type openblasImpl struct{ goImpl }

func (openblasImpl) name() string { return "openblas" }

func ptr(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

func cgemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, acc bool) {
	ta, tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if tA {
		ta = C.CblasTrans
	}
	if tB {
		tb = C.CblasTrans
	}
	var beta C.float
	if acc {
		beta = 1
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k), 1,
		ptr(a), C.blasint(lda), ptr(b), C.blasint(ldb), beta, ptr(c), C.blasint(n))
}

func (openblasImpl) nn(c, a, b []float32, m, k, n int, acc bool, _ *scratch) {
	cgemm(false, false, m, n, k, a, k, b, n, c, acc)
}

func (openblasImpl) tn(c, a, b []float32, m, k, n int, acc bool, _ *scratch) {
	cgemm(true, false, m, n, k, a, m, b, n, c, acc)
}

func (openblasImpl) nt(c, a, b []float32, m, k, n int, acc bool, _ *scratch) {
	cgemm(false, true, m, n, k, a, k, b, k, c, acc)
}
