//go:build !linux && !darwin

package main

func clientName() string { return "" }
