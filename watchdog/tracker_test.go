package watchdog

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// TestSnapshotRace constructs the race of seed 000 at the watchdog: a
// request that started at 0 s ends at 10 s at the very moment the watchdog
// reads the state (idle timeout 1 s). With one snapshot, whichever side of
// the read End lands on, the watchdog sees a busy server or one that was
// just active, and the idle deadline is 1 s after the request ended. With
// the two values read separately and End between the reads, it sees the
// start time with nothing in flight and reaps the server at once — before
// the response could be flushed.
func TestSnapshotRace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		read      func(tr *Tracker) (time.Time, int) // End happens inside
		wantFired time.Duration
	}{
		{"End before Snapshot", func(tr *Tracker) (time.Time, int) {
			tr.End()
			return tr.Snapshot()
		}, 11 * time.Second},
		{"End after Snapshot", func(tr *Tracker) (time.Time, int) {
			last, n := tr.Snapshot()
			tr.End()
			return last, n
		}, 11 * time.Second},
		{"split reads with End between (the race)", func(tr *Tracker) (time.Time, int) {
			tr.mu.Lock()
			last := tr.last
			tr.mu.Unlock()
			tr.End()
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return last, tr.inflight
		}, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				tr := NewTracker(nil)
				tr.Begin()
				ended := false
				state := func() (time.Time, int) {
					if !ended && time.Since(t0) == 10*time.Second {
						ended = true
						return tc.read(tr)
					}
					return tr.Snapshot()
				}
				_, p := start(t, Config{IdleTimeout: time.Second, State: state})
				advance(time.Minute)
				if !ended {
					t.Fatal("the watchdog did not read the state at 10 s")
				}
				wantFired(t, p, Idle, t0.Add(tc.wantFired))
			})
		})
	}
}
