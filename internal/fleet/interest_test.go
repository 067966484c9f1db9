package fleet

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// What a session asks of a server while it ends is either forgotten with
// it or never recorded: no subscription or log level of an ended session
// stays to be replayed to every new process. Each round races a session's
// Subscribe and SetLogLevel, called over and over, with its end.
func TestInterestRacingSessionEndIsNotKept(t *testing.T) {
	ff := newFakeFleet(t, `,"idleTimeout":"0"`)
	defer ff.close(t)
	s := ff.f.Get("s")
	// More threads than cores: the scheduler of the system preempts them
	// at any instruction, which is what opens the window on a single core.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const rounds, spins = 500, 1 << 12
	for i := range rounds {
		session := fmt.Sprintf("S%d", i)
		var stop atomic.Bool
		var wg sync.WaitGroup
		started := make(chan struct{}, 2)
		wg.Go(func() {
			started <- struct{}{}
			for n := 0; n < spins && !stop.Load(); n++ {
				s.Subscribe(session, "file:///x")
			}
		})
		wg.Go(func() {
			started <- struct{}{}
			for n := 0; n < spins && !stop.Load(); n++ {
				s.SetLogLevel(session, "debug")
			}
		})
		<-started
		<-started
		ff.f.EndSession(context.Background(), session)
		stop.Store(true)
		wg.Wait()
		s.mu.Lock()
		_, kept := s.interests[session]
		s.mu.Unlock()
		if kept {
			t.Fatalf("round %d: an interest of session %s outlived its end", i, session)
		}
	}
}

// A modern server holds its sessions' resource subscriptions in
// mcpvisor's listen, as one set: a session that ends takes its own out of
// the set at once; the others' stay.
func TestEndedSessionLeavesAModernServersSubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		ff.modern.Store(true)
		s := ff.f.Get("s")
		c, _ := live(s.Acquire(t.Context(), "A")).(*fakeLive)
		if c == nil || !c.Modern() {
			t.Fatal("no modern connection")
		}
		s.Subscribe("A", "file:///a")
		s.Subscribe("B", "file:///b")
		c.SetResourceSubscriptions(s.InstanceSubscriptions("A")) // as the gateway does at a subscribe
		ff.f.EndSession(t.Context(), "A")
		if got := c.subscriptions(); !slices.Equal(got, []string{"file:///b"}) {
			t.Fatalf("the server's listen holds %v after session A ended, want B's alone", got)
		}
	})
}
