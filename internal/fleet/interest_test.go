package fleet

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"

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
