// Package kernel holds the float32 matrix-multiply kernels of the lab's tiny
// language models (issue 4, item 6: pure Go by default, faster kernels behind
// build tags). It implements no METHOD.md formula; it only makes the lab's
// real training runs (METHOD.md §1 Vocabulary, "Task") cheap enough to run
// many of them on a laptop.
//
// Three backends exist, chosen at build time:
//
//   - "go": gonum's float32 BLAS (pure Go with Go assembly, no cgo), the
//     default build and always available through Generic. Products are cut
//     into pieces gonum computes serially, so no goroutines are started.
//   - "simd": AVX-512 loops written with Go 1.26's simd/archsimd package;
//     built with GOEXPERIMENT=simd (build tag goexperiment.simd) and used when
//     the CPU has AVX-512, otherwise "go" is used. Every kernel clears the AVX
//     upper register bits (VZEROUPPER) before returning, so SSE code that runs
//     afterwards is not slowed down.
//   - "openblas": cblas_sgemm through cgo, built with -tags openblas
//     (needs libopenblas-dev). OpenBLAS is told to use one thread.
//
// Besides matrix multiplies, a Kernel has the element-wise loops that
// dominated a run after the multiplies were fast (tanh and its derivative,
// exp for softmax, the Adam update); the AVX-512 versions give the same bits
// as the scalar ones.
//
// All matrices are dense, row-major []float32. A Kernel does no I/O, starts
// no goroutines and is not safe for concurrent use (it owns scratch space);
// use one per training run.
package kernel
