package main

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// mcpvisor records no heap profile unless GODEBUG asks for one.
func TestNoHeapProfile(t *testing.T) {
	asked := strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=")
	if on := runtime.MemProfileRate != 0; on != asked {
		t.Fatalf("runtime.MemProfileRate is %d with GODEBUG=%q", runtime.MemProfileRate, os.Getenv("GODEBUG"))
	}
}
