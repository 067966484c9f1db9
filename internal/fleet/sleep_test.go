package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Sleep puts a running, idle server to sleep at once, whatever its idle
// timeout (here 0: never on its own), and its next request starts it
// again; it refuses, changing nothing, a server not running, one with a
// request in flight, one with a subscriber and one the operator stopped,
// each with an error that says which.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		ctx := t.Context()

		refused := func(step string, want error, says string) {
			t.Helper()
			before := state(s)
			err := s.Sleep(ctx)
			if !errors.Is(err, want) || !strings.Contains(err.Error(), says) {
				t.Fatalf("%s: Sleep = %v, want %v saying %q", step, err, want, says)
			}
			if after := state(s); after != before {
				t.Fatalf("%s: a refused Sleep changed the state from %s to %s", step, before, after)
			}
		}
		refused("never started", ErrNotRunning, "server s is new")

		l, err := s.Acquire(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		refused("a request in flight", ErrBusy, "1 request(s) in flight")
		l.Release()

		s.Subscribe("A", "file:///x")
		refused("a subscriber", ErrBusy, "subscribed to its resources")
		s.Unsubscribe("A", "file:///x")

		if err := s.Sleep(ctx); err != nil {
			t.Fatalf("Sleep of a running idle server: %v", err)
		}
		if st := s.Status(); st.State != "dormant" || st.DormantSince.IsZero() {
			t.Fatalf("after Sleep: %+v", st)
		}
		synctest.Wait()
		var by any
		ff.mu.Lock()
		for _, e := range ff.events {
			if e.Type == "dormant" {
				by = e.Details["by"]
			}
		}
		ff.mu.Unlock()
		if by != "operator" {
			t.Fatalf("the dormant event says it was asked by %v, want operator", by)
		}
		refused("already dormant", ErrNotRunning, "server s is dormant")

		if _, err := use(s.Acquire(ctx, "")); err != nil {
			t.Fatalf("a request after Sleep: %v", err)
		}
		if n := ff.connects.Load(); n != 2 || state(s) != "running" {
			t.Fatalf("after a request to the slept server: %d connects, %s", n, state(s))
		}

		if _, err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		refused("stopped by the operator", ErrStopped, "mcpvisor start s")
	})
}

// A Sleep bounded by a context that ends first returns its error; the
// stop goes on and the server ends dormant.
func TestSleepBoundedByContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakeStopTime = 5 * time.Second
		defer func() { fakeStopTime = 0 }()
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := s.Sleep(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep with a 1s bound over a 5s stop = %v", err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("the stop did not go on after the caller left: %s", st)
		}
	})
}

// A per-session server is refused: its instances sleep each on its own.
func TestSleepPerSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session"`)
		defer ff.close(t)
		if err := ff.f.Get("s").Sleep(t.Context()); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "one per client session") {
			t.Fatalf("Sleep of a per-session server = %v", err)
		}
	})
}
