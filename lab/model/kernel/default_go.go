//go:build !goexperiment.simd && !openblas

package kernel

func defaultImpl() impl { return goImpl{} }
