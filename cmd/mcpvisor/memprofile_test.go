package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// mcpvisor records no heap profile unless GODEBUG asks for one, at the
// rate GODEBUG names (0 included).
func TestNoHeapProfile(t *testing.T) {
	want := 0
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if v, ok := strings.CutPrefix(kv, "memprofilerate="); ok {
			want, _ = strconv.Atoi(v)
		}
	}
	if runtime.MemProfileRate != want {
		t.Fatalf("runtime.MemProfileRate is %d with GODEBUG=%q, want %d", runtime.MemProfileRate, os.Getenv("GODEBUG"), want)
	}
}
