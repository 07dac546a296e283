package serve

// SetCrashHook sets the hook the crash tests stop the process with.
func SetCrashHook(f func(point string)) { crashHook = f }
