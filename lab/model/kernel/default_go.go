//go:build !(goexperiment.simd && amd64)

package kernel

// simdImpls: built without GOEXPERIMENT=simd, so no "simd" backend.
func simdImpls() []impl { return nil }
