package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// newPinned is a pinned drift fleet whose server s learned echoV1 and
// pid (its trusted first list) and stays running.
func newPinned(t *testing.T, settings string) (*driftFleet, *Server) {
	t.Helper()
	df := newDriftFleet(t, `,"idleTimeout":"0","pin":true`+settings, nil, nil)
	s := df.f.Get("s")
	df.srv.setItems(echoV1, pidTool)
	learnTools(t, s)
	return df, s
}

// checkOn leases session's instance of s and checks tool on it, within d.
func checkOn(t *testing.T, s *Server, session, tool string, d time.Duration) error {
	t.Helper()
	l, err := s.Acquire(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return s.CheckTool(ctx, l, tool)
}

func isHeld(err error, unlisted bool) bool {
	var he *HeldError
	return errors.As(err, &he) && errors.Is(err, ErrToolHeld) && he.Unlisted == unlisted
}

// A pinned server put to sleep whose package changed meanwhile: the first
// call after the wake is checked against what the new process lists, not
// against the list cached from the process before — it waits for that
// list (bounded by its context) rather than serve the changed tool.
func TestCheckToolAfterAWakeUsesTheNewProcesssList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		if err := checkOn(t, s, "", "echo", time.Second); err != nil {
			t.Fatalf("the approved echo: %v", err)
		}
		if err := s.Sleep(t.Context()); err != nil {
			t.Fatal(err)
		}
		df.srv.setItems(echoV2, pidTool)
		release := df.holdLists()
		defer release()
		if err := checkOn(t, s, "", "echo", time.Second); err == nil || isHeld(err, false) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call after the wake, while the new process's list is not known yet: %v (want the wait's deadline)", err)
		}
		release()
		synctest.Wait()
		if err := checkOn(t, s, "", "echo", time.Second); !isHeld(err, false) {
			t.Fatalf("echo changed while the server slept: CheckTool = %v, want held", err)
		}
		if err := checkOn(t, s, "", "pid", time.Second); err != nil {
			t.Fatalf("the unchanged pid: %v", err)
		}
		if n := len(df.of("definitions_changed")); n != 1 {
			t.Fatalf("%d definitions_changed events, want 1", n)
		}
	})
}

// Between a list_changed from the process and the refresh it causes, a
// call is not checked against the list from before the notification.
func TestCheckToolAfterListChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		if err := checkOn(t, s, "", "echo", time.Second); err != nil {
			t.Fatal(err)
		}
		df.srv.setItems(echoV2, pidTool)
		release := df.holdLists()
		defer release()
		instHooks{s.sharedIn()}.Notification(nil, &rpc.Message{Method: "notifications/tools/list_changed"})
		synctest.Wait()
		if err := checkOn(t, s, "", "echo", time.Second); err == nil {
			t.Fatal("a call right after list_changed was checked against the list from before it")
		}
		release()
		synctest.Wait()
		if err := checkOn(t, s, "", "echo", time.Second); !isHeld(err, false) {
			t.Fatalf("after the refresh: %v, want held", err)
		}
	})
}

// A tool the process serves without listing it (or added without a
// list_changed) was never approved: it is not served.
func TestCheckToolRefusesWhatTheProcessDoesNotList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		if err := checkOn(t, s, "", "echo", time.Second); err != nil {
			t.Fatal(err)
		}
		df.srv.setItems(echoV1, pidTool, shout) // no list_changed
		if err := checkOn(t, s, "", "shout", time.Second); !isHeld(err, true) {
			t.Fatalf("an unlisted tool: %v, want held as unlisted", err)
		}
		if err := checkOn(t, s, "", "nosuch", time.Second); !isHeld(err, true) {
			t.Fatalf("a name never listed: %v, want held as unlisted", err)
		}
	})
}

