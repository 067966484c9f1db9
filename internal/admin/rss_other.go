//go:build !linux

package admin

// residentBytes is not measured outside Linux.
func residentBytes() (uint64, bool) { return 0, false }
