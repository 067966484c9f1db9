package gateway

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in nanoseconds (a benchmark
// that reads it locks its thread): what a loaded machine does not
// inflate as it does wall time.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
