//go:build goexperiment.simd && amd64 && !(openblas && cgo)

package kernel

import "simd/archsimd"

func defaultImpl() impl {
	if archsimd.X86.AVX512() {
		return simdImpl{}
	}
	return goImpl{}
}
