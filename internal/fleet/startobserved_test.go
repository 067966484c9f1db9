package fleet

import (
	"testing"
	"testing/synctest"
	"time"
)

// A start and a wake are counted before the requests that waited for
// them go on: a request the start served finds its spawn, and a request
// that woke the server its wake, already counted. The start is held
// right after it lets its waiters go.
func TestStartCountedBeforeItsWaitersGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		release := make(chan struct{})
		ff.f.seams.afterStartSignalled = func() { <-release }
		defer close(release)
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		if n := s.Telemetry().Spawns().Count; n != 1 {
			t.Fatalf("a request served by a start finds %d spawns counted", n)
		}
		time.Sleep(6 * time.Second) // idle, then dormant
		synctest.Wait()
		if st := s.Status().State; st != "dormant" {
			t.Fatalf("state %q, want dormant", st)
		}
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		if wk, sp := s.Telemetry().Wakes().Count, s.Telemetry().Spawns().Count; wk != 1 || sp != 2 {
			t.Fatalf("a request that woke the server finds %d wakes and %d spawns counted, want 1 and 2", wk, sp)
		}
	})
}
