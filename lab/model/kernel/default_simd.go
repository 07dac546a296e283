//go:build goexperiment.simd && amd64

package kernel

import "simd/archsimd"

// simdImpls returns the "simd" backend when the CPU has AVX-512.
func simdImpls() []impl {
	if archsimd.X86.AVX512() {
		return []impl{simdImpl{}}
	}
	return nil
}
