//go:build !linux

package main

// dropExecutablePages does nothing off Linux (it reads /proc/self/maps;
// see trimtext_linux.go).
func dropExecutablePages() {}
