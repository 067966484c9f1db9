package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Applied.Removed closes once every instance of the removed server is
// stopped — those an earlier Stop, Restart or relaunch took out of service
// and still drain included, not only the ones the removal itself took out:
// serve closes the server's endpoint on it, which would cut the calls the
// earlier drain waits for.
func TestRemovedWaitsForAnEarlierStopsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"a":{"command":"a","idleTimeout":"0","requestTimeout":"1m"}`)
		s := lf.f.Get("a")
		held, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		old := held.in.current()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		d, _ := s.Stop(ctx) // the operator's CLI gave up waiting: drain pending
		cancel()
		if !d.Pending {
			t.Fatalf("stop drained = %+v, want pending", d)
		}
		var gone <-chan struct{}
		_, err = lf.f.Reload(t.Context(), parseCfg(t, ``), false, func(a Applied) { gone = a.Removed["a"] })
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-gone:
			if old.Alive() {
				t.Fatalf("Removed[a] closed (its endpoint is closed by serve) while a call still drains on its old process")
			}
		case <-time.After(time.Second):
		}
		held.Release() // the earlier drain ends
		select {
		case <-gone:
		case <-time.After(2 * time.Minute):
			t.Fatal("Removed[a] did not close once the earlier drain ended")
		}
		synctest.Wait()
		if old.Alive() {
			t.Fatal("Removed[a] closed and the old process still runs")
		}
	})
}

// The same for the drain of an earlier reload that relaunched the server.
func TestRemovedWaitsForAnEarlierRelaunchsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"a":{"command":"a","idleTimeout":"0","requestTimeout":"1m"}`)
		s := lf.f.Get("a")
		held, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		old := held.in.current()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, _ = lf.f.Reload(ctx, parseCfg(t, `"a":{"command":"a2","idleTimeout":"0","requestTimeout":"1m"}`), false, nil)
		cancel()
		var gone <-chan struct{}
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		_, _ = lf.f.Reload(ctx, parseCfg(t, ``), false, func(a Applied) { gone = a.Removed["a"] })
		cancel()
		select {
		case <-gone:
			if old.Alive() {
				t.Fatalf("Removed[a] closed while the relaunch still drains a call on the old process")
			}
		case <-time.After(time.Second):
		}
		held.Release() // the earlier drain ends
		select {
		case <-gone:
		case <-time.After(2 * time.Minute):
			t.Fatal("Removed[a] did not close once the earlier drain ended")
		}
		synctest.Wait()
		if old.Alive() {
			t.Fatal("Removed[a] closed and the old process still runs")
		}
	})
}
