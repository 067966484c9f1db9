package watchdog

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counterClock is a clock that advances one nanosecond per reading, so
// every event gets its own timestamp.
type counterClock struct{ n atomic.Int64 }

func (c *counterClock) now() time.Time {
	return time.Unix(0, c.n.Add(1))
}

func TestTracker(t *testing.T) {
	var c counterClock
	tr := NewTracker(c.now)
	check := func(wantLast int64, wantInflight int) {
		t.Helper()
		last, n := tr.Snapshot()
		if last.UnixNano() != wantLast || n != wantInflight {
			t.Fatalf("Snapshot() = %d, %d; want %d, %d", last.UnixNano(), n, wantLast, wantInflight)
		}
	}
	check(1, 0) // created
	tr.Begin()
	check(2, 1)
	tr.Begin()
	tr.Touch()
	check(4, 2)
	tr.End()
	check(5, 1)
	tr.End()
	check(6, 0)
}

func TestTrackerEndWithoutBegin(t *testing.T) {
	tr := NewTracker(nil)
	defer func() {
		if recover() == nil {
			t.Fatal("End without Begin did not panic")
		}
		if _, n := tr.Snapshot(); n != 0 {
			t.Errorf("in flight %d after the bad End, want 0", n)
		}
	}()
	tr.End()
}

func TestZeroTrackerUsesSystemClock(t *testing.T) {
	var tr Tracker
	before := time.Now()
	tr.Begin()
	last, n := tr.Snapshot()
	if n != 1 || last.Before(before) || time.Since(last) < 0 {
		t.Fatalf("Snapshot() = %v, %d after Begin at %v", last, n, before)
	}
}

// TestSnapshotNeverMixesRequests races End against Snapshot: every
// snapshot is either (request start, 1) or (request end, 0), never the
// request's start time with nothing in flight — the pair that would make a
// watchdog reap the server as the request finishes.
func TestSnapshotNeverMixesRequests(t *testing.T) {
	var c counterClock
	tr := NewTracker(c.now)
	for range 2000 {
		tr.Begin()
		began, _ := tr.Snapshot()
		var wg sync.WaitGroup
		wg.Go(tr.End)
		for {
			last, n := tr.Snapshot()
			if n == 0 && !last.After(began) {
				t.Fatalf("snapshot (%d, 0) pairs the request's start with nothing in flight", last.UnixNano())
			}
			if n == 1 && !last.Equal(began) {
				t.Fatalf("snapshot (%d, 1): in flight, but not the start time %d", last.UnixNano(), began.UnixNano())
			}
			if n == 0 {
				break
			}
		}
		wg.Wait()
	}
}
