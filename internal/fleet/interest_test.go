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
	"time"
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

// heldSubscriber is a modern server's connection whose first
// SetResourceSubscriptions is held until release is closed.
type heldSubscriber struct {
	entered, release chan struct{}
	mu               sync.Mutex
	calls            int
	subs             []string
}

func (r *heldSubscriber) Modern() bool { return true }
func (r *heldSubscriber) SetResourceSubscriptions(uris []string) {
	r.mu.Lock()
	r.calls++
	first := r.calls == 1
	r.mu.Unlock()
	if first {
		close(r.entered)
		<-r.release
	}
	r.mu.Lock()
	r.subs = uris
	r.mu.Unlock()
}

// Two subscription changes told at once leave the server with the newer
// set: SyncSubscriptions reads and tells under one lock, so an older set
// slow to be told cannot land after the newer.
func TestSyncSubscriptionsLastToldIsCurrent(t *testing.T) {
	ff := newFakeFleet(t, `,"idleTimeout":"0"`)
	defer ff.close(t)
	s := ff.f.Get("s")
	rs := &heldSubscriber{entered: make(chan struct{}), release: make(chan struct{})}
	s.Subscribe("A", "file:///a")
	first := make(chan struct{})
	go func() { s.SyncSubscriptions(rs, ""); close(first) }()
	<-rs.entered // the older set is being told
	s.Subscribe("B", "file:///b")
	second := make(chan struct{})
	go func() { s.SyncSubscriptions(rs, ""); close(second) }()
	select {
	case <-second: // told at once: the older may land after it
	case <-time.After(100 * time.Millisecond): // (or waiting its turn)
	}
	close(rs.release)
	<-first
	<-second
	rs.mu.Lock()
	got := rs.subs
	rs.mu.Unlock()
	if !slices.Equal(got, []string{"file:///a", "file:///b"}) {
		t.Fatalf("the server was left with %v, want both subscriptions", got)
	}
}
