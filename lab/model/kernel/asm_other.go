//go:build !amd64 || purego

package kernel

// asmImpls: this build has no assembly backends (not amd64, or -tags
// purego).
func asmImpls() []impl { return nil }
