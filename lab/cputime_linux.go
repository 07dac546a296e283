//go:build linux

package lab

import (
	"runtime"
	"syscall"
	"time"
)

// threadCPU runs f on a locked OS thread and returns the CPU seconds that
// thread spent (user + system). model.Train starts no goroutines, so this
// is the run's CPU time apart from garbage-collection work on other threads.
func threadCPU(f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, ok1 := threadRusage()
	f()
	after, ok2 := threadRusage()
	if !ok1 || !ok2 {
		return 0
	}
	return (after - before).Seconds()
}

func threadRusage() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
