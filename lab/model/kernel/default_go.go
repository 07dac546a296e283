//go:build !(goexperiment.simd && amd64) && !(openblas && cgo)

package kernel

func defaultImpl() impl { return goImpl{} }
