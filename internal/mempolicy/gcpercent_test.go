package mempolicy

import (
	"runtime/debug"
	"testing"
)

// gcPercent reads the collector's GOGC.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// Learning runs with the collector at LearnGCPercent, and the setting
// found is back after; one that collects as often, or never, is kept.
func TestWithGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct{ found, during int }{{100, 25}, {200, 25}, {25, 25}, {10, 10}, {-1, -1}} {
		debug.SetGCPercent(c.found)
		during := 0
		WithGCPercent(25, func() { during = gcPercent() })
		if after := gcPercent(); during != c.during || after != c.found {
			t.Errorf("GOGC %d: %d while learning, %d after; want %d, then %d", c.found, during, after, c.during, c.found)
		}
	}
}
