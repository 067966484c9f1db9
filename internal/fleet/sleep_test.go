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

		s.subscribe("A", "file:///x")
		refused("a subscriber", ErrBusy, "subscribed to its resources")
		s.unsubscribe("A", "file:///x")

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

// ownLease starts s and takes a lease of mcpvisor's own on it (Peek), as
// a list refresh does.
func ownLease(t *testing.T, s *Server) *Lease {
	t.Helper()
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	own, ok := s.Peek("")
	if !ok {
		t.Fatal("no running instance to peek")
	}
	return own
}

// mcpvisor's own work on a server — a list refresh after a start, a
// client notification relayed — is not a request in flight: Sleep does
// not refuse it as busy but waits for it (a sleep would cut it), within
// its context, and then puts the server to sleep.
func TestSleepWaitsForMcpvisorsOwnWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		own := ownLease(t, s)

		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := s.Sleep(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep bounded by 1s while mcpvisor's own lease is held = %v", err)
		}
		if st := state(s); st != "running" {
			t.Fatalf("a Sleep that gave up changed the state to %s", st)
		}

		done := make(chan error, 1)
		go func() { done <- s.Sleep(t.Context()) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Sleep returned %v while mcpvisor's own lease is held", err)
		default:
		}
		if st := state(s); st != "running" {
			t.Fatalf("the server went %s under mcpvisor's own lease", st)
		}
		own.Release()
		if err := <-done; err != nil {
			t.Fatalf("Sleep once mcpvisor's own work ended: %v", err)
		}
		if st := state(s); st != "dormant" {
			t.Fatalf("after Sleep: %s", st)
		}
	})
}

// A Sleep waiting for mcpvisor's own lease and a Restart's drain waiting
// for the same lease are both told when it is released: neither waiter
// takes the other's place.
func TestSleepAndRestartWaitForTheSameLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		own := ownLease(t, s)
		slept := make(chan error, 1)
		go func() { slept <- s.Sleep(t.Context()) }()
		synctest.Wait()
		restarted := make(chan error, 1)
		go func() { _, err := s.Restart(t.Context()); restarted <- err }()
		synctest.Wait()
		own.Release()
		synctest.Wait()
		select {
		case err := <-restarted:
			if err != nil {
				t.Fatalf("Restart: %v", err)
			}
		case <-time.After(time.Hour):
			t.Fatal("the Restart's drain was not told the lease was released")
		}
		select {
		case err := <-slept:
			// The instance it waited on was retired: the server now runs a
			// new one, or is refused as not running; either way it returned.
			if err != nil && !errors.Is(err, ErrNotRunning) {
				t.Fatalf("Sleep after a Restart took its instance: %v", err)
			}
		default:
			t.Fatal("the Sleep was not told the lease was released")
		}
	})
}

// A server started only to learn its lists goes back to sleep even when
// mcpvisor's own work on it (the list refresh that follows a first start)
// is still in flight when the learn ends: Rest waits for that work, within
// its context, instead of leaving the server running until its idle
// timeout. A client's request, or a context that ends first, keeps it
// running.
func TestRestWaitsForMcpvisorsOwnWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10m"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		own := ownLease(t, s)
		rested := make(chan bool, 1)
		go func() { rested <- s.rest(t.Context(), s.requests()) }()
		synctest.Wait()
		select {
		case <-rested:
			t.Fatal("Rest returned while mcpvisor's own lease was held")
		default:
		}
		own.Release()
		if !<-rested {
			t.Fatal("Rest refused a server only mcpvisor's own work held")
		}
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("state %s after Rest", st)
		}

		// A context that ends while the work goes on: nothing changes.
		own = ownLease(t, s)
		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if s.rest(short, s.requests()) {
			t.Fatal("Rest put the server to sleep after its context ended")
		}
		own.Release()
		synctest.Wait()
		if st := state(s); st != "running" {
			t.Fatalf("state %s after a Rest that gave up", st)
		}

		// A client's request while Rest waits: the server stays up.
		own = ownLease(t, s)
		before := s.requests()
		go func() { rested <- s.rest(t.Context(), before) }()
		synctest.Wait()
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		own.Release()
		l.Release()
		if <-rested {
			t.Fatal("Rest put to sleep a server a client used meanwhile")
		}
		synctest.Wait()
		if st := state(s); st != "running" {
			t.Fatalf("state %s: a client's server was put to sleep", st)
		}
	})
}
