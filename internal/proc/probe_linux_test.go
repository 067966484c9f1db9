package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A shim candidate that never answers its probe fails it within
// probeTimeout instead of holding Open (and the first spawn) forever.
func TestPIDNamespaceProbeIsBounded(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "silent")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := probeTimeout
	probeTimeout = 200 * time.Millisecond
	defer func() { probeTimeout = old }()
	done := make(chan error, 1)
	go func() { done <- probePIDNamespace(exe, false) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a candidate that never answered passed the probe")
		}
		if !strings.Contains(err.Error(), "did not answer") && !strings.Contains(err.Error(), "operation not permitted") {
			t.Fatalf("probe error %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the probe of a silent candidate did not return")
	}
}