// An unpinned server is not checked: nothing is learned for it.
func TestCheckToolUnpinnedServesAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"0"`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1)
		learnTools(t, s)
		before, _ := df.listStats()
		if err := checkOn(t, s, "", "anything", time.Second); err != nil {
			t.Fatal(err)
		}
		if after, _ := df.listStats(); after != before {
			t.Fatalf("CheckTool of an unpinned server listed its tools (%d → %d)", before, after)
		}
	})
}

// A pinned per-session server: each session's process is checked against
// its own list; a changed tool there is held, reported once as a change
// of the server's definitions, pending approval like any other, and
// served once approved.
func TestCheckToolPerSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, `,"sharing":"per-session"`)
		defer df.close(t)
		df.srv.setItems(echoV2, pidTool)
		if err := checkOn(t, s, "A", "echo", time.Second); !isHeld(err, false) {
			t.Fatalf("session A's changed echo: %v, want held", err)
		}
		if err := checkOn(t, s, "B", "echo", time.Second); !isHeld(err, false) {
			t.Fatalf("session B's changed echo: %v, want held", err)
		}
		if err := checkOn(t, s, "A", "pid", time.Second); err != nil {
			t.Fatalf("session A's unchanged pid: %v", err)
		}
		if n := len(df.of("definitions_changed")); n != 1 {
			t.Fatalf("%d definitions_changed events for one change seen by two sessions, want 1", n)
		}
		p := s.Definitions().Pending
		if len(p) != 1 || p[0].Name != "echo" {
			t.Fatalf("pending %+v, want echo", p)
		}
		if _, _, err := s.Approve([]string{"echo"}, map[string]string{"echo": p[0].Fingerprint}); err != nil {
			t.Fatal(err)
		}
		if err := checkOn(t, s, "A", "echo", time.Second); err != nil {
			t.Fatalf("the approved echo in session A: %v", err)
		}
	})
}

// Calls that check one process at once share one learn of its list; one
// whose context ends first leaves without holding up the others, and a
// later call uses what was learned.
func TestCheckToolSharesOneLearn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		if err := s.Sleep(t.Context()); err != nil {
			t.Fatal(err)
		}
		release := df.holdLists()
		defer release()
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release()
		synctest.Wait() // the refresh after the start waits in tools/list
		before, _ := df.listStats()

		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- s.CheckTool(t.Context(), l, "echo") }()
		}
		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := s.CheckTool(short, l, "echo"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a caller with a short context: %v", err)
		}
		if n, _ := df.listStats(); n != before+1 {
			t.Fatalf("%d tools/list calls for 4 concurrent checks, want 1", n-before)
		}
		release()
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatalf("a waiting check: %v", err)
			}
		}
		after, _ := df.listStats()
		if err := s.CheckTool(t.Context(), l, "pid"); err != nil {
			t.Fatal(err)
		}
		if n, _ := df.listStats(); n != after {
			t.Fatal("a later check listed again although nothing changed")
		}
	})
}

// A pinned server removed by a reload and added again keeps its
// approvals: what it serves then is compared with what it served before
// (a change is reported and held), not trusted as a first list.
func TestAReAddedPinnedServerKeepsItsApprovals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		settings := `,"idleTimeout":"0","pin":true`
		df := newDriftFleet(t, settings, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		learnTools(t, df.f.Get("s"))

		for _, servers := range []string{`"other":{"command":"o"}`, `"other":{"command":"o"},"s":{"command":"fake"` + settings + `}`} {
			if _, err := df.f.Reload(t.Context(), parseCfg(t, servers), false, nil); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		df.srv.setItems(echoV2, pidTool)
		s := df.f.Get("s")
		if err := checkOn(t, s, "", "echo", time.Second); !isHeld(err, false) {
			t.Fatalf("the re-added server's changed echo: %v, want held", err)
		}
		if n := len(df.of("definitions_changed")); n != 1 {
			t.Fatalf("%d definitions_changed events, want 1", n)
		}
	})
}

// Once a reload removed a server, nothing of it writes its definitions
// record: a late flush of the removed server (its refresher finishing)
// does not undo what the server added again under its name wrote.
func TestARemovedServerNoLongerWritesItsRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		df := newDriftFleet(t, `,"idleTimeout":"0","pin":true`, nil, st)
		defer df.close(t)
		old := df.f.Get("s")
		df.srv.setItems(echoV1, pidTool)
		learnTools(t, old)
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"other":{"command":"o"}`), false, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := string(st.Definitions("s"))
		d := old.defs()
		d.mu.Lock()
		d.approved = nil // a change the removed server would persist
		d.dirty = true
		d.mu.Unlock()
		old.flushDefinitions()
		if got := string(st.Definitions("s")); got != before {
			t.Fatalf("a removed server wrote its record:\n%s\nwas\n%s", got, before)
		}
	})
}

// The operator can clear a tools_lost warning by accepting the empty list:
// the server is ready again, the loss reported as a change, and a pinned
// server's tools that come back as approved are served while a changed
// one is held. A server whose tools are not lost refuses it.
func TestAcceptLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		if _, err := s.AcceptLost(); !errors.Is(err, ErrNotLost) {
			t.Fatalf("AcceptLost of a server with its tools: %v", err)
		}
		df.srv.setItems()
		relearn(s)
		if s.Status().Warning == "" {
			t.Fatal("no tools_lost warning")
		}
		if n, err := s.AcceptLost(); err != nil || n != 2 {
			t.Fatalf("AcceptLost = %d, %v; want 2", n, err)
		}
		if st := s.Status(); st.Warning != "" || !st.Ready {
			t.Fatalf("after AcceptLost: %+v", st)
		}
		ev := df.of("definitions_changed")
		if len(ev) != 1 || len(details(t, ev[0]).Removed) != 2 || len(df.of("tools_lost_accepted")) != 1 {
			t.Fatalf("events: %+v", df.events)
		}
		relearn(s) // still none: no new warning
		if s.Status().Warning != "" {
			t.Fatal("the accepted empty list warned again")
		}
		df.srv.setItems(echoV1, shout)
		relearn(s)
		if err := checkOn(t, s, "", "echo", time.Second); err != nil {
			t.Fatalf("echo back as approved: %v", err)
		}
		if err := checkOn(t, s, "", "shout", time.Second); !isHeld(err, false) {
			t.Fatalf("the new shout: %v, want held", err)
		}
	})
}
