//go:build !(openblas && cgo)

package kernel

// openblasImpls: built without -tags openblas (or without cgo).
func openblasImpls() []impl { return nil }
