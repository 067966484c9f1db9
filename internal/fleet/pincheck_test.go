package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
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
	return s.Catalog().CheckTool(ctx, l.Process(), tool)
}

// wakeHeld puts the pinned s to sleep, then starts it again with every
// tools/list held (the refresh after the start waits in it) and leases
// it. The caller releases the lease, and the lists with release (safe to
// call more than once), before it closes the fleet.
func wakeHeld(t *testing.T, df *driftFleet, s *Server) (l *Lease, release func()) {
	t.Helper()
	if err := s.Sleep(t.Context()); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	release = df.holdLists()
	l, err := s.Acquire(t.Context(), "")
	if err != nil {
		release()
		t.Fatal(err)
	}
	return l, release
}

func isHeld(err error, unlisted bool) bool {
	var he *catalog.HeldError
	return errors.As(err, &he) && errors.Is(err, catalog.ErrToolHeld) && he.Unlisted == unlisted
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
		p := s.Catalog().Definitions().Pending
		if len(p) != 1 || p[0].Name != "echo" {
			t.Fatalf("pending %+v, want echo", p)
		}
		if _, _, err := s.Catalog().Approve([]string{"echo"}, map[string]string{"echo": p[0].Fingerprint}); err != nil {
			t.Fatal(err)
		}
		if err := checkOn(t, s, "A", "echo", time.Second); err != nil {
			t.Fatalf("the approved echo in session A: %v", err)
		}
	})
}

