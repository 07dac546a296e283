//go:build !amd64 || purego

package kernel

// peakLoops: no FMA-peak loop without the assembly kernels.
func peakLoops() []peakLoop { return nil }
