package main

import (
	"os"
	"runtime"
	"testing"
)

// mcpvisor records no heap profile unless GODEBUG asks for one, at the
// rate GODEBUG names (0 included).
func TestNoHeapProfile(t *testing.T) {
	want, _ := godebugMemProfileRate() // 0 when GODEBUG says nothing
	if runtime.MemProfileRate != want {
		t.Fatalf("runtime.MemProfileRate is %d with GODEBUG=%q, want %d", runtime.MemProfileRate, os.Getenv("GODEBUG"), want)
	}
}