// A learn every caller left is ended (its tools/list is cancelled, no
// goroutine of it stays), and the next caller starts a new one rather
// than inherit the cancellation.
func TestCheckToolLearnEndsWithItsLastCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, `,"requestTimeout":"0"`)
		defer df.close(t)
		l, release := wakeHeld(t, df, s)
		defer release()
		defer l.Release()
		synctest.Wait() // the refresh after the start waits in tools/list
		listing := func() int {
			df.srv.mu.Lock()
			defer df.srv.mu.Unlock()
			return df.srv.listing
		}
		before := listing()
		for range 2 {
			short, cancel := context.WithTimeout(t.Context(), time.Second)
			if err := s.Catalog().CheckTool(short, l.Process(), "echo"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a caller with a short context: %v", err)
			}
			cancel()
			synctest.Wait()
			if n := listing(); n != before {
				t.Fatalf("%d tools/list calls waiting after every checker left, want %d (the refresh's)", n, before)
			}
		}
		n, _ := df.listStats()
		release()
		if err := s.Catalog().CheckTool(t.Context(), l.Process(), "echo"); err != nil {
			t.Fatalf("a check after the left learns: %v", err)
		}
		if after, _ := df.listStats(); after != n+1 {
			t.Fatalf("%d tools/list calls for the check after, want 1", after-n)
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
		l, release := wakeHeld(t, df, s)
		defer release()
		defer l.Release()
		synctest.Wait() // the refresh after the start waits in tools/list
		before, _ := df.listStats()

		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- s.Catalog().CheckTool(t.Context(), l.Process(), "echo") }()
		}
		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := s.Catalog().CheckTool(short, l.Process(), "echo"); !errors.Is(err, context.DeadlineExceeded) {
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
		if err := s.Catalog().CheckTool(t.Context(), l.Process(), "pid"); err != nil {
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
// record: a late flush of the removed server (here an approval that
// reaches it as it is removed) does not undo what the server added again
// under its name wrote. (The catalog's test of this name flushes a change
// of its own.)
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
		df.srv.setItems(echoV2, pidTool)
		relearn(old) // echo changed: held, and the record written
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"other":{"command":"o"}`), false, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := string(st.Definitions("s"))
		// An approval the removed server would persist.
		if approved, _, err := old.Catalog().Approve(nil, nil); err != nil || len(approved) != 1 {
			t.Fatalf("approving the removed server's held echo: %v, %v", approved, err)
		}
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
		if _, err := s.Catalog().AcceptLost(); !errors.Is(err, catalog.ErrNotLost) {
			t.Fatalf("AcceptLost of a server with its tools: %v", err)
		}
		df.srv.setItems()
		relearn(s)
		if s.Status().Warning == "" {
			t.Fatal("no tools_lost warning")
		}
		if n, err := s.Catalog().AcceptLost(); err != nil || n != 2 {
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

// Was a defect: a pinned per-session server's CheckTool on one session's
// private instance writes that instance's tool list into the server's
// shared cache and definitions: what every other session lists (the
// aggregate reads CachedList/List), the definitions_changed event, and
// the tools_lost warning all follow one session's private process.
func TestAPerSessionProcessesListStaysItsSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, `,"sharing":"per-session"`)
		defer df.close(t)
		before, _ := s.Catalog().CachedList(catalog.Tools)
		// Session A's private process lists only echo (e.g. its tools
		// depend on that client's roots or credentials).
		df.srv.setItems(echoV1)
		if err := checkOn(t, s, "A", "echo", time.Second); err != nil {
			t.Fatalf("A's echo: %v", err)
		}
		after, _ := s.Catalog().CachedList(catalog.Tools)
		if len(after) != len(before) {
			t.Errorf("session A's private instance changed the server's shared cached tools list: %d tools → %d (every other session's aggregated tools/list follows it)", len(before), len(after))
		}
		if n := len(df.of("definitions_changed")); n != 0 {
			t.Errorf("%d definitions_changed events caused by one session's private instance: %+v", n, df.of("definitions_changed"))
		}
		// A private process that lists no tools at all.
		df.srv.setItems()
		_ = checkOn(t, s, "B", "echo", time.Second)
		if w := s.Status().Warning; w != "" {
			t.Errorf("session B's private instance listing no tools put the whole server in tools_lost: %q (ready=%v)", w, s.Status().Ready)
		}
		if got, _ := s.Catalog().CachedList(catalog.Tools); len(got) == 0 {
			t.Errorf("session B's private instance emptied the shared cached tools list")
		}
	})
}

// Was a defect: a pinned server woken after its package changed. The first
// call's CheckTool learns the new list into the cache; when it stores
// before the refresh that follows the wake, the refresh finds the cache
// "unchanged" and no OnListsChanged is reported: the aggregated table is
// not invalidated and no session is told tools/list_changed.
func TestCheckToolsLearnReportsTheListChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		reported := df.toolsReported()
		df.srv.setItems(echoV2, pidTool)
		l, release := wakeHeld(t, df, s)
		defer release()
		defer l.Release()
		errc := make(chan error, 1)
		go func() { errc <- s.Catalog().CheckTool(t.Context(), l.Process(), "echo") }()
		synctest.Wait() // the refresh and CheckTool's learn both wait in tools/list
		release()
		synctest.Wait()
		if err := <-errc; !isHeld(err, false) {
			t.Fatalf("CheckTool: %v", err)
		}
		if got, _ := s.Catalog().CachedList(catalog.Tools); len(got) != 2 || string(got[0]) != echoV2 {
			t.Fatalf("cache: %s", got)
		}
		if n := df.toolsReported(); n != reported+1 {
			t.Fatalf("the tools list changed across the wake, reported %d times (want 1): the aggregate keeps its stale table and no session is told", n-reported)
		}
	})
}

// Was a defect: the "gone since" mark of a removed server's definitions
// record is cleared only by a prune, and a reload that only adds servers
// does not prune. A pinned server removed (marked gone), added back, kept
// configured for 31 days, then removed again has its record dropped at
// once — its grace counted from the first removal — and, added back,
// trusts whatever it serves as a first list.
func TestARemovalsGraceStartsAgainAfterAReAdd(t *testing.T) {
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
		without := `"other":{"command":"o"}`
		with := `"other":{"command":"o"},"s":{"command":"fake"` + settings + `}`
		reload := func(servers string) {
			if _, err := df.f.Reload(t.Context(), parseCfg(t, servers), false, nil); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		reload(without) // day 0: s removed, its record marked gone
		reload(with)    // s back (an add: no prune, the mark stays)
		time.Sleep(31 * 24 * time.Hour)
		reload(without) // day 31: removed again
		if st.Definitions("s") == nil {
			t.Errorf("the record of a server removed a moment ago was dropped: its grace was counted from its first removal, 31 days before")
		}
		reload(with)
		df.srv.setItems(echoV2, pidTool)
		if err := checkOn(t, df.f.Get("s"), "", "echo", time.Second); !isHeld(err, false) {
			t.Fatalf("the re-added pinned server's changed echo: %v, want held", err)
		}
	})
}

// Was a defect: list_changed notifications are not counted (toolsChanged)
// while the server is unpinned, so a live list learned before an unpin is
// trusted again after a re-pin by reload (a settings change: the process
// keeps running): the tool the process now lists — and which is approved,
// as an unpinned server's approvals follow its list — is refused as held.
func TestRepinningDoesNotTrustAListFromBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		if err := checkOn(t, s, "", "echo", time.Second); err != nil {
			t.Fatal(err)
		}
		reload := func(pin string) {
			if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake","idleTimeout":"0","pin":`+pin+`}`), false, nil); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		reload("false")
		df.srv.setItems(echoV2, pidTool)
		relearn(s) // the process says its tools changed; unpinned, v2 is approved
		reload("true")
		if p := s.Catalog().Definitions().Pending; len(p) != 0 {
			t.Fatalf("pending after re-pin: %+v", p)
		}
		if err := checkOn(t, s, "", "echo", time.Second); err != nil {
			t.Fatalf("re-pinned, the approved echo the process lists is refused: %v", err)
		}
	})
}

