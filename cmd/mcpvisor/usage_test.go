package main

import (
	"strings"
	"testing"
)

// Wrong positional arguments are a usage error (exit 2) for every command,
// whatever cobra's check says — too few, too many — and nothing is asked
// of a serve (none answers at the address given).
func TestPositionalArgumentErrorsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"tools", "diff"},
		{"tools", "diff", "a", "b"},
		{"tools", "approve"},
		{"inspect"},
		{"restart"},
		{"logs"},
		{"call", "onlyserver"},
		{"version", "extra"},
		{"refresh", "a", "b"},
	} {
		code, _, stderr := runBin(t, append(args, "--addr", "127.0.0.1:1")...)
		if code != 2 || strings.Contains(stderr, "is mcpvisor serve running") {
			t.Errorf("mcpvisor %s: exit %d, %s; want a usage error (2)", strings.Join(args, " "), code, stderr)
		}
	}
}
