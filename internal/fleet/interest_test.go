package fleet

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/interest"
)

// countingInterest is the fleet's interest book, counting the times the
// fleet tells a modern server its subscription set (Sync).
type countingInterest struct {
	*interest.Book
	syncs atomic.Int32
}

func (c *countingInterest) Sync(rs interest.ResourceSubscriber, s interest.Server, key string) {
	c.syncs.Add(1)
	c.Book.Sync(rs, s, key)
}

// A session's end tells a modern server its subscription set again when
// the session had asked something of that server, and only then: a
// session that asked nothing of it leaves it alone (a fleet has many
// servers, and sessions end all the time).
func TestSessionEndResyncsOnlyTheServersItAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		ci := &countingInterest{Book: bookOf(ff.f)}
		ff.f.opts.Interest = ci // before anything runs
		ff.modern.Store(true)
		s := ff.f.Get("s")
		c, _ := live(s.Acquire(t.Context(), "A")).(*fakeLive)
		if c == nil || !c.Modern() {
			t.Fatal("no modern connection")
		}
		s.subscribe("A", "file:///a")
		ci.Sync(c, s, "") // as the gateway does at a subscribe
		before := ci.syncs.Load()
		ff.f.EndSession(t.Context(), "B") // B asked nothing of s
		if n := ci.syncs.Load() - before; n != 0 {
			t.Fatalf("the end of a session that asked nothing of the server told it its subscriptions %d times", n)
		}
		ff.f.EndSession(t.Context(), "A")
		if n := ci.syncs.Load() - before; n != 1 {
			t.Fatalf("the end of the session that subscribed told the server its subscriptions %d times, want 1", n)
		}
		if got := c.subscriptions(); len(got) != 0 {
			t.Fatalf("the server's listen holds %v after the only subscriber ended", got)
		}
	})
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
		s.subscribe("A", "file:///a")
		s.subscribe("B", "file:///b")
		c.SetResourceSubscriptions(s.instanceSubscriptions("A")) // as the gateway does at a subscribe
		ff.f.endSession(t.Context(), "A")
		if got := c.subscriptions(); !slices.Equal(got, []string{"file:///b"}) {
			t.Fatalf("the server's listen holds %v after session A ended, want B's alone", got)
		}
	})
}

// Sessions that end while a server idles over its maxIdleMemory put off
// nothing: the memory check comes every memoryCheckEvery after the run
// began, whoever re-arms the idle timer meanwhile. A session that asked
// nothing of the server does not touch its timer at all; one that did
// (a log level) re-arms it, which leaves the memory check where it was.
func TestSessionEndsDoNotPostponeTheMemoryCheck(t *testing.T) {
	for _, asked := range []bool{false, true} {
		t.Run(fmt.Sprintf("asked=%v", asked), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ff := newFakeFleet(t, `,"idleTimeout":"1h","startGrace":"0s","maxIdleMemory":"300MiB"`)
				defer ff.close(t)
				var mem atomic.Uint64
				mem.Store(400 << 20) // over the bound from the start
				fakeMemory(ff, &mem)
				s := ff.f.Get("s")
				if _, err := use(s.Acquire(t.Context(), "")); err != nil {
					t.Fatal(err)
				}
				// A session ends more often than the memory check comes,
				// for twice its period.
				every := memoryCheckEvery * 4 / 5
				for i := range 3 {
					time.Sleep(every)
					other := fmt.Sprintf("other-%d", i)
					if asked {
						s.setLogLevel(other, "debug")
					}
					ff.f.EndSession(t.Context(), other)
				}
				synctest.Wait()
				if got := state(s); got != "dormant" {
					t.Fatalf("idle at 400MiB (maxIdleMemory 300MiB) for %v while sessions ended: %s, want dormant", 3*every, got)
				}
			})
		})
	}
}

// A server in use is not put to sleep for its memory between two close
// requests: the memory check comes memoryCheckEvery after the last
// activity, not on a clock of its own that a request's end can fall just
// before.
func TestAServerInUseIsNotPutToSleepForMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"1h","startGrace":"0s","maxIdleMemory":"300MiB"`)
		defer ff.close(t)
		var mem atomic.Uint64
		mem.Store(400 << 20) // over the bound all along
		fakeMemory(ff, &mem)
		s := ff.f.Get("s")
		for range 30 { // a 100 ms request every second, for 30 s
			l, err := s.Acquire(t.Context(), "")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			l.Release()
			time.Sleep(900 * time.Millisecond)
		}
		synctest.Wait()
		if st := s.Status(); st.State != "running" || st.Spawns != 1 {
			t.Fatalf("a server asked something every second is %s after %d starts, want running after 1", st.State, st.Spawns)
		}
	})
}
