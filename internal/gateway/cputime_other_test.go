//go:build !linux

package gateway

import "time"

// threadCPU falls back to wall time where a thread's CPU time is not
// read.
func threadCPU() int64 { return time.Now().UnixNano() }
