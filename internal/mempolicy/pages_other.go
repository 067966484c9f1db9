//go:build !linux

package mempolicy

// dropExecutablePages does nothing off Linux (it reads /proc/self/maps;
// see pages_linux.go).
func dropExecutablePages() {}
