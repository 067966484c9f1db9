package fleet

import (
	"slices"
	"testing"
	"testing/synctest"
)

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
