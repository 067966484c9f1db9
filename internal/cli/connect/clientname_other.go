//go:build !linux && !darwin

package connect

func clientName() string { return "" }
