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
// earlier drain waits for — an operator's Stop, or a reload that
// relaunched the server.
func TestRemovedWaitsForAnEarlierDrain(t *testing.T) {
	for _, c := range []struct {
		name    string
		earlier func(t *testing.T, lf *launchFleet, s *Server) // takes the running process out of service
	}{
		{"stop", func(t *testing.T, _ *launchFleet, s *Server) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			if d, _ := s.Stop(ctx); !d.Pending { // the operator's CLI gave up waiting
				t.Fatalf("stop drained = %+v, want pending", d)
			}
		}},
		{"relaunch", func(t *testing.T, lf *launchFleet, _ *Server) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, _ = lf.f.Reload(ctx, parseCfg(t, `"a":{"command":"a2","idleTimeout":"0","requestTimeout":"1m"}`), false, nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lf := newLaunchFleet(t, `"a":{"command":"a","idleTimeout":"0","requestTimeout":"1m"}`)
				s := lf.f.Get("a")
				held, err := s.Acquire(t.Context(), "")
				if err != nil {
					t.Fatal(err)
				}
				old := held.in.current()
				c.earlier(t, lf, s)
				var gone <-chan struct{}
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				_, _ = lf.f.Reload(ctx, parseCfg(t, ``), false, func(a Applied) { gone = a.Removed["a"] })
				cancel()
				if gone == nil {
					t.Fatal("the removal was not applied")
				}
				select {
				case <-gone:
					t.Fatal("Removed[a] closed (its endpoint is closed by serve) while a call still drains on its old process")
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
		})
	}
}
