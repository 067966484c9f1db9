//go:build !linux

package store

func releaseMapped(uintptr) error { return nil }