// the caller whose learn is under way gives
// up (its ctx ends); a caller waiting on it then learns for itself.
func TestCheckToolWaiterLearnsWhenTheLearnerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, "")
		defer df.close(t)
		l, release := wakeHeld(t, df, s)
		defer release()
		defer l.Release()
		synctest.Wait()
		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		first := make(chan error, 1)
		go func() { first <- s.Catalog().CheckTool(short, l.Process(), "echo") }()
		synctest.Wait()
		second := make(chan error, 1)
		go func() { second <- s.Catalog().CheckTool(t.Context(), l.Process(), "echo") }()
		if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the learner: %v", err)
		}
		synctest.Wait()
		release()
		if err := <-second; err != nil {
			t.Fatalf("the waiter after the learner left: %v", err)
		}
	})
}

// CheckTool's learn is bounded by the
// server's requestTimeout when the caller's ctx has no deadline.
func TestCheckToolBoundedByRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, `,"requestTimeout":"2s"`)
		defer df.close(t)
		l, release := wakeHeld(t, df, s)
		defer release()
		defer l.Release()
		t0 := time.Now()
		if err := s.Catalog().CheckTool(context.Background(), l.Process(), "echo"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("CheckTool = %v", err)
		}
		if d := time.Since(t0); d != 2*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}

// A learn of the tools ends with the fleet: Close cancels it (a server
// with no request timeout, a caller with no deadline), its caller gets an
// error, and nothing of it is left running (synctest fails on a goroutine
// left blocked in the bubble).
func TestCheckToolLearnEndsWithTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := newPinned(t, `,"requestTimeout":"0"`)
		l, release := wakeHeld(t, df, s)
		defer release()
		synctest.Wait()
		errc := make(chan error, 1)
		go func() { errc <- s.Catalog().CheckTool(context.Background(), l.Process(), "echo") }()
		synctest.Wait()
		l.Release()
		df.close(t)
		if err := <-errc; err == nil {
			t.Fatal("a check whose learn the fleet's Close ended succeeded")
		}
	})
}
