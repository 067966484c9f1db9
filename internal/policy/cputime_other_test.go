//go:build !linux

package policy

func threadCPU() int64 { return 0 }
