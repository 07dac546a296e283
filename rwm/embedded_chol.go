package rwm

import (
	"context"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// cholBlock is the block size of choleskyCtx: ctx is checked before each
// block of cholBlock rows of a block column, about 2·cholBlock²·n flops
// apart (0.3 GFlop at n = 10,000).
const cholBlock = 128

// ctxRows is how many rows of an O(n²) loop over a context's records
// (the Gram matrix, the pair terms) run between two ctx checks.
const ctxRows = 64

// choleskyCtx overwrites the lower triangle of the n×n symmetric matrix a
// (row-major, stride n, lower triangle read) with its Cholesky factor L,
// A = LLᵀ, in place; the strict upper triangle is not read or written. It
// is a left-looking blocked factorisation: for each block column, the
// diagonal block is updated with the columns to its left (Syrk) and
// factorised (Potrf), then each block of rows below it is updated (Gemm)
// and solved against the diagonal block (Trsm). ctx is checked before each
// of those blocks, so a cancelled ctx returns its error within one block's
// work. ok is false when A is not positive definite (err nil).
func choleskyCtx(ctx context.Context, a []float64, n int) (ok bool, err error) {
	for j0 := 0; j0 < n; j0 += cholBlock {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		j1 := min(j0+cholBlock, n)
		b := j1 - j0
		diag := blas64.Symmetric{Uplo: blas.Lower, N: b, Stride: n, Data: a[j0*n+j0:]}
		if j0 > 0 {
			l10 := blas64.General{Rows: b, Cols: j0, Stride: n, Data: a[j0*n:]}
			blas64.Syrk(blas.NoTrans, -1, l10, 1, diag)
		}
		l11, ok := lapack64.Potrf(diag)
		if !ok {
			return false, nil
		}
		for i0 := j1; i0 < n; i0 += cholBlock {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			m := min(i0+cholBlock, n) - i0
			a21 := blas64.General{Rows: m, Cols: b, Stride: n, Data: a[i0*n+j0:]}
			if j0 > 0 {
				l20 := blas64.General{Rows: m, Cols: j0, Stride: n, Data: a[i0*n:]}
				l10 := blas64.General{Rows: b, Cols: j0, Stride: n, Data: a[j0*n:]}
				blas64.Gemm(blas.NoTrans, blas.Trans, -1, l20, l10, 1, a21)
			}
			blas64.Trsm(blas.Right, blas.Trans, 1, l11, a21)
		}
	}
	return true, nil
}
