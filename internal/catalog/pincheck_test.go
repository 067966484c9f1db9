package catalog

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/drift"
)

// newPinned is the catalog of a pinned server (idle timeout 0, settings
// added) that learned echoV1 and pid (its trusted first list) and stays
// running, and its host.
func newPinned(t *testing.T, settings string) (*Catalog, *testHost) {
	t.Helper()
	s, h := newTestCatalogOf(t, nil, serverConfigWith(t, "fake", `,"idleTimeout":"0","pin":true`+settings), newTestServer(t, ""))
	h.srv.setItems(echoV1, pidTool)
	learnTools(t, s)
	return s, h
}

// wakeHeld puts the pinned server to sleep, then starts it again with
// every tools/list held (the refresh after the start waits in it) and
// leases it. The caller releases the lease, and the lists with release
// (safe to call more than once).
func wakeHeld(t *testing.T, h *testHost) (l Lease, release func()) {
	t.Helper()
	sleepNow(h)
	release = h.srv.holdLists()
	l, err := h.Acquire(t.Context())
	if err != nil {
		release()
		t.Fatal(err)
	}
	return l, release
}

// checkOn checks tool, within d, on a process of session's own: a
// per-session instance's, started for the check.
func checkOn(t *testing.T, s *Catalog, h *testHost, session, tool string, d time.Duration) error {
	t.Helper()
	p := Process{Conn: h.srv.connect(), Launched: h.Config(), Session: session, Tools: new(LiveTools)}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return s.CheckTool(ctx, p, tool)
}

// A learn of the tools is shared only by callers of the same process
// and the same list: a caller for another connection (the process after a
// restart) waits for it and learns its own, and a list_changed during a
// learn makes its callers learn again — neither is answered from a list
// that is not its process's latest.
func TestCheckToolLearnIsOfItsOwnProcessAndList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := newPinned(t, "")
		l, release := wakeHeld(t, h)
		defer release()
		defer l.Release()
		synctest.Wait() // the refresh after the start waits in tools/list
		in := h.instance()
		x := l.Process().Conn
		y := h.srv.connect()
		before, _ := h.srv.listStats()

		type result struct {
			set map[string]bool
			err error
		}
		learn := func(c Conn) <-chan result {
			ch := make(chan result, 1)
			go func() {
				set, err := s.toolsOf(t.Context(), Process{Conn: c, Launched: in.launched, Tools: &in.tools})
				names := map[string]bool{}
				for name := range set {
					names[name] = true
				}
				ch <- result{names, err}
			}()
			return ch
		}
		onX := learn(x)
		synctest.Wait()
		in.tools.Changed(s.host.Config().Pin) // a list_changed while X's learn waits
		onY := learn(y)
		synctest.Wait()
		if n, _ := h.srv.listStats(); n != before+1 {
			t.Fatalf("%d tools/list calls while X's learn waits, want 1 (Y waits for it)", n-before)
		}
		release()
		for _, r := range []result{<-onX, <-onY} {
			if r.err != nil || !r.set["echo"] {
				t.Fatalf("a learn: %v, %v", r.set, r.err)
			}
		}
		if n, _ := h.srv.listStats(); n != before+3 {
			t.Fatalf("%d tools/list calls, want 3: X's, X's again after the list_changed, Y's own", n-before)
		}
		owner := liveConn(&in.tools)
		if owner != x && owner != Conn(y) {
			t.Fatalf("the list kept is of neither connection")
		}
	})
}

// Was a defect: the first list's definitions are approved as they are
// (trust on first use) by making the approved set the known one; approving
// a per-session process's own definition then wrote it into the known
// set too, so the shared instance's definition was replaced without being
// held, and the held count was wrong.
func TestApprovingAPrivateDefinitionLeavesTheKnownOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := newPinned(t, `,"sharing":"per-session"`)
		fp := func(raw string) string {
			return drift.Index(drift.Tool, []json.RawMessage{json.RawMessage(raw)})["echo"].Fingerprint
		}
		h.srv.setItems(echoV2, pidTool)
		if err := checkOn(t, s, h, "A", "echo", time.Second); err == nil {
			t.Fatal("session A's changed echo was not held")
		}
		if _, _, err := s.Approve([]string{"echo"}, map[string]string{"echo": fp(echoV2)}); err != nil {
			t.Fatal(err)
		}
		known := knownTool(s, "echo")
		if known != fp(echoV1) {
			t.Fatalf("approving session A's echo replaced the known (shared) echo: %s, want %s", known, fp(echoV1))
		}
	})
}

// LiveTools makes its box once: a caller that lost the race to make it
// (another's box stored between its look and its own store) uses the
// winner's, so what one records (a list_changed) is seen by the other.
func TestLiveToolsBoxIsMadeOnce(t *testing.T) {
	var lt LiveTools
	if lt.p.Load() != nil {
		t.Fatal("a zero LiveTools holds a box")
	}
	won := &liveBox{}
	if got := lt.claim(won); got != won {
		t.Fatal("the first claim did not make its box the one")
	}
	if got := lt.claim(&liveBox{}); got != won {
		t.Fatal("a claim that lost the race returned its own box, not the one made")
	}
	if lt.box() != won {
		t.Fatal("box returned another box than the one made")
	}
	// What is recorded through one caller's box is seen through another's.
	lt.Changed(true)
	gen, ok := lt.liveGen(true)
	if !ok || gen != 1 {
		t.Fatalf("after one list_changed the generation is %d (%v), want 1", gen, ok)
	}
	// Unpinned and with nothing learned, nothing makes a box.
	var idle LiveTools
	idle.Changed(false)
	idle.Forget()
	if idle.p.Load() != nil {
		t.Fatal("a list_changed of an unpinned server, or a Forget, made a box")
	}
}
