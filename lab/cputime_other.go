//go:build !linux

package lab

// threadCPU runs f. Per-thread CPU time is measured on Linux only;
// elsewhere it returns 0 and the caller reports wall-clock seconds.
func threadCPU(f func()) float64 {
	f()
	return 0
}
