package kernel

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// goImpl is the portable backend: gonum's pure-Go float32 BLAS (Go code
// plus Go assembly for the SSE inner loops, no cgo), which measured about
// 2.5× faster than plain Go loops here.
type goImpl struct{}

func (goImpl) name() string { return "go" }

// Gonum's Sgemm starts goroutines once a product has four or more 64×64
// blocks; runs must stay single-threaded (parallel across runs, not within
// one), so products are cut into pieces of at most 64
// rows and 128 columns (two blocks), which gonum computes serially.
const (
	pieceRows = 64
	pieceCols = 128
)

func sgemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, acc bool) {
	var impl gonum.Implementation
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	var beta float32
	if acc {
		beta = 1
	}
	for i0 := 0; i0 < m; i0 += pieceRows {
		mi := min(pieceRows, m-i0)
		var as []float32
		if tA {
			as = a[i0:] // columns i0.. of the stored k×m matrix
		} else {
			as = a[i0*lda:] // rows i0.. of A
		}
		for j0 := 0; j0 < n; j0 += pieceCols {
			nj := min(pieceCols, n-j0)
			var bs []float32
			if tB {
				bs = b[j0*ldb:] // rows j0.. of the stored n×k matrix
			} else {
				bs = b[j0:]
			}
			impl.Sgemm(ta, tb, mi, nj, k, 1, as, lda, bs, ldb, beta, c[i0*n+j0:], n)
		}
	}
}

func (goImpl) nn(c, a, b []float32, m, k, n int, acc bool, _ *scratch) {
	sgemm(false, false, m, n, k, a, k, b, n, c, acc)
}

func (goImpl) tn(c, a, b []float32, m, k, n int, acc bool, _ *scratch) {
	sgemm(true, false, m, n, k, a, m, b, n, c, acc)
}

func (goImpl) nt(c, a, b []float32, m, k, n int, acc bool, _ *scratch) {
	sgemm(false, true, m, n, k, a, k, b, k, c, acc)
}
