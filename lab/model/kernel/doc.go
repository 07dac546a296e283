// Package kernel holds the float32 matrix-multiply kernels of the lab's
// tiny language models (assembly kernels chosen at run time in the default
// build). It implements no METHOD.md formula;
// it only makes the lab's real training runs (METHOD.md §1 Vocabulary,
// "Task") cheap enough to run many of them on a laptop.
//
// Backends (Available lists those of this build and CPU, preferred first;
// New uses the first unless Use chose another):
//
//   - "avx512" and "avx2": Go assembly generated with avo
//     (internal/asmgen → internal/asm), in the default build on amd64 and
//     chosen at run time from the CPU's features (golang.org/x/sys/cpu):
//     AVX-512F, or AVX2 with FMA. Register blocks of up to 8×32 (avx512,
//     16 zmm accumulators) or 6×16 (avx2, 12 ymm accumulators) are computed
//     straight from the row-major operands (Aᵀ through strides, Bᵀ
//     transposed into scratch first); the last columns go through
//     zero-padded copies. Every kernel ends with VZEROUPPER.
//   - "go": gonum's float32 BLAS (pure Go with Go assembly, no cgo), the
//     fallback on other CPUs and with -tags purego, and always available
//     through Generic. Products are cut into pieces gonum computes
//     serially, so no goroutines are started.
//   - "simd": AVX-512 loops written with Go 1.26's simd/archsimd package;
//     built with GOEXPERIMENT=simd (build tag goexperiment.simd) and
//     preferred when the CPU has AVX-512. Every kernel clears the AVX upper
//     register bits (VZEROUPPER) before returning, so SSE code that runs
//     afterwards is not slowed down.
//   - "openblas": cblas_sgemm through cgo, built with -tags openblas
//     (needs libopenblas-dev) and then preferred. OpenBLAS is told to use
//     one thread.
//
// Besides matrix multiplies, a Kernel has the element-wise loops that
// dominated a run after the multiplies were fast (tanh and its derivative,
// exp for softmax, the Adam update); the avx512, avx2 and simd versions give
// the same bits as the scalar ones (ExpShift's sum to float64 rounding).
//
// All matrices are dense, row-major []float32. A Kernel does no I/O, starts
// no goroutines and is not safe for concurrent use (it owns scratch space);
// use one per training run.
package kernel
