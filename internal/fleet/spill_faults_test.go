package fleet

import (
	"encoding/json"
	"testing"
	"testing/synctest"
)

// A pinned server whose definitions, put out of memory while it slept,
// cannot be read back (the record gone, the store closed) fails closed:
// nothing is approved any more, so a tool it changed meanwhile is held and
// not shown, never trusted as a first list.
func TestAPinnedServersToolsHeldWhenItsRecordCannotBeReadBack(t *testing.T) {
	for _, how := range []string{"record gone", "store closed"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := openStore(t)
				df := newDriftFleet(t, `,"idleTimeout":"10m","pin":true`, nil, st)
				defer df.close(t)
				df.srv.setItems(echoV1, pidTool)
				s := df.f.Get("s")
				learnTools(t, s)
				sleepNow(t, s)
				if _, defs := inMemory(s); defs {
					t.Fatal("definitions not spilled")
				}
				switch how {
				case "record gone": // e.g. a faulted state file moved aside and started empty
					if err := st.PutDefinitions("s", nil); err != nil {
						t.Fatal(err)
					}
				case "store closed":
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
				}
				df.srv.setItems(echoV2, pidTool) // echo changed: must be held
				if _, err := use(s.Acquire(t.Context(), "")); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the wake's relearn
				if !s.ToolHeld("echo") {
					t.Error("a changed tool of a pinned server is not held after its definitions could not be read back")
				}
				if s.ToolVisible(json.RawMessage(echoV2)) {
					t.Error("the changed, never approved echo is visible to clients")
				}
			})
		})
	}
}

// After a relaunch, a list the new launch finds unchanged is still not on
// disk under its hash until written: when that write fails, the list
// stays in memory when the server goes dormant.
func TestARelaunchedListNotWrittenStaysInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		s := df.f.Get("s")
		learnTools(t, s)
		// The store refuses writes from now on (as a full disk would;
		// closing is the seam the package's own test uses).
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`), true, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // drain, relearn (same items, persist fails), Rest → dormant → spill
		if st := s.Status().State; st != "dormant" {
			t.Logf("state %s", st)
		}
		items, ok := s.CachedList(Tools)
		if !ok || len(items) != 2 {
			t.Fatalf("the relaunched server's tools, whose write failed, are lost: %q (%v)", items, ok)
		}
	})
}

// A reload that relaunches a dormant server reads its lists back into
// memory before it prunes the store entry they are under: until the
// relearn they are still listed, and a relearn that finds them the same
// reports no change.
func TestARelaunchOfADormantServerReportsNoChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		before := df.toolsReported()
		gate := make(chan struct{})
		df.srv.mu.Lock()
		df.srv.gate = gate // hold the relearn's tools/list
		df.srv.mu.Unlock()
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`), true, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cached := s.Cached(Tools)
		if _, ok := s.CachedList(Tools); !ok && cached {
			t.Error("during the relearn: Cached(Tools) is true but CachedList cannot read it (entry pruned)")
		}
		close(gate)
		synctest.Wait()
		if n := df.toolsReported(); n != before {
			t.Errorf("a relaunch whose tools did not change reported them changed %d time(s)", n-before)
		}
	})
}
