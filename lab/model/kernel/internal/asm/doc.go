// Package asm holds the generated amd64 assembly kernels of package kernel
// (AVX-512 and AVX2+FMA register-block matrix kernels and FMA-peak loops);
// internal/asmgen generates gemm_amd64.s and gemm_amd64.go. Callers check
// the CPU's features and the operands' bounds; nothing here does.
package asm
