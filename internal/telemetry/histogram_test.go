package telemetry

import (
	"reflect"
	"testing"
	"time"
)

// A start histogram reads as a histogram of the same observations, and
// makes its buckets only at its second observation.
func TestStartHistogram(t *testing.T) {
	obs := []time.Duration{3 * time.Millisecond, -time.Second, 40 * time.Millisecond, 2 * time.Second, time.Hour, 10 * time.Millisecond}
	for n := range len(obs) + 1 {
		var h startHistogram
		want := newStartHistogram()
		for _, d := range obs[:n] {
			h.observe(d)
			want.Observe(d)
		}
		if got := h.snapshot(); !reflect.DeepEqual(got, want.Snapshot()) {
			t.Errorf("after %d observations: %+v, want %+v", n, got, want.Snapshot())
		}
		if made := h.rest.Load() != nil; made != (n >= 2) {
			t.Errorf("after %d observations, buckets made: %v", n, made)
		}
	}
}

// A snapshot never counts a later observation without the first: here
// both are made between its two reads, and it counts neither or the first
// alone (it would count the second alone if it read the first before the
// rest).
func TestStartHistogramSnapshotOrder(t *testing.T) {
	var h startHistogram
	betweenReads = func() {
		betweenReads = nil
		h.observe(time.Millisecond) // the first: the 5 ms bucket
		h.observe(time.Minute)      // a later one: +Inf
	}
	t.Cleanup(func() { betweenReads = nil })
	s := h.snapshot()
	if s.Count > 0 && s.Cumulative[0] == 0 {
		t.Fatalf("a snapshot counted %d observations without the first: %+v", s.Count, s)
	}
}
